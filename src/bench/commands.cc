#include "bench/commands.h"

#include <algorithm>
#include <charconv>
#include <stdexcept>

#include <fmt/format.h>

#include "bench/results.h"
#include "netem/shaping.h"
#include "schedule/encoding.h"
#include "schedulers/strategies.h"

namespace weft::bench {
namespace {

// Rates and sizes exactly, in the units every weft flag accepts bare (bytes/s,
// bytes): no rounding through "100Mbit" and back.
std::string exact(double value) { return fmt::format("{}", value); }

// --cores for a program that starts the job's processes; none for the default.
std::vector<std::string> placement(const Tools& tools) {
  if (tools.cores == CorePlacement::kAuto) return {};
  return {"--cores", std::string(to_string(tools.cores))};
}

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The bandwidth the planner is given: the emulated link's rate, except that
// parameter-server costs, which use the bandwidth alone, get what TCP delivers
// over it; all-reduce costs follow the fit (1 Gbit/s on loopback only so that the
// flag has a valid value).
std::string planned_bandwidth(const Tools& tools, const Link& link, int servers) {
  if (!link.emulated()) return "1Gbit";
  return exact(servers > 0 ? netem::payload_rate(link.bandwidth, tools.mtu) : link.bandwidth);
}

// --profile, --network and, where the bench measured one, --host. A sited run
// (Note [Sites in the bench] in bench.h) gets no --network: the fit measured one
// flat ring, and the planner refuses it beside sites.
std::vector<std::string> file_flags(const LinkFiles& files, bool sited = false) {
  std::vector<std::string> flags{"--profile", files.profile};
  if (!sited) flags = concat(flags, {"--network", files.network});
  if (!files.host.empty()) flags = concat(flags, {"--host", files.host});
  return flags;
}

// The links a sited run is planned for: each site's rate and delay, and the
// sites (a topology file gives them all).
std::vector<std::string> sited_link_flags(const Link& link) {
  if (!link.sites.topology.empty()) return site_flags(link);
  std::vector<std::string> flags{"--bandwidth", exact(link.bandwidth)};
  if (link.latency > 0) flags = concat(flags, {"--latency", exact(link.latency)});
  return concat(flags, site_flags(link));
}

// `servers` > 0: a parameter-server cluster, each server's link the workers'.
// file_flags too.
std::vector<std::string> cluster_flags(const Tools& tools, const Link& link, const LinkFiles& files, int servers,
                                       bool sited = false) {
  std::vector<std::string> flags = concat(file_flags(files, sited), {"--workers", std::to_string(tools.workers)});
  if (sited) return concat(flags, sited_link_flags(link));
  flags = concat(flags, {"--bandwidth", planned_bandwidth(tools, link, servers)});
  if (servers > 0) flags = concat(flags, {"--arch", "ps", "--servers", std::to_string(servers)});
  return flags;
}

// --hierarchical and --site-every N of a mode other than flat.
std::vector<std::string> mode_flags(const SiteMode& mode) {
  std::vector<std::string> flags;
  if (mode.hierarchical) flags.push_back("--hierarchical");
  if (mode.site_every > 0) flags = concat(flags, {"--site-every", std::to_string(mode.site_every)});
  return flags;
}

int servers_of(const Training& training, const std::string& strategy) {
  return uses_servers(strategy) ? training.servers : 0;
}

std::vector<std::string> training_flags(const Training& t) {
  std::vector<std::string> flags{"--model", t.model, "--batch", std::to_string(t.batch), "--lr", exact(t.lr),
                                 "--optimizer", t.optimizer, "--seed", std::to_string(t.seed),
                                 "--steps", std::to_string(t.steps)};
  if (t.eval_every > 0) flags = concat(flags, {"--eval-every", std::to_string(t.eval_every)});
  return flags;
}

}  // namespace

bool uses_servers(const std::string& strategy) { return find_strategy(strategy).arch == Arch::kParameterServer; }

SiteMode parse_site_mode(const std::string& text) {
  const auto bad = [&] {
    return UsageError(fmt::format("--site-averaging {}: not a way to average across sites; accepted: {}", text,
                                  kSiteModesAccepted));
  };
  if (text == "flat") return {};
  SiteMode mode;
  std::string_view rest = text;
  if (rest.starts_with("hierarchical")) {
    mode.hierarchical = true;
    rest.remove_prefix(std::string_view("hierarchical").size());
    if (rest.empty()) return mode;
    if (!rest.starts_with("+")) throw bad();
    rest.remove_prefix(1);
  }
  constexpr std::string_view kEvery = "site-every:";
  if (!rest.starts_with(kEvery)) throw bad();
  rest.remove_prefix(kEvery.size());
  const auto [end, error] = std::from_chars(rest.data(), rest.data() + rest.size(), mode.site_every);
  if (rest.empty() || error != std::errc{} || end != rest.data() + rest.size() || mode.site_every < 1 ||
      mode.site_every > 1'000'000) {
    throw bad();
  }
  return mode;
}

std::string to_string(const SiteMode& mode) {
  if (mode.flat()) return "flat";
  const std::string every = mode.site_every > 0 ? fmt::format("site-every:{}", mode.site_every) : "";
  if (!mode.hierarchical) return every;
  return every.empty() ? "hierarchical" : "hierarchical+" + every;
}

std::string site_mode_refusal(const std::string& strategy, const SiteMode& mode, int H) {
  const StrategyInfo& info = find_strategy(strategy);
  if (mode.hierarchical && info.arch != Arch::kAllReduce) {
    return fmt::format("{} does not run hierarchical: not an all-reduce strategy", strategy);
  }
  if (mode.site_every > 0 && info.family != Family::kLocalSgd) {
    return fmt::format("{} does not run site-every:{}: not a local SGD strategy", strategy, mode.site_every);
  }
  if (mode.site_every > 0 && H % mode.site_every != 0) {
    return fmt::format("{} does not run site-every:{}: it does not divide --H {}", strategy, mode.site_every, H);
  }
  return "";
}

void set_site_mode(nlohmann::json& options, const SiteMode& mode) {
  if (!options.is_object()) options = nlohmann::json::object();
  options.erase("hierarchical");
  options.erase("site_every");
  if (mode.hierarchical) options["hierarchical"] = true;
  if (mode.site_every > 0) options["site_every"] = mode.site_every;
}

SiteMode site_mode_of(const nlohmann::json& options) {
  SiteMode mode;
  if (!options.is_object()) return mode;
  if (const auto it = options.find("hierarchical"); it != options.end() && it->is_boolean()) {
    mode.hierarchical = it->get<bool>();
  }
  if (const auto it = options.find("site_every"); it != options.end() && it->is_number_integer()) {
    mode.site_every = it->get<int>();
  }
  return mode;
}

std::vector<std::string> site_flags(const Link& link) {
  const Sites& s = link.sites;
  if (!s.topology.empty()) return {"--topology", s.topology};
  if (s.sites.empty()) return {};
  std::vector<std::string> flags{"--sites", s.sites, "--wan-bandwidth", s.wan_bandwidth};
  if (!s.wan_latency.empty()) flags = concat(flags, {"--wan-latency", s.wan_latency});
  return flags;
}

std::vector<std::string> under_netem(const Tools& tools, const Link& link, const std::vector<std::string>& argv,
                                     int servers) {
  if (!link.emulated()) throw std::logic_error(fmt::format("under_netem: link {} is not emulated", link.name));
  if (servers < 0) throw std::logic_error(fmt::format("under_netem: servers = {} < 0", servers));
  if (servers > 0 && !link.sites.empty()) {
    throw std::logic_error(fmt::format("under_netem: {} servers on link {}, whose sites hold the workers only",
                                       servers, link.name));
  }
  std::vector<std::string> netem{tools.weft, "netem", "--workers", std::to_string(tools.workers)};
  if (servers > 0) netem = concat(netem, {"--servers", std::to_string(servers)});
  // A topology file gives every link; otherwise --bandwidth and --latency are
  // each rank's link (each site's, with --sites).
  if (link.sites.topology.empty()) netem = concat(netem, {"--bandwidth", exact(link.bandwidth)});
  // A generous grace: a rank that lost a peer needs the failure timeout of its
  // collectives to notice, and its own message is worth more than a SIGTERM.
  netem = concat(netem, {"--mtu", std::to_string(tools.mtu), "--port", std::to_string(tools.port), "--grace", "30s"});
  // Every run of the link sees its delay: the network fit measured before the
  // runs, so the planner's predictions carry it too.
  if (link.latency > 0 && link.sites.topology.empty()) netem = concat(netem, {"--latency", exact(link.latency)});
  // Every run of the link in the same sites, peers included (Note [Sites in the bench]).
  netem = concat(netem, site_flags(link));
  netem = concat(concat(netem, placement(tools)), {"--"});
  return concat(netem, argv);
}

namespace {

// P processes of the program's own launcher on loopback, placed as the emulated
// hosts are (Note [Hosts on cores], units/cores.h).
std::vector<std::string> local_processes(const Tools& tools) {
  return concat({"--nproc", std::to_string(tools.workers)}, placement(tools));
}

// One process of Note [Profiling under contention], timing `iterations` after
// `warmup`.
std::vector<std::string> model_profile_argv(const Tools& tools, const Training& training, int warmup,
                                            int iterations, const std::string& out) {
  return {tools.weft, "profile", "--model", training.model, "--batch", std::to_string(training.batch),
          "--threads", "1", "--seed", std::to_string(training.seed), "--warmup", std::to_string(warmup),
          "--iterations", std::to_string(iterations), "--out", out};
}

// 200 timed iterations: over 50, which of the 4 processes share a core stays the
// same long enough to bias the whole profile (cnn, 4 processes on 2 cores:
// 26.8–36.1 ms per iteration in eight profiles; with 200, 32.9–35.8 in four).
std::vector<std::string> model_profile_argv(const Tools& tools, const Training& training, const std::string& out) {
  return model_profile_argv(tools, training, 10, 200, out);
}

}  // namespace

std::vector<std::string> model_profile_command(const Tools& tools, const Training& training,
                                               const std::string& out) {
  return concat(model_profile_argv(tools, training, out), local_processes(tools));
}

std::vector<std::string> retime_command(const Tools& tools, const Training& training, const std::string& out) {
  return concat(model_profile_argv(tools, training, 5, 100, out), local_processes(tools));
}

std::vector<std::string> link_profile_command(const Tools& tools, const Link& link, const Training& training,
                                              const std::string& out, const std::string& host) {
  const std::vector<std::string> argv =
      concat(model_profile_argv(tools, training, out), {"--interference", "--host", host});
  if (link.emulated()) return under_netem(tools, link, argv);
  return concat(argv, local_processes(tools));
}

std::vector<std::string> network_profile_command(const Tools& tools, const Link& link, Bytes max_bytes,
                                                 const std::string& out) {
  // 15 rounds, small sizes several times in each (Note [Sizes in rounds]): with
  // more workers than cores, single all-reduces of a few KiB vary by a factor of
  // 2 with the scheduling of the processes.
  const std::vector<std::string> argv{tools.weft, "profile", "--network", "--max-bytes", std::to_string(max_bytes),
                                      "--repeats", "15", "--out", out};
  if (link.emulated()) return under_netem(tools, link, argv);
  return concat(argv, local_processes(tools));
}

std::vector<std::string> plan_command(const Tools& tools, const Link& link, const Training& training,
                                      const LinkFiles& files, const std::vector<std::string>& strategies,
                                      const std::string& encoding, const SiteMode& mode) {
  if (strategies.empty()) throw std::logic_error("plan_command: no strategy to plan");
  if (!mode.flat() && link.sites.empty()) {
    throw std::logic_error(fmt::format("plan_command: {} on link {}, which has no sites", to_string(mode), link.name));
  }
  const bool ps = uses_servers(strategies.front());
  for (const std::string& s : strategies) {
    if (uses_servers(s) != ps) {
      throw std::logic_error(
          fmt::format("plan_command: {} and {} run on different architectures", strategies.front(), s));
    }
  }
  std::vector<std::string> argv =
      concat({tools.weft, "plan"}, cluster_flags(tools, link, files, ps ? training.servers : 0, !mode.flat()));
  argv = concat(argv, {"--H", std::to_string(training.H), "--json"});
  if (encoding != "none") argv = concat(argv, {"--compression", encoding});
  argv = concat(argv, mode_flags(mode));
  std::vector<std::string> names;
  if (!ps && mode.flat()) names = {"wfbp", "ddp"};
  for (const std::string& s : strategies) {
    if (std::find(names.begin(), names.end(), s) == names.end()) names.push_back(s);
  }
  for (const std::string& s : names) argv = concat(argv, {"--strategy", s});
  return argv;
}

std::vector<std::string> simulate_command(const Tools& tools, const Link& link, const Training& training,
                                          const LinkFiles& files, const std::string& strategy,
                                          const nlohmann::json& options, const std::string& trace) {
  const bool sited = !site_mode_of(options).flat();
  std::vector<std::string> argv = concat({tools.weft, "simulate", "--strategy", strategy},
                                         cluster_flags(tools, link, files, servers_of(training, strategy), sited));
  argv = concat(argv, {"--H", std::to_string(training.H)});
  argv = concat(argv, strategy_flags(options));
  argv = concat(argv, {"--json"});
  return trace.empty() ? argv : concat(argv, {"--trace", trace});
}

std::vector<std::string> simulate_schedule_command(const Tools& tools, const Link& link, const Training& training,
                                                   const LinkFiles& files, const std::string& strategy,
                                                   const std::string& schedule, bool sited) {
  return concat(concat({tools.weft, "simulate", "--schedule", schedule},
                       cluster_flags(tools, link, files, servers_of(training, strategy), sited)),
                {"--json"});
}

std::vector<std::string> train_command(const Tools& tools, const Link& link, const Training& training,
                                       const std::string& strategy, const nlohmann::json& options,
                                       const LinkFiles& files, const std::string& metrics,
                                       const std::string& trace) {
  const int servers = servers_of(training, strategy);
  std::vector<std::string> argv = concat({tools.weft, "train", "--strategy", strategy}, training_flags(training));
  if (servers > 0) argv = concat(argv, {"--servers", std::to_string(servers)});
  argv = concat(argv, {"--H", std::to_string(training.H)});
  if (training.outer_optimizer != "none" && find_strategy(strategy).moves_parameters) {
    argv = concat(argv, {"--outer-optimizer", training.outer_optimizer});
    if (training.outer_lr) argv = concat(argv, {"--outer-lr", exact(*training.outer_lr)});
    if (training.outer_momentum) argv = concat(argv, {"--outer-momentum", exact(*training.outer_momentum)});
  }
  argv = concat(argv, strategy_flags(options));
  // Note [Sites in the bench]: a sited run plans for the sites it runs in.
  const bool sited = !site_mode_of(options).flat() && !link.sites.empty();
  argv = concat(concat(argv, file_flags(files, sited)), {"--metrics", metrics, "--no-progress"});
  if (sited) {
    argv = concat(argv, sited_link_flags(link));
  } else if (link.emulated()) {
    argv = concat(argv, {"--bandwidth", planned_bandwidth(tools, link, servers)});
  }
  if (!trace.empty()) argv = concat(argv, {"--trace", trace});
  if (link.emulated()) return under_netem(tools, link, argv, servers);
  return concat(argv, local_processes(tools));
}

std::vector<std::string> ddp_command(const Tools& tools, const Link& link, const Training& training,
                                     const std::string& remedy, std::int64_t parameters, double target_accuracy,
                                     const std::string& metrics) {
  std::vector<std::string> script = concat({tools.ddp_peer}, training_flags(training));
  script = concat(script, {"--remedy", remedy, "--expect-parameters", std::to_string(parameters), "--metrics", metrics});
  if (target_accuracy > 0) script = concat(script, {"--target-accuracy", exact(target_accuracy)});
  if (link.emulated()) return under_netem(tools, link, concat({tools.python}, script));
  return concat(concat({tools.python}, script),
                concat(local_processes(tools), {"--port", std::to_string(tools.port)}));
}

Contender weft_contender(const std::string& strategy, const std::string& encoding, const SiteMode& mode) {
  const Encoding e = parse_encoding(encoding, "--compression");
  if (find_strategy(strategy).family == Family::kParameterServer) check_exchange_encoding(e, strategy);
  const std::string canonical = to_string(e);
  std::string name = lossy(e) ? strategy + "+" + canonical : strategy;
  if (!mode.flat()) name += "@" + to_string(mode);
  return {.name = name, .strategy = strategy, .encoding = canonical, .sites = mode};
}

Contender peer_contender(const std::string& peer) {
  const auto bad = [&] {
    return UsageError(fmt::format("--peers {}: not a peer; accepted: {}", peer, kPeersAccepted));
  };
  if (peer == "ddp") return {.name = kDdpPeerStrategy, .strategy = "ddp", .remedy = "none"};
  if (peer == "fp16") return {.name = fmt::format("{}+fp16", kDdpPeerStrategy), .strategy = "ddp", .encoding = "fp16",
                              .remedy = "fp16"};
  const std::size_t colon = peer.find(':');
  const std::string kind = peer.substr(0, colon);
  if (colon == std::string::npos || (kind != "powersgd" && kind != "postlocalsgd" && kind != "hierarchical")) {
    throw bad();
  }
  const auto integer = [&](std::string_view value) {
    int n = 0;
    const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), n);
    if (value.empty() || error != std::errc{} || end != value.data() + value.size() || n < 1 || n > 1'000'000) {
      throw bad();
    }
    return n;
  };
  const std::string value = peer.substr(colon + 1);
  if (kind == "hierarchical") {
    // hierarchical:H or hierarchical:h:H: each site every h, everyone every H.
    const std::size_t second = value.find(':');
    const int h = second == std::string::npos ? 1 : integer(std::string_view(value).substr(0, second));
    const int H = integer(second == std::string::npos ? value : value.substr(second + 1));
    if (h >= H || H % h != 0) throw bad();  // torch averages the largest period dividing the step
    return {.name = "pytorch-" + (h == 1 ? fmt::format("hierarchical:{}", H) : peer),
            .strategy = "flsgd",
            .remedy = fmt::format("hierarchical:{}:{}", h, H),
            .period = H};
  }
  const int n = integer(value);
  if (kind == "powersgd") {
    return {.name = fmt::format("{}+{}", kDdpPeerStrategy, peer), .strategy = "ddp", .encoding = peer, .remedy = peer};
  }
  return {.name = "pytorch-" + peer, .strategy = "flsgd", .remedy = peer, .period = n};
}

std::vector<std::string> probe_command(const Tools& tools, const Training& training, const std::string& strategy,
                                       const Link& link, const SiteMode& mode) {
  std::vector<std::string> argv{tools.weft, "train", "--model", training.model, "--strategy", strategy};
  if (const int servers = servers_of(training, strategy); servers > 0) {
    argv = concat(argv, {"--servers", std::to_string(servers)});
  }
  if (!mode.flat()) {
    argv = concat(argv, {"--H", std::to_string(training.H)});
    argv = concat(argv, mode_flags(mode));
    if (!link.sites.empty()) argv = concat(argv, sited_link_flags(link));
  }
  return concat(argv, {"--steps", "0"});
}

std::vector<std::string> strategy_flags(const nlohmann::json& options) {
  std::vector<std::string> flags;
  if (!options.is_object()) return flags;
  const auto bytes = [&](const char* key, const char* flag) {
    if (const auto it = options.find(key); it != options.end() && it->is_number_integer()) {
      flags.push_back(flag);
      flags.push_back(std::to_string(it->get<std::int64_t>()));
    }
  };
  bytes("partition_B", "--partition");
  bytes("credit_B", "--credit");
  if (const auto it = options.find("compression"); it != options.end() && it->is_string()) {
    flags.push_back("--compression");
    flags.push_back(it->get<std::string>());
  }
  return concat(flags, mode_flags(site_mode_of(options)));
}

}  // namespace weft::bench
