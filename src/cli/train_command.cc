// `weft train`: real data-parallel training with a strategy (docs/runtime.md §3, docs/cli.md §5). The flags
// become a runtime::TrainOptions; everything else happens in runtime/train/train.h,
// which also decides whether this process launches workers or is one
// (Note [Launcher and workers] in runtime/launch/launcher.h).
#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/cluster_flags.h"
#include "cli/commands.h"
#include "cli/emulated_training.h"
#include "plan/auto.h"
#include "runtime/launch/worker_env.h"
#include "runtime/train/train.h"
#include "schedulers/strategies.h"
#include "units/cores.h"
#include "units/units.h"

namespace weft::cli {
namespace {

struct TrainFlags {
  runtime::TrainOptions options;
  std::optional<int> nproc;
  std::optional<std::int64_t> steps;
  std::optional<double> epochs;
  std::string profile;
  std::string metrics;
  std::string trace;
  std::string save_params;
  std::string checkpoint;
  std::string bandwidth = "1Gbit";
  std::string server_bandwidth;  // empty: same as --bandwidth
  std::string latency = "50us";
  std::string network;
  std::string host;
  StrategySpec strategy;
  double failure_timeout = runtime::kDefaultFailureTimeout;
  bool no_progress = false;
  std::string cores = "auto";
  netem::SiteFlags sites;  // emulated sites, with --nproc (cli/emulated_training.h)
  std::optional<std::string> allow;  // --allow, with --strategy auto
};

std::string strategy_names() {
  std::vector<std::string_view> names;
  for (const StrategyInfo& s : strategies()) names.push_back(s.name);
  return fmt::format("{}", fmt::join(names, ", "));
}

// Note [Sites of a training job] (runtime/train/job.h); with --nproc and any
// link flag (--bandwidth, --topology, --wan-*) the links are emulated too (Note
// [Training on emulated links]). A parameter-server job's sites are emulated
// only: the planner prices a server's links as its own (cost/cluster.h).
Topology topology_of_job(const TrainFlags& flags, const runtime::TrainOptions& o) {
  const SiteFlags& given = flags.sites;
  const bool all_reduce = o.job.strategy == "auto" ? o.job.servers == 0
                                                    : find_strategy(o.job.strategy).arch == Arch::kAllReduce;
  if (!all_reduce) return {};
  // Every rank of the job: the ones this command starts, or the job's WORLD_SIZE.
  const int ranks = flags.nproc ? *flags.nproc + o.job.servers
                    : runtime::has_worker_env() ? runtime::read_worker_env().world
                                                : 1;
  return runtime::job_topology(given, o.job.cluster, ranks);
}

runtime::TrainOptions to_options(const TrainFlags& flags) {
  runtime::TrainOptions o = flags.options;
  o.nproc = flags.nproc;
  o.cores = parse_core_placement(flags.cores);
  o.job.steps = flags.steps;
  o.epochs = flags.epochs;
  o.profile = flags.profile;
  o.metrics = flags.metrics;
  o.trace = flags.trace;
  o.save_params = flags.save_params;
  o.checkpoint = flags.checkpoint;
  o.job.failure_timeout = flags.failure_timeout;
  o.job.outer.inner = o.optimizer;  // Note [Outer defaults, measured]
  if (flags.allow) o.job.allow = parse_allow(*flags.allow);
  o.progress = !flags.no_progress;
  ClusterSpec cluster{.workers = 1, .bandwidth = flags.bandwidth, .latency = flags.latency,
                       .server_bandwidth = flags.server_bandwidth, .network_file = flags.network,
                       .host_file = flags.host};
  o.job.cluster = make_cluster(cluster, flags.profile);  // workers is replaced by the world size
  o.job.strategy_options = make_strategy_options(flags.strategy);
  o.job.cluster.topology = topology_of_job(flags, o);  // Note [Sites of a training job]
  runtime::validate(o);
  return o;
}

}  // namespace

void add_train(CLI::App& app, int& exit_status) {
  auto flags = std::make_shared<TrainFlags>();
  runtime::TrainOptions& o = flags->options;
  CLI::App* cmd = app.add_subcommand(
      "train",
      "Train a LibTorch model data-parallel over Gloo, executing a strategy's schedule; writes metrics "
      "(JSON lines), a measured timeline and optionally the final parameters.\n"
      "With --nproc K it starts K local workers; without it, it is one worker of a job described by "
      "MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE (as torchrun sets them), or trains alone if none is set.\n"
      "With --nproc K --bandwidth Q the K workers (and --servers) train behind emulated Q links (root).");
  cmd->add_option("--model", o.model, "runtime model: mlp, cnn, gpt-tiny")->capture_default_str();
  cmd->add_option("--strategy", o.job.strategy,
                  "strategy: auto (rank 0 chooses the recipe the planner predicts fastest among --allow) or " +
                      strategy_names())
      ->capture_default_str();
  cmd->add_option("--allow", flags->allow,
                  "--strategy auto: the families it may choose from, and lossy to let it choose a codec too, "
                  "joined by commas: ssgd, local_sgd, ps, lossy (default ssgd: exact)");
  cmd->add_option("--nproc", flags->nproc, "start this many local worker processes (default: be one worker)")
      ->check(in_range(ranges::kProcesses));
  cmd->add_option("--cores", flags->cores, std::string("--nproc: ") + kCorePlacementHelp)->capture_default_str();
  cmd->add_option("--servers", o.job.servers,
                  "parameter servers, for ps and ps-interleaved: started beside the --nproc workers; in a job, "
                  "the last S ranks serve")
      ->capture_default_str()
      ->check(in_range(ranges::kLocalServers));
  auto* steps = cmd->add_option("--steps", flags->steps, "iterations to train (default: 100 if no --epochs)")
      ->check(in_range(ranges::kSteps));
  cmd->add_option("--epochs", flags->epochs, "epochs of each worker's shard to train (fractions allowed)")
      ->excludes(steps)
      ->check(in_range(ranges::kEpochs));
  cmd->add_option("--batch", o.batch, "samples per worker per iteration")->capture_default_str()
      ->check(in_range(ranges::kBatch));
  cmd->add_option("--lr", o.lr, "learning rate")->capture_default_str()
      ->check(in_range(ranges::kLr));
  cmd->add_option("--optimizer", o.optimizer, "sgd | momentum | adam")->capture_default_str();
  cmd->add_option("--seed", o.seed, "seed of the model initialisation and the data order")->capture_default_str();
  cmd->add_flag("--synthetic", o.synthetic, "random data of the right shapes instead of the dataset");
  cmd->add_option("--eval-every", o.eval_every,
                  "rank 0 evaluates on the test set every N iterations and at the end (0 = never)")
      ->capture_default_str()
      ->check(in_range(ranges::kEvalEvery));
  cmd->add_option("--metrics", flags->metrics, "append per-iteration metrics of every rank (JSON lines, docs/formats.md §6)");
  cmd->add_option("--trace", flags->trace, "write the measured timeline of every rank (Chrome trace JSON)");
  cmd->add_option("--trace-iterations", o.trace_iterations, "iterations recorded in --trace (the first this run trains: a resumed job's from its checkpoint on)")
      ->capture_default_str()
      ->check(in_range(ranges::kTraceIterations));
  cmd->add_option("--save-params", flags->save_params,
                  "write each rank's final parameters to FILE.rank<r> (raw float32, layers in order)");
  cmd->add_option("--outer-optimizer", o.job.outer.kind,
                  "local SGD: none (default: set each averaged layer to the average) or nesterov (step the averaged "
                  "change since the layer's last average with Nesterov momentum; docs/local-sgd.md); --strategy auto "
                  "chooses where none is given");
  cmd->add_option("--outer-lr", o.job.outer.lr,
                  "the outer optimizer's learning rate (default: the one measured for --optimizer, docs/local-sgd.md)")
      ->check(in_range(ranges::kOuterLr));
  cmd->add_option("--outer-momentum", o.job.outer.momentum,
                  "the outer optimizer's momentum (default: the one measured for --optimizer)")
      ->check(in_range(ranges::kOuterMomentum));
  cmd->add_option("--checkpoint", flags->checkpoint,
                  "write every worker's training state to DIR after every --checkpoint-every iterations and after "
                  "the last (docs/checkpoints.md)");
  cmd->add_option("--checkpoint-every", o.checkpoint_every, "iterations between checkpoints (0 = only at the end)")
      ->capture_default_str()
      ->check(in_range(ranges::kCheckpointEvery));
  cmd->add_flag("--resume", o.resume,
                "continue the job from the last complete checkpoint in --checkpoint DIR (refused if it is of "
                "another job)");
  cmd->add_option("--profile", flags->profile,
                  "layer times for the planner (profile JSON from `weft profile --model`); default: rank 0 "
                  "measures them before training");
  cmd->add_option("--bandwidth,-B", flags->bandwidth,
                  "each worker's link, which the schedule is planned for (mgwfbp merging, dcredit windows; "
                  "default 1Gbit). Given with --nproc, the workers also run behind links emulated at this rate "
                  "(as weft netem; needs root); in a job started otherwise it only informs the planner")
      ->check(in_range(ranges::kBandwidth));
  cmd->add_option("--server-bandwidth", flags->server_bandwidth,
                  "each parameter server's link, planned and (with --nproc --bandwidth) emulated; default: "
                  "--bandwidth")
      ->check(in_range(ranges::kServerBandwidth));
  cmd->add_option("--latency", flags->latency, "per-message latency the planner assumes; given with --nproc --bandwidth, also emulated (one-way)")
      ->capture_default_str()
      ->check(in_range(ranges::kLatency));
  add_site_options(*cmd, flags->sites);
  cmd->add_option("--network", flags->network,
                  "measured all-reduce times from `weft profile --network --out FILE`; replaces "
                  "--bandwidth/--latency");
  cmd->add_option("--host", flags->host,
                  "how this machine shares its cores between compute and communication, from `weft profile --host "
                  "FILE`, which the schedule is planned for (docs/formats.md 6.7)");
  add_strategy_flags(*cmd, flags->strategy);
  // Sites' strategies (Note [Sites in a schedule]), where the shared strategy flags
  // do not have them.
  if (cmd->get_option_no_throw("--hierarchical") == nullptr) {
    cmd->add_flag("--hierarchical", flags->strategy.hierarchical,
                  "average across sites by sites: inside each site, then between one leader per site (in "
                  "--compression), then back inside; needs --sites or --topology");
  }
  if (cmd->get_option_no_throw("--site-every") == nullptr) {
    cmd->add_option("--site-every", flags->strategy.site_every,
                    "local SGD: each site also averages every N iterations between the averages across sites "
                    "(0 = never; a divisor of --H); needs --sites or --topology")
        ->capture_default_str()
        ->check(in_range(ranges::kSiteEvery));
  }
  // Unset options are tuned by rank 0, as `weft plan` tunes them.
  cmd->get_option("--partition")
      ->description("block size S_p for bytescheduler/dcredit, e.g. 4MiB (default: tuned for the profile and "
                    "--bandwidth, as weft plan does)");
  cmd->get_option("--credit")->description("credit C for bytescheduler, e.g. 16MiB (default: tuned)");
  cmd->add_option("--failure-timeout", flags->failure_timeout,
                  "seconds a collective may make no progress, and the other workers may take to exit after one "
                  "failed, before they are stopped")
      ->capture_default_str()
      ->check(in_range(ranges::kFailureTimeout));
  cmd->add_flag("--no-progress", flags->no_progress, "no progress line on stderr");
  cmd->callback([cmd, flags, &exit_status] {
    runtime::TrainOptions options = to_options(*flags);
    options.job.choose_period = options.job.strategy == "auto" && cmd->count("--H") == 0;  // Note [How auto chooses H]
    // Note [Training on emulated links] (cli/emulated_training.h); a topology file
    // gives every link itself, and so do the WAN's flags (Note [Sites of a training
    // job]): `--sites AxB` alone only groups the ranks.
    const bool links_given = cmd->count("--bandwidth") > 0 || !flags->sites.topology.empty() ||
                             !flags->sites.wan_bandwidth.empty() || !flags->sites.wan_latency.empty();
    if (trains_on_emulated_links(links_given, options.nproc.has_value())) {
      if (options.resume) runtime::check_resumable(options, *options.nproc);  // before any rank starts
      exit_status = run_emulated_training({.workers = *options.nproc,
                                           .servers = options.job.servers,
                                           .bandwidth = options.job.cluster.bandwidth,
                                           .server_bandwidth = options.job.cluster.server_bandwidth,
                                           .latency = cmd->count("--latency") > 0 ? options.job.cluster.latency : 0,
                                           .failure_timeout = options.job.failure_timeout,
                                           .cores = options.cores,
                                           .sites = flags->sites});
    } else {
      exit_status = runtime::run_train(options);
    }
  });
}

}  // namespace weft::cli
