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

// `servers` > 0: a parameter-server cluster, each server's link the workers'.
// --profile, --network and, where the bench measured one, --host.
std::vector<std::string> file_flags(const LinkFiles& files) {
  std::vector<std::string> flags{"--profile", files.profile, "--network", files.network};
  if (!files.host.empty()) flags = concat(flags, {"--host", files.host});
  return flags;
}

// file_flags too.
std::vector<std::string> cluster_flags(const Tools& tools, const Link& link, const LinkFiles& files, int servers) {
  std::vector<std::string> flags = concat(
      file_flags(files), {"--workers", std::to_string(tools.workers), "--bandwidth", planned_bandwidth(tools, link, servers)});
  if (servers > 0) flags = concat(flags, {"--arch", "ps", "--servers", std::to_string(servers)});
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

std::vector<std::string> under_netem(const Tools& tools, const Link& link, const std::vector<std::string>& argv,
                                     int servers) {
  if (!link.emulated()) throw std::logic_error(fmt::format("under_netem: link {} is not emulated", link.name));
  if (servers < 0) throw std::logic_error(fmt::format("under_netem: servers = {} < 0", servers));
  std::vector<std::string> netem{tools.weft, "netem", "--workers", std::to_string(tools.workers)};
  if (servers > 0) netem = concat(netem, {"--servers", std::to_string(servers)});
  // A generous grace: a rank that lost a peer needs the failure timeout of its
  // collectives to notice, and its own message is worth more than a SIGTERM.
  netem = concat(netem, {"--bandwidth", exact(link.bandwidth), "--mtu", std::to_string(tools.mtu), "--port",
                         std::to_string(tools.port), "--grace", "30s"});
  // Every run of the link sees its delay: the network fit measured before the
  // runs, so the planner's predictions carry it too.
  if (link.latency > 0) netem = concat(netem, {"--latency", exact(link.latency)});
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
                                      const std::string& encoding) {
  if (strategies.empty()) throw std::logic_error("plan_command: no strategy to plan");
  const bool ps = uses_servers(strategies.front());
  for (const std::string& s : strategies) {
    if (uses_servers(s) != ps) {
      throw std::logic_error(
          fmt::format("plan_command: {} and {} run on different architectures", strategies.front(), s));
    }
  }
  std::vector<std::string> argv =
      concat({tools.weft, "plan"}, cluster_flags(tools, link, files, ps ? training.servers : 0));
  argv = concat(argv, {"--H", std::to_string(training.H), "--json"});
  if (encoding != "none") argv = concat(argv, {"--compression", encoding});
  std::vector<std::string> names;
  if (!ps) names = {"wfbp", "ddp"};
  for (const std::string& s : strategies) {
    if (std::find(names.begin(), names.end(), s) == names.end()) names.push_back(s);
  }
  for (const std::string& s : names) argv = concat(argv, {"--strategy", s});
  return argv;
}

std::vector<std::string> simulate_command(const Tools& tools, const Link& link, const Training& training,
                                          const LinkFiles& files, const std::string& strategy,
                                          const nlohmann::json& options, const std::string& trace) {
  std::vector<std::string> argv = concat({tools.weft, "simulate", "--strategy", strategy},
                                         cluster_flags(tools, link, files, servers_of(training, strategy)));
  argv = concat(argv, {"--H", std::to_string(training.H)});
  argv = concat(argv, strategy_flags(options));
  argv = concat(argv, {"--json"});
  return trace.empty() ? argv : concat(argv, {"--trace", trace});
}

std::vector<std::string> simulate_schedule_command(const Tools& tools, const Link& link, const Training& training,
                                                   const LinkFiles& files, const std::string& strategy,
                                                   const std::string& schedule) {
  return concat(concat({tools.weft, "simulate", "--schedule", schedule},
                       cluster_flags(tools, link, files, servers_of(training, strategy))),
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
    argv = concat(argv, {"--outer-optimizer", training.outer_optimizer, "--outer-lr", exact(training.outer_lr),
                         "--outer-momentum", exact(training.outer_momentum)});
  }
  argv = concat(argv, strategy_flags(options));
  argv = concat(concat(argv, file_flags(files)), {"--metrics", metrics, "--no-progress"});
  if (link.emulated()) argv = concat(argv, {"--bandwidth", planned_bandwidth(tools, link, servers)});
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

Contender weft_contender(const std::string& strategy, const std::string& encoding) {
  const Encoding e = parse_encoding(encoding, "--compression");
  if (find_strategy(strategy).family == Family::kParameterServer) check_exchange_encoding(e, strategy);
  const std::string canonical = to_string(e);
  return {.name = lossy(e) ? strategy + "+" + canonical : strategy, .strategy = strategy, .encoding = canonical};
}

Contender peer_contender(const std::string& peer) {
  constexpr std::string_view kAccepted = "ddp, fp16, powersgd:R, postlocalsgd:H (R, H integers >= 1)";
  const auto bad = [&] { return UsageError(fmt::format("--peers {}: not a peer; accepted: {}", peer, kAccepted)); };
  if (peer == "ddp") return {.name = kDdpPeerStrategy, .strategy = "ddp", .remedy = "none"};
  if (peer == "fp16") return {.name = fmt::format("{}+fp16", kDdpPeerStrategy), .strategy = "ddp", .encoding = "fp16",
                              .remedy = "fp16"};
  const std::size_t colon = peer.find(':');
  const std::string kind = peer.substr(0, colon);
  if (colon == std::string::npos || (kind != "powersgd" && kind != "postlocalsgd")) throw bad();
  const std::string value = peer.substr(colon + 1);
  int n = 0;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), n);
  if (value.empty() || error != std::errc{} || end != value.data() + value.size() || n < 1 || n > 1'000'000) throw bad();
  if (kind == "powersgd") {
    return {.name = fmt::format("{}+{}", kDdpPeerStrategy, peer), .strategy = "ddp", .encoding = peer, .remedy = peer};
  }
  return {.name = "pytorch-" + peer, .strategy = "flsgd", .remedy = peer, .period = n};
}

std::vector<std::string> probe_command(const Tools& tools, const Training& training, const std::string& strategy) {
  std::vector<std::string> argv{tools.weft, "train", "--model", training.model, "--strategy", strategy};
  if (const int servers = servers_of(training, strategy); servers > 0) {
    argv = concat(argv, {"--servers", std::to_string(servers)});
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
  return flags;
}

}  // namespace weft::bench
