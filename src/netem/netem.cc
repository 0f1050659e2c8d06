#include "netem/netem.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "netem/netns.h"
#include "netem/process.h"
#include "netem/shaping.h"

namespace weft::netem {
namespace {

constexpr const char* kBridge = "br0";
constexpr const char* kEndpointDevice = "eth0";
constexpr const char* kCongestionControl = "reno";
// Linux's tcp_rmem and tcp_wmem (min, default, max bytes): the max is raised for
// a latency (Note [Congestion control of the emulated hosts]).
constexpr Bytes kTcpBufferMin = 4096;
constexpr Bytes kTcpReceiveDefault = 131072;
constexpr Bytes kTcpSendDefault = 16384;
constexpr Bytes kTcpReceiveMax = 6 << 20;
constexpr Bytes kTcpSendMax = 4 << 20;
constexpr double kRoundTripsBuffered = 4;
// 10.77.0.0/16: endpoint k (workers, then servers) is host k + 1.
constexpr int kAddressPrefixLength = 16;
constexpr int kMaxEndpoints = (1 << 16) - 2;

std::string address_of(int endpoint) {
  const int host = endpoint + 1;
  return fmt::format("10.77.{}.{}", host >> 8, host & 0xff);
}

// Workers' ranks are their numbers; a server's rank is given too.
std::string label_of(const Endpoint& e) {
  if (e.role == Role::kWorker) return fmt::format("worker {}", e.index);
  return fmt::format("server {} (rank {})", e.index, e.rank);
}

// The hub's end of an endpoint's link: "w3", "s0".
std::string hub_device(const Endpoint& e) {
  return fmt::format("{}{}", e.role == Role::kWorker ? 'w' : 's', e.index);
}

void check_rate(BytesPerSecond rate, const char* flag) {
  if (!(rate > 0) || !std::isfinite(rate)) {
    throw UsageError(fmt::format("{} {} B/s: a link rate must be a positive number, such as "
                                 "100Mbit, 1Gbit or 10MB/s",
                                 flag, rate));
  }
}

// Whether the endpoint's interface has a carrier: both ends of its veth are up.
bool link_is_up(const std::string& netns) {
  const CommandResult shown = run_command({"ip", "-netns", netns, "-o", "link", "show", "dev", kEndpointDevice});
  if (!shown.succeeded()) return true;  // nothing to say about it
  const std::string flags = shown.output.substr(0, shown.output.find('>'));
  return flags.find("LOWER_UP") != std::string::npos;
}

// Every site, the one implied by uniform links included.
std::vector<Site> sites_of(const NetemOptions& options) {
  if (!options.sites.empty()) return options.sites;
  Site all{.ranks = {}, .bandwidth = options.bandwidth, .latency = options.latency};
  for (int k = 0; k < options.workers + options.servers; ++k) all.ranks.push_back(k);
  return {all};
}

// Whether the hub must be the delaying switch (Note [A delaying switch]): a delay,
// or a WAN to carry (Note [Emulated sites]).
bool needs_switch(const NetemOptions& options) {
  if (options.sites.size() > 1) return true;
  return std::any_of(options.sites.begin(), options.sites.end(), [](const Site& s) { return s.latency > 0; }) ||
         (options.sites.empty() && options.latency > 0);
}

// The sites and the links between them, as cost/topology.h has them.
Topology topology_of(const NetemOptions& options) {
  return {.sites = options.sites, .wan = options.wan, .links = options.links};
}

// The longest one-way delay between two endpoints.
Seconds longest_latency(const NetemOptions& options) {
  Seconds longest = options.sites.size() > 1 ? options.wan.latency : 0;
  for (const WanLink& link : options.links) longest = std::max(longest, link.link.latency);
  for (const Site& site : sites_of(options)) longest = std::max(longest, site.latency);
  return longest;
}

}  // namespace

void validate(const NetemOptions& options) {
  if (options.workers < 1) {
    throw UsageError(fmt::format("--workers {}: at least 1 worker is needed", options.workers));
  }
  if (options.servers < 0) {
    throw UsageError(fmt::format("--servers {}: must be 0 or more", options.servers));
  }
  static_assert(kMaxRanks <= kMaxEndpoints, "every rank needs an address in 10.77.0.0/16");
  if (static_cast<long long>(options.workers) + options.servers > kMaxRanks) {
    throw UsageError(fmt::format("--workers {} --servers {}: at most {} processes (workers + servers) run behind "
                                 "emulated links on one machine",
                                 options.workers, options.servers, kMaxRanks));
  }
  if (options.sites.empty()) {
    check_rate(options.bandwidth, "--bandwidth");
  } else {
    weft::validate(topology_of(options), options.workers + options.servers);
  }
  if (options.server_bandwidth != 0) check_rate(options.server_bandwidth, "--server-bandwidth");
  if (!(options.latency >= 0) || !std::isfinite(options.latency)) {
    throw UsageError(fmt::format("--latency {} s: must be 0 or a positive duration, such as 50us or 2ms",
                                 options.latency));
  }
  if (options.master_port < 1 || options.master_port > 65535) {
    throw UsageError(fmt::format("--port {}: a TCP port is 1..65535", options.master_port));
  }
  check_mtu(options.mtu);
}

void check_mtu(int mtu, std::string_view origin) {
  if (mtu < 68 || mtu > 65535) {
    throw UsageError(fmt::format("{} {}: an IPv4 MTU is 68..65535 bytes (1500 is Ethernet's, 9000 jumbo "
                                 "frames)",
                                 origin, mtu));
  }
}

EmulatedNetwork::EmulatedNetwork(const NetemOptions& options) : options_(options) {
  validate(options_);
  if (!has_network_privileges()) {
    throw UsageError(fmt::format(
        "weft netem needs root: it creates network namespaces (CAP_SYS_ADMIN) and shapes links "
        "with tc (CAP_NET_ADMIN), which this process (uid {}) lacks. Run it as root, for example "
        "`sudo weft netem ...`, or give the binary both capabilities",
        ::getuid()));
  }
  swept_ = sweep_stale_namespaces();

  const std::string prefix = namespace_prefix(::getpid());
  hub_ = prefix + "h";
  const std::vector<Site> sites = sites_of(options_);
  std::vector<int> site_of(static_cast<std::size_t>(options_.workers + options_.servers));
  for (std::size_t s = 0; s < sites.size(); ++s) {
    for (const int rank : sites[s].ranks) site_of[static_cast<std::size_t>(rank)] = static_cast<int>(s);
  }
  for (int k = 0; k < options_.workers + options_.servers; ++k) {
    Endpoint e;
    e.site = site_of[static_cast<std::size_t>(k)];
    const BytesPerSecond site_rate = sites[static_cast<std::size_t>(e.site)].bandwidth;
    const BytesPerSecond server_rate = options_.server_bandwidth > 0 ? options_.server_bandwidth : site_rate;
    e.role = k < options_.workers ? Role::kWorker : Role::kServer;
    e.index = e.role == Role::kWorker ? k : k - options_.workers;
    e.rank = k;
    e.netns = fmt::format("{}{}{}", prefix, e.role == Role::kWorker ? 'w' : 's', e.index);
    e.address = address_of(k);
    e.rate = e.role == Role::kWorker ? site_rate : server_rate;
    endpoints_.push_back(e);
  }
  try {
    build();
  } catch (...) {
    remove_all();
    throw;
  }
}

EmulatedNetwork::~EmulatedNetwork() { remove_all(); }

std::vector<std::string> EmulatedNetwork::namespaces() const { return made_; }

void EmulatedNetwork::build() {
  add_namespace(hub_);
  made_.push_back(hub_);
  run_checked({"ip", "-netns", hub_, "link", "set", "lo", "up"});
  if (!needs_switch(options_)) {
    run_checked({"ip", "-netns", hub_, "link", "add", kBridge, "type", "bridge"});
    run_checked({"ip", "-netns", hub_, "link", "set", kBridge, "up"});
  }
  // A packet crosses its sender's bucket and its receiver's: it must fit the
  // smallest (Note [Token bucket parameters]).
  Bytes gso_max = std::numeric_limits<Bytes>::max();
  for (const Endpoint& e : endpoints_) {
    gso_max = std::min(gso_max, token_bucket_for(e.rate, options_.mtu).gso_max);
  }
  for (const Endpoint& e : endpoints_) {
    // A large network takes a while: a signal stops the building (the caller removes what was made).
    if (const int signal = termination_requested(); signal != 0) throw BuildInterrupted(signal, made_.size());
    add_endpoint(e, gso_max);
  }
  if (needs_switch(options_)) {
    DelayLineOptions line{.netns = hub_, .ports = {}, .delay = options_.latency};
    for (const Endpoint& e : endpoints_) line.ports.push_back(hub_device(e));
    if (!options_.sites.empty()) {  // Note [Emulated sites]; without sites, exactly the uniform delay
      for (const Endpoint& e : endpoints_) line.site_of_port.push_back(e.site);
      for (const Site& site : options_.sites) line.site_latency.push_back(site.latency);
      const Topology topology = topology_of(options_);
      const auto sites = static_cast<int>(options_.sites.size());
      if (sites > 1) {
        for (int a = 0; a < sites; ++a) {
          for (int b = 0; b < sites; ++b) line.wan.push_back(a == b ? Wan{} : between(topology, a, b));
        }
      }
    }
    delay_line_ = std::make_unique<DelayLine>(line);
  }
}

void EmulatedNetwork::add_endpoint(const Endpoint& e, Bytes gso_max) {
  add_namespace(e.netns);
  made_.push_back(e.netns);
  const std::string hub_end = hub_device(e);
  const std::string mtu = std::to_string(options_.mtu);
  // The pair is made inside the hub, with one end moved straight into the endpoint,
  // so no interface ever appears in the caller's namespace (where names of parallel
  // runs could clash).
  run_checked({"ip", "-netns", e.netns, "link", "set", "lo", "up"});
  const std::string gso = std::to_string(gso_max);
  run_checked({"ip", "-netns", hub_, "link", "add", hub_end, "mtu", mtu, "gso_max_size", gso, "type",
               "veth", "peer", "name", kEndpointDevice, "mtu", mtu, "gso_max_size", gso, "netns",
               e.netns});
  if (!needs_switch(options_)) {
    run_checked({"ip", "-netns", hub_, "link", "set", hub_end, "master", kBridge, "up"});
  } else {
    run_checked({"ip", "-netns", hub_, "link", "set", hub_end, "up"});  // a port of the delaying switch
  }
  run_checked({"ip", "-netns", e.netns, "addr", "add",
               fmt::format("{}/{}", e.address, kAddressPrefixLength), "dev", kEndpointDevice});
  run_checked({"ip", "-netns", e.netns, "link", "set", kEndpointDevice, "up"});
  // Note [Congestion control of the emulated hosts] in netem.h.
  run_checked({"ip", "netns", "exec", e.netns, "sysctl", "-q", "-w",
               fmt::format("net.ipv4.tcp_congestion_control={}", kCongestionControl)});
  if (const Seconds latency = longest_latency(options_); latency > 0) {
    const auto in_flight = static_cast<Bytes>(std::ceil(kRoundTripsBuffered * e.rate * 2 * latency));
    run_checked({"ip", "netns", "exec", e.netns, "sysctl", "-q", "-w",
                 fmt::format("net.ipv4.tcp_rmem={} {} {}", kTcpBufferMin, kTcpReceiveDefault,
                             std::max(kTcpReceiveMax, in_flight)),
                 fmt::format("net.ipv4.tcp_wmem={} {} {}", kTcpBufferMin, kTcpSendDefault,
                             std::max(kTcpSendMax, in_flight))});
  }

  const TokenBucket bucket = token_bucket_for(e.rate, options_.mtu);
  try {
    for (const auto& [netns, device] : {std::pair{e.netns, std::string(kEndpointDevice)},
                                        std::pair{hub_, hub_end}}) {
      for (const auto& command : shaping_commands(netns, device, bucket)) {
        run_checked(command);
      }
    }
  } catch (const std::runtime_error& error) {
    throw std::runtime_error(fmt::format("shaping the link of {} to {} ({} B/s) failed: {}",
                                         label_of(e), tc_rate(e.rate), e.rate, error.what()));
  }
}

void EmulatedNetwork::remove_all() noexcept {
  delay_line_.reset();  // its sockets would keep the hub alive
  // Endpoints first, then the hub: the reverse of creation.
  for (auto it = made_.rbegin(); it != made_.rend(); ++it) {
    try {
      delete_namespace(*it);
    } catch (const std::exception& error) {
      // A destructor has no caller to tell; say what to do by hand.
      std::fprintf(stderr, "weft netem: could not remove network namespace %s (%s); "
                           "remove it with `ip netns delete %s`\n",
                   it->c_str(), error.what(), it->c_str());
    }
  }
  made_.clear();
}

// GLOO_SOCKET_IFNAME: PyTorch's Gloo otherwise binds the address its host name
// resolves to, which inside a namespace is loopback: a user's torch.distributed
// script under `weft run --bandwidth` would then never reach its peers.
std::vector<std::string> EmulatedNetwork::environment_for(const Endpoint& e) const {
  std::vector<std::string> env = {
      fmt::format("GLOO_SOCKET_IFNAME={}", kEndpointDevice),
      "MASTER_ADDR=" + endpoints_.front().address,
      fmt::format("MASTER_PORT={}", options_.master_port),
      fmt::format("RANK={}", e.rank),
      fmt::format("WORLD_SIZE={}", endpoints_.size()),
      fmt::format("LOCAL_RANK={}", e.rank),
      fmt::format("LOCAL_WORLD_SIZE={}", endpoints_.size()),
      fmt::format("WEFT_ROLE={}", e.role == Role::kWorker ? "worker" : "server"),
      fmt::format("WEFT_WORKERS={}", options_.workers),
      fmt::format("WEFT_SERVERS={}", options_.servers),
  };
  if (e.role == Role::kServer) env.push_back(fmt::format("WEFT_SERVER_RANK={}", e.index));
  if (!options_.sites.empty()) {
    env.push_back(fmt::format("WEFT_SITE={}", e.site));
    env.push_back(fmt::format("WEFT_SITES={}", options_.sites.size()));
  }
  return env;
}

RunReport run_emulated(const NetemOptions& network,
                       const std::vector<std::vector<std::string>>& argv_per_rank,
                       const SuperviseOptions& supervision,
                       const std::vector<std::string>& environment) {
  validate(network);
  const std::size_t ranks = static_cast<std::size_t>(network.workers) + network.servers;
  if (argv_per_rank.size() != ranks) {
    throw std::logic_error(fmt::format("run_emulated: {} commands for {} workers + {} servers",
                                       argv_per_rank.size(), network.workers, network.servers));
  }
  for (std::size_t r = 0; r < ranks; ++r) {
    if (argv_per_rank[r].empty()) throw std::logic_error(fmt::format("run_emulated: rank {} has an empty command", r));
    require_executable(argv_per_rank[r][0], fmt::format("rank {}", r));
  }
  // Installed before the network exists, so that Ctrl-C during set-up stops the
  // building or is noticed by supervise(), and everything is still removed.
  TerminationSignals signals;
  std::optional<EmulatedNetwork> built;
  try {
    built.emplace(network);
  } catch (const BuildInterrupted& interrupted) {
    RunReport report;
    report.exit_status = 128 + interrupted.signal;
    const char* abbrev = ::sigabbrev_np(interrupted.signal);
    report.message = fmt::format("interrupted by SIG{} while building the emulated network; the {} network "
                                 "namespaces made so far were removed",
                                 abbrev != nullptr ? abbrev : "?", interrupted.made);
    return report;
  }
  const EmulatedNetwork& emulated = *built;
  std::vector<ProcessSpec> specs;
  for (const Endpoint& e : emulated.endpoints()) {
    std::vector<std::string> variables = emulated.environment_for(e);
    for (const std::string& extra : environment) {
      const std::string_view name = std::string_view(extra).substr(0, extra.find('=') + 1);
      const bool in_contract = std::any_of(variables.begin(), variables.end(),
                                           [&](const std::string& v) { return v.starts_with(name); });
      if (!in_contract) variables.push_back(extra);
    }
    specs.push_back({.label = label_of(e),
                     .argv = argv_per_rank[static_cast<std::size_t>(e.rank)],
                     .environment = std::move(variables),
                     .netns = e.netns,
                     .cores = pinning_for(e.rank, static_cast<int>(ranks), network.cores)});
  }
  RunReport report = supervise(specs, supervision, signals);
  if (report.exit_status != 0) {
    // A rank cut off from the others makes them all time out: say which one was.
    for (std::size_t r = 0; r < emulated.endpoints().size(); ++r) {
      const Endpoint& e = emulated.endpoints()[r];
      if (link_is_up(e.netns)) continue;
      report.message = fmt::format("{} was unreachable: its link ({} in {}) was down; {}", label_of(e),
                                   kEndpointDevice, e.netns, report.message);
      if (report.exit_status < 128) report.exit_status = 1;
    }
  }
  return report;
}

}  // namespace weft::netem
