// `weft bench`: the end-to-end comparison (docs/cli.md §5). The flags become a
// bench::BenchOptions; the work is in bench/bench.h. Progress goes to stderr, the
// table to stdout, everything else to --out.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/bench.h"
#include "bench/report.h"
#include "cli/cluster_flags.h"
#include "cli/commands.h"
#include "cli/emulated_training.h"
#include "cost/topology.h"
#include "netem/supervisor.h"
#include "runtime/model/model.h"
#include "runtime/model/optimizer.h"
#include "runtime/model/outer_optimizer.h"
#include "schedule/encoding.h"
#include "units/cores.h"
#include "units/files.h"
#include "units/limits.h"
#include "units/units.h"

namespace weft::cli {
namespace {

namespace fs = std::filesystem;

// Defaults, with the reason for each.
struct BenchDefaults {
  // Enough for a steady state after the warm-up, short enough that the default
  // bench (3 links × every strategy and DDP) takes minutes, not hours.
  static constexpr std::int64_t kSteps = 60;
  // Accuracy mode: a cap, in case a strategy never reaches the target; about
  // four epochs of Fashion-MNIST at 4 workers × 32.
  static constexpr std::int64_t kAccuracySteps = 2000;
  // Accuracy mode: evaluations cost a pass over the 10,000 test images on rank 0.
  static constexpr int kEvalEvery = 50;
  static constexpr int kWarmup = 5;
  static constexpr double kTargetAccuracy = 0.85;
};

struct BenchFlags {
  std::string model = "cnn";
  int workers = 4;
  std::vector<std::string> bandwidths{"20Mbit", "100Mbit", "1Gbit"};
  std::vector<std::string> strategies;
  std::optional<std::int64_t> steps;
  std::string mode = "iterations";
  double target = BenchDefaults::kTargetAccuracy;
  std::optional<int> eval_every;
  int warmup = BenchDefaults::kWarmup;
  int repeats = 1;
  int batch = 32;
  double lr = 0.05;
  std::string optimizer = "sgd";
  runtime::OuterOptions outer;
  bool verbose = false;
  std::uint64_t seed = 0;
  std::vector<std::uint64_t> seeds;
  int H = 5;
  int servers = 1;
  std::string out = "build/weft-bench";
  bool no_ddp = false;
  std::vector<std::string> peers{"ddp"};
  std::vector<std::string> compression{"none"};
  bool loopback = false;
  std::string latency;  // empty: no delay on the emulated links
  bool bandwidths_given = false;
  SiteFlags sites;  // --sites/--wan-*/--topology (Note [Sites in the bench], bench/bench.h)
  std::vector<std::string> site_averaging{"flat"};
  std::string python = "/usr/bin/python3";
  std::string ddp_peer;
  std::string trace_strategy;
  int port = 29600;
  int mtu = 1500;
  std::string cores = "auto";
  std::string run_timeout = "1800s";
  std::string report;
};

// The peer script beside this binary (the build copies tools/ddp_peer.py there),
// or in ../share/weft (where `make install` puts it).
std::string default_ddp_peer() {
  const fs::path bin = fs::read_symlink("/proc/self/exe").parent_path();
  const fs::path installed = bin.parent_path() / "share" / "weft" / "ddp_peer.py";
  return (fs::is_regular_file(installed) ? installed : bin / "ddp_peer.py").string();
}

// The flags a typo in which would otherwise cost the profiling first: checked
// before any work (docs/limits.md).
void check_early(const BenchFlags& f) {
  const std::vector<std::string> models = runtime::model_names();
  if (std::find(models.begin(), models.end(), f.model) == models.end()) {
    throw UsageError(fmt::format("--model {}: not a model weft trains; expected one of {}", f.model,
                                 fmt::join(models, ", ")));
  }
  runtime::validate(f.outer);  // as weft train checks it
  if (f.workers < 1 || f.workers > limits::kMaxProcesses) {
    throw UsageError(fmt::format("--workers {}: expected 1 to {} processes on this machine (docs/limits.md)",
                                 f.workers, limits::kMaxProcesses));
  }
  // Each job's port is one of kPortsCycled from --port on, and a job may use as
  // many more as it has processes.
  const int last_port = 65535 - bench::kPortsCycled - limits::kMaxProcesses;
  if (f.port < 1 || f.port > last_port) {
    throw UsageError(fmt::format("--port {}: expected a port in [1, {}] (jobs use the {} after it)", f.port,
                                 last_port, bench::kPortsCycled + limits::kMaxProcesses));
  }
  // The folder may be new, its parent must exist: a mistyped path is not made.
  fs::path out = fs::path(f.out).lexically_normal();
  if (!out.has_filename()) out = out.parent_path();  // "results/"
  std::error_code ec;
  if (fs::exists(out, ec) && !fs::is_directory(out, ec)) {
    throw UsageError(fmt::format("--out {}: not a folder; name a folder (new, or one of an earlier bench)",
                                 excerpt_text(f.out)));
  }
  if (!fs::exists(out, ec)) check_output("--out", out);
  // Checked whether or not a peer runs: a careful tool refuses what it was given wrong.
  runtime::validate(runtime::OptimizerOptions{.kind = f.optimizer, .lr = f.lr});
  if (!fs::is_regular_file(f.python, ec) || ::access(f.python.c_str(), X_OK) != 0) {
    throw UsageError(fmt::format("--python {}: not an executable file; give Debian's /usr/bin/python3 (with "
                                 "python3-torch)",
                                 excerpt_text(f.python)));
  }
  if (!f.ddp_peer.empty() && !fs::is_regular_file(f.ddp_peer, ec)) {
    throw UsageError(fmt::format("--ddp-peer {}: not a file; give the path of tools/ddp_peer.py",
                                 excerpt_text(f.ddp_peer)));
  }
}

// The one link of a --topology file: its sites and WAN as the file gives them,
// planned (for a flat ring) at its slowest site's rate.
bench::Link topology_link(const BenchFlags& f) {
  if (f.bandwidths_given) {
    throw UsageError("--bandwidths: not with --topology, whose file gives each site's bandwidth");
  }
  if (!f.latency.empty()) {
    throw UsageError(fmt::format("--latency {}: not with --topology, whose file gives each site's latency",
                                 excerpt_text(f.latency)));
  }
  const Topology topology = topology_of(f.sites, f.workers, 0, 0);  // reads and checks the file
  validate(topology, f.workers);
  BytesPerSecond slowest = topology.sites.front().bandwidth;
  for (const Site& site : topology.sites) slowest = std::min(slowest, site.bandwidth);
  return {.name = "topology " + fs::path(f.sites.topology).stem().string(),
          .bandwidth = slowest,
          .sites = {.topology = fs::absolute(f.sites.topology).string()}};
}

bench::BenchOptions to_options(const BenchFlags& f) {
  check_early(f);
  bench::BenchOptions o;
  o.tools = {.weft = fs::read_symlink("/proc/self/exe").string(),
             .python = f.python,
             .ddp_peer = f.ddp_peer.empty() ? default_ddp_peer() : f.ddp_peer,
             .workers = f.workers,
             .port = f.port,
             .mtu = f.mtu,
             .cores = parse_core_placement(f.cores)};
  if (f.mode != "iterations" && f.mode != "accuracy") {
    throw UsageError(fmt::format("--mode {}: expected iterations or accuracy", f.mode));
  }
  const bool accuracy = f.mode == "accuracy";
  o.mode = accuracy ? bench::Mode::kAccuracy : bench::Mode::kIterations;
  o.training = {.model = f.model,
                .batch = f.batch,
                .lr = f.lr,
                .optimizer = f.optimizer,
                .seed = f.seed,
                .H = f.H,
                .steps = f.steps.value_or(accuracy ? BenchDefaults::kAccuracySteps : BenchDefaults::kSteps),
                .eval_every = f.eval_every.value_or(accuracy ? BenchDefaults::kEvalEvery : 0),
                .outer_optimizer = f.outer.enabled() ? f.outer.kind : "none",
                .outer_lr = f.outer.lr,
                .outer_momentum = f.outer.momentum,
                .servers = f.servers};
  if (accuracy && o.training.eval_every < 1) {
    throw UsageError(fmt::format("--eval-every {}: accuracy mode needs evaluations; expected >= 1",
                                 o.training.eval_every));
  }
  if (f.H < 1) throw UsageError(fmt::format("--H {}: expected an integer >= 1", f.H));
  if (f.servers < 1) throw UsageError(fmt::format("--servers {}: expected an integer >= 1", f.servers));
  o.target_accuracy = f.target;
  o.verbose = f.verbose;
  o.warmup = f.warmup;
  o.repeats = f.repeats;
  o.seeds = f.seeds;
  o.strategies = f.strategies;
  o.compression = f.compression;
  if (!f.no_ddp) o.peers = f.peers;
  else o.peers.clear();
  if (!o.peers.empty() && !fs::is_regular_file(o.tools.ddp_peer)) {
    throw UsageError(fmt::format("--ddp-peer {}: no such file; give the path of tools/ddp_peer.py (the build copies "
                                 "it beside the weft binary), or --no-ddp",
                                 o.tools.ddp_peer));
  }
  o.out = f.out;
  o.trace_strategy = f.trace_strategy;
  o.run_timeout = ranges::parse(ranges::kRunTimeout, f.run_timeout);

  bool loopback = f.loopback;
  if (!loopback && ::geteuid() != 0) {
    std::cerr << "weft bench: not root, so links cannot be emulated (weft netem needs CAP_NET_ADMIN); running on "
                 "loopback without emulation. Run as root for --bandwidths.\n";
    loopback = true;
  }
  if (loopback && !f.latency.empty()) {
    throw UsageError(fmt::format("--latency {}: only emulated links are delayed (--bandwidths, as root)",
                                 excerpt_text(f.latency)));
  }
  o.site_modes.clear();
  for (const std::string& mode : f.site_averaging) o.site_modes.push_back(bench::parse_site_mode(mode));
  if (loopback) {
    if (f.sites.given()) {
      const auto [flag, value] = !f.sites.topology.empty()     ? std::pair{"--topology", f.sites.topology}
                                 : !f.sites.sites.empty()       ? std::pair{"--sites", f.sites.sites}
                                 : !f.sites.wan_bandwidth.empty() ? std::pair{"--wan-bandwidth", f.sites.wan_bandwidth}
                                                                  : std::pair{"--wan-latency", f.sites.wan_latency};
      throw UsageError(fmt::format("{} {}: only emulated links have sites (--bandwidths, as root)", flag,
                                   excerpt_text(value)));
    }
    o.links = {{.name = "loopback", .bandwidth = 0}};
  } else if (!f.sites.topology.empty()) {
    o.links = {topology_link(f)};
  } else {
    if (f.bandwidths.empty()) throw UsageError("--bandwidths: give at least one, e.g. 100Mbit");
    const Seconds latency = f.latency.empty() ? 0 : ranges::parse(ranges::kLatency, f.latency);
    for (const std::string& b : f.bandwidths) {
      const BytesPerSecond bandwidth = ranges::parse(ranges::kBandwidths, b);
      const std::string inside = latency > 0 ? b + "+" + f.latency : b;
      bench::Link link{.name = inside, .bandwidth = bandwidth, .latency = latency};
      // The site flags are checked as every command that takes them checks them.
      if (!topology_of(f.sites, f.workers, bandwidth, latency).empty()) {
        link.sites = {.sites = f.sites.sites, .wan_bandwidth = f.sites.wan_bandwidth,
                      .wan_latency = f.sites.wan_latency};
        const std::string wan = f.sites.wan_bandwidth.empty()
                                    ? ""
                                    : fmt::format(", WAN {}{}", f.sites.wan_bandwidth,
                                                  f.sites.wan_latency.empty() ? "" : "+" + f.sites.wan_latency);
        link.name = fmt::format("{} sites {}{}", f.sites.sites, inside, wan);
      }
      o.links.push_back(std::move(link));
    }
  }
  return o;
}

// --report: an earlier bench's table and agreement, from its bench.json.
int report(const std::string& where) {
  const fs::path file = fs::is_directory(where) ? fs::path(where) / "bench.json" : fs::path(where);
  std::cout << bench::format_table(bench::read_results(file));
  return 0;
}

int run(const BenchFlags& flags) {
  if (!flags.report.empty()) return report(flags.report);
  const bench::BenchOptions options = to_options(flags);
  netem::TerminationSignals signals;
  try {
    const bench::BenchResults results = bench::run_bench(options, signals, std::cerr);
    std::cout << bench::format_table(results);
    std::cout << fmt::format("results: {}\n", (fs::path(options.out) / "bench.json").string());
    return results.failed.empty() ? 0 : 1;
  } catch (const bench::BenchInterrupted& e) {
    std::cerr << "weft bench: " << e.what() << "\n";
    return 128 + e.signal();
  }
}

}  // namespace

void add_bench(CLI::App& app, int& exit_status) {
  auto f = std::make_shared<BenchFlags>();
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "The end-to-end comparison: per link, profile the model and the network, predict every strategy, train "
      "each for real under the emulated link (weft netem; needs root) and PyTorch's DDP (--peers) too, and report "
      "measured against predicted iteration time. Writes OUT/bench.json, plots and logs.\n"
      "Example: sudo weft bench --workers 2 --bandwidths 100Mbit --steps 20 --strategies wfbp,mgwfbp,dcredit");
  cmd->add_option("--model", f->model, "runtime model: mlp, cnn, gpt-tiny")->capture_default_str();
  cmd->add_option("--workers,-P", f->workers, "workers P of every run")->capture_default_str()
      ->check(in_range(ranges::kLocalWorkers));
  cmd->add_option("--bandwidths", f->bandwidths, "emulated link rates, one round each: 20Mbit,100Mbit,1Gbit")
      ->delimiter(',')
      ->capture_default_str()
      ->check(in_range(ranges::kBandwidths));
  cmd->add_option("--latency", f->latency,
                  "one-way delay between two ranks on every emulated link (a round trip takes twice it), e.g. 20ms")
      ->check(in_range(ranges::kLatency));
  cmd->add_option("--strategies", f->strategies,
                  "strategies to train (default: every one weft train accepts; the others are skipped, saying why)")
      ->delimiter(',');
  cmd->add_option("--steps", f->steps,
                  fmt::format("iterations per run (default {}; accuracy mode: the cap, default {})",
                              BenchDefaults::kSteps, BenchDefaults::kAccuracySteps))
      ->check(in_range(ranges::kSteps));
  cmd->add_option("--mode", f->mode,
                  "iterations: fixed --steps, compare iteration times; accuracy: also stop each run at "
                  "--target-accuracy and report the time to it")
      ->capture_default_str();
  cmd->add_option("--target-accuracy", f->target, "accuracy mode: the test accuracy to reach, a fraction")
      ->capture_default_str()
      ->check(in_range(ranges::kTargetAccuracy));
  cmd->add_option("--eval-every", f->eval_every,
                  fmt::format("evaluate every N iterations (default: {} in accuracy mode, never otherwise)",
                              BenchDefaults::kEvalEvery))
      ->check(in_range(ranges::kEvalEvery));
  cmd->add_option("--warmup", f->warmup, "iterations left out of the steady-state median")->capture_default_str()
      ->check(in_range(ranges::kWarmup));
  cmd->add_option("--repeats", f->repeats,
                  "train every strategy this many times, in rounds; the median run is reported")
      ->capture_default_str()
      ->check(in_range(ranges::kRepeats));
  cmd->add_option("--batch", f->batch, "samples per worker per iteration")->capture_default_str()
      ->check(in_range(ranges::kBatch));
  cmd->add_option("--lr", f->lr, "learning rate")->capture_default_str()
      ->check(in_range(ranges::kLr));
  cmd->add_flag("--verbose,-v", f->verbose,
                "progress in detail: each link's host parameters, each run's compute and its predictions on the "
                "layers re-timed before it and on its own compute (the table and bench.json hold them anyway)");
  cmd->add_option("--outer-optimizer", f->outer.kind,
                  "the local SGD strategies' outer optimizer, as weft train's (docs/local-sgd.md): none (default) or "
                  "nesterov");
  cmd->add_option("--outer-lr", f->outer.lr,
                  "the outer optimizer's learning rate (default: weft train's, measured for --optimizer)")
      ->check(in_range(ranges::kOuterLr));
  cmd->add_option("--outer-momentum", f->outer.momentum,
                  "the outer optimizer's momentum (default: weft train's, measured for --optimizer)")
      ->check(in_range(ranges::kOuterMomentum));
  cmd->add_option("--optimizer", f->optimizer, "sgd | momentum | adam")->capture_default_str();
  cmd->add_option("--seed", f->seed, "model initialisation and data order")->capture_default_str();
  cmd->add_option("--seeds", f->seeds,
                  "one run of each strategy per seed, in rounds, instead of --seed and --repeats: 0,1,2 (accuracy "
                  "mode reports the median time to accuracy and its range, and plots every run)")
      ->delimiter(',');
  cmd->add_option("--H", f->H, "local SGD period H (flsgd, plsgd, dreamddp, dreamddp-opt)")->capture_default_str()
      ->check(in_range(ranges::kH));
  cmd->add_option("--servers", f->servers,
                  "parameter servers of the ps and ps-interleaved runs, each behind a link like a worker's")
      ->capture_default_str()
      ->check(in_range(ranges::kLocalServers));
  cmd->add_option("--out", f->out, "folder for bench.json, plots, traces, metrics and logs")->capture_default_str();
  cmd->add_option("--compression", f->compression,
                  fmt::format("wire encodings: each strategy runs in each it takes ({}; docs/compression.md)",
                              kEncodingsAccepted))
      ->delimiter(',')
      ->capture_default_str();
  CLI::Option* peers = cmd->add_option("--peers", f->peers,
                  "PyTorch runs beside weft's, on the same model, data and links: ddp (plain DDP), fp16 (DDP + "
                  "fp16_compress_hook), powersgd:R (DDP + powerSGD_hook at rank R), postlocalsgd:H "
                  "(PeriodicModelAverager every H iterations), hierarchical:H or hierarchical:h:H (with sites: "
                  "HierarchicalModelAverager, each site every h iterations (default 1), every worker every H)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_flag("--no-ddp", f->no_ddp, "run no PyTorch peer")->excludes(peers);
  cmd->add_option("--sites", f->sites.sites,
                  "emulate A sites of B workers each, AxB (2x2; workers in rank order): --bandwidths and --latency "
                  "are then the links inside each site, --wan-bandwidth and --wan-latency those between sites; "
                  "every run, weft's and the peers', in the same sites")
      ->check(non_empty("--sites", "AxB, e.g. 2x2, whose product is --workers"));
  cmd->add_option("--wan-bandwidth", f->sites.wan_bandwidth,
                  "with --sites: each ordered pair of sites' link, shared by all traffic between them: 20Mbit")
      ->check(in_range(ranges::kWanBandwidth));
  cmd->add_option("--wan-latency", f->sites.wan_latency,
                  "with --sites: one-way delay between workers of two sites: 20ms (a round trip takes twice it)")
      ->check(in_range(ranges::kWanLatency));
  cmd->add_option("--topology", f->sites.topology,
                  "emulate the sites of this JSON file (docs/formats.md, Topology) instead of --bandwidths: each "
                  "site's workers, bandwidth and latency, and the WAN's")
      ->check(non_empty("--topology", "a topology file (docs/formats.md, Topology)"));
  cmd->add_option("--site-averaging", f->site_averaging,
                  fmt::format("with sites, how weft's runs average across them, each strategy in each it takes: "
                              "{}; flat is one ring over every worker, hierarchical is weft train --hierarchical, "
                              "site-every:N is --site-every N (local SGD)",
                              bench::kSiteModesAccepted))
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_flag("--loopback", f->loopback, "no emulated links: one round on loopback (automatic when not root)");
  cmd->add_option("--python", f->python, "Python with Debian's python3-torch, for the DDP peer")
      ->capture_default_str();
  cmd->add_option("--ddp-peer", f->ddp_peer, "the DDP peer script (default: ddp_peer.py beside this binary)");
  cmd->add_option("--trace-strategy", f->trace_strategy,
                  "keep the predicted and measured traces of this run on the first link: a strategy, or "
                  "strategy+encoding (ssgd+acpsgd:2); default: the fastest predicted");
  cmd->add_option("--port", f->port, "first MASTER_PORT; consecutive runs use the next ones")->capture_default_str()
      ->check(in_range(ranges::kPort));
  cmd->add_option("--mtu", f->mtu, "MTU of the emulated links, bytes (9000: jumbo frames)")->capture_default_str()
      ->check(in_range(ranges::kMtu));
  cmd->add_option("--cores", f->cores, kCorePlacementHelp)->capture_default_str();
  cmd->add_option("--run-timeout", f->run_timeout, "limit of each child run, e.g. 1800s")->capture_default_str()
      ->check(in_range(ranges::kRunTimeout));
  cmd->add_option("--report", f->report,
                  "print the table and the agreement with the planner of an earlier bench (its --out folder or "
                  "bench.json) and exit; runs nothing");
  CLI::Option* bandwidths = cmd->get_option("--bandwidths");
  cmd->callback([f, bandwidths, &exit_status] {
    f->bandwidths_given = bandwidths->count() > 0;
    exit_status = run(*f);
  });
}

}  // namespace weft::cli
