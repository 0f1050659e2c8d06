#include "runtime/train/job.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <system_error>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "netem/netem.h"
#include "netem/shaping.h"
#include "runtime/launch/launcher.h"
#include "runtime/launch/worker_env.h"
#include "schedule/encoding.h"
#include "units/cores.h"
#include "units/ranges.h"

namespace weft::runtime {

void validate(const JobOptions& job) {
  if (job.steps) ranges::check(ranges::kSteps, static_cast<double>(*job.steps));
  ranges::check(ranges::kFailureTimeout, job.failure_timeout);
  validate(job.outer);
  if (!job.allow.empty()) {
    if (job.strategy != "auto") {
      throw UsageError(fmt::format("{}: only with {} (the families auto may choose from)",
                                   ranges::given("--allow", fmt::format("{}", fmt::join(job.allow, ","))),
                                   ranges::given("--strategy", "auto")));
    }
    check_allow(job.allow);
  }
  if (job.strategy == "auto") {
    // Note [What auto may choose]: with servers only the ps family runs, without none of it.
    const std::vector<std::string> allow = job.allow.empty() ? std::vector<std::string>{"ssgd"} : job.allow;
    const bool ps = std::find(allow.begin(), allow.end(), "ps") != allow.end();
    const bool others = std::any_of(allow.begin(), allow.end(), [](const std::string& f) {
      return f == "ssgd" || f == "local_sgd";
    });
    if (job.servers > 0 ? !ps : !others) {
      throw UsageError(fmt::format("{} with {}: {}", ranges::given("--strategy", "auto"),
                                   ranges::given("--allow", fmt::format("{}", fmt::join(allow, ","))),
                                   job.servers > 0 ? fmt::format("with {} only the ps family runs; allow ps",
                                                                 ranges::given("--servers", std::to_string(job.servers)))
                                                   : "ps needs parameter servers; allow ssgd or local_sgd"));
    }
    return;
  }
  const StrategyInfo& info = find_strategy(job.strategy);
  if (info.arch == Arch::kParameterServer && job.servers < 1) {
    throw UsageError(fmt::format("{}: a parameter-server strategy needs parameter servers: {} >= 1",
                                 ranges::given("--strategy", job.strategy), ranges::given("--servers", "S")));
  }
  if (info.arch == Arch::kAllReduce && job.servers != 0) {
    throw UsageError(fmt::format("{}: only the parameter-server strategies (ps, ps-interleaved) have servers; {} "
                                 "is all-reduce",
                                 ranges::given("--servers", std::to_string(job.servers)),
                                 ranges::given("--strategy", job.strategy)));
  }
  check_outer_step(job.outer, job.strategy);
  if (info.arch == Arch::kParameterServer) check_exchange_encoding(job.strategy_options.compression, job.strategy);
}

void check_length_known(const JobOptions& job) {
  if (find_strategy(job.strategy).arch != Arch::kParameterServer || job.steps) return;
  throw UsageError(fmt::format("{}: give {}, the iterations the job trains (the servers serve exactly those)",
                               ranges::given("--strategy", job.strategy), ranges::given("--steps", "N")));
}

int workers_of(const JobOptions& job, int world) {
  if (world - job.servers >= 1) return world - job.servers;
  throw UsageError(fmt::format("{}: the job has only {} ranks (WORLD_SIZE); it needs at least one worker besides "
                               "the servers",
                               ranges::given("--servers", std::to_string(job.servers)), world));
}

// TCP's payload rate over each emulated link: netem::payload_rate, about 95% of
// the rate at a 1500-byte MTU.
Cluster planned_cluster(Cluster given) {
  const char* text = std::getenv(kEmulatedMtuVariable);
  if (text == nullptr || !is_launched_worker()) return given;
  int mtu = 0;
  const std::string_view value = text;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), mtu);
  if (error != std::errc{} || end != value.data() + value.size()) {
    throw UsageError(fmt::format("{}={}: expected the emulated links' MTU in bytes (68..65535)",
                                 kEmulatedMtuVariable, value));
  }
  netem::check_mtu(mtu, kEmulatedMtuVariable);
  given.bandwidth = netem::payload_rate(given.bandwidth, mtu);
  if (given.server_bandwidth > 0) given.server_bandwidth = netem::payload_rate(given.server_bandwidth, mtu);
  return given;
}

Topology job_topology(const SiteFlags& flags, const Cluster& cluster, int ranks) {
  if (!flags.given()) return {};
  Topology topology;
  if (!flags.sites.empty() && flags.wan_bandwidth.empty() && flags.wan_latency.empty()) {
    topology = {.sites = sites_shorthand(flags.sites, ranks, cluster.bandwidth, cluster.latency),
                .wan = {.bandwidth = cluster.bandwidth, .latency = cluster.latency}};
  } else {
    topology = topology_of(flags, ranks, cluster.bandwidth, cluster.latency);
  }
  validate(topology, ranks);
  return topology;
}

Cluster cluster_of(const JobOptions& job, int workers) {
  const Arch arch = job.strategy != "auto"  ? find_strategy(job.strategy).arch
                    : job.servers > 0       ? Arch::kParameterServer
                                            : Arch::kAllReduce;
  Cluster cluster = planned_cluster(job.cluster);
  cluster.workers = workers;
  cluster.arch = arch;
  if (arch == Arch::kParameterServer) cluster.servers = job.servers;
  validate(cluster);
  return cluster;
}

// Note [Auto's outer optimizer]
// ------------------------------
// Rule: where auto chooses local SGD and the user named no outer optimizer, it
// steps the averages with Nesterov at the measured default if that default
// learnt more per step than the plain average for the inner optimizer
// (outer_defaults_help: plain SGD); else it keeps the plain average. Why: the
// outer optimizer changes what is learnt, and only the sweep behind Note [Outer
// defaults, measured] says when that change is a gain.
//
// Note [Auto without a host]
// --------------------------
// Rule: where the job has no host description and this machine's workers
// (LOCAL_WORLD_SIZE, which weft's launcher and torchrun set) outnumber the cores
// this process may use, auto's line says so and where to measure one. Why:
// without one the planner counts no cores (docs/cost-model.md §7.3): no
// collective waits for a core and none for the last worker, so the recipes of
// many small messages look cheap, and their predictions run short (BENCHMARKS.md,
// "Races on models weft was not tuned on").
namespace {

std::string without_host_hint(const JobOptions& job) {
  if (job.cluster.host.cores > 0) return "";
  const std::optional<int> processes = local_world_size();
  std::size_t cores = 0;
  try {
    cores = usable_cores().size();
  } catch (const std::system_error&) {
    return "";
  }
  if (!processes || cores == 0 || static_cast<std::size_t>(*processes) <= cores) return "";
  return fmt::format("; planned without a host description while {} workers share {} cores, so no message waits "
                     "for a core or for the last worker: measure one (weft profile --host; docs/python.md, \"Workers "
                     "that share cores\")",
                     *processes, cores);
}

}  // namespace

JobChoice choose_for_job(const JobOptions& job, const Profile& profile, int workers, std::string_view source) {
  const AutoChoice choice = choose_auto(profile, cluster_of(job, workers),
                                        {.allow = job.allow.empty() ? std::vector<std::string>{"ssgd"} : job.allow,
                                         .choose_period = job.choose_period,
                                         .strategy = job.strategy_options,
                                         .source = std::string(source)});
  JobChoice out{.job = job, .reason = choice.reason};
  out.job.strategy = choice.strategy;
  out.job.strategy_options = choice.options;
  out.job.allow.clear();
  out.job.choose_period = false;
  const bool local_sgd = find_strategy(choice.strategy).family == Family::kLocalSgd;
  if (local_sgd && !outer_named(job.outer)) {
    out.job.outer.kind = outer_defaults_help(job.outer.inner) ? "nesterov" : "none";
    if (out.job.outer.enabled()) {
      const OuterStep step = outer_step(out.job.outer);
      out.reason += fmt::format("; the averages stepped by Nesterov (lr {}, momentum {}), measured to learn more per "
                                "step with {} inner steps",
                                step.lr, step.momentum, job.outer.inner);
    }
  }
  out.reason += without_host_hint(job);
  return out;
}

JobOptions with_recipe(JobOptions job, const nlohmann::json& recipe, std::string_view origin) {
  if (!recipe.is_object() || !recipe.contains("strategy") || !recipe["strategy"].is_string()) {
    throw UsageError(fmt::format("{}: no strategy recorded", origin));
  }
  try {
    job.strategy = recipe["strategy"].get<std::string>();
    job.strategy_options.compression =
        parse_encoding(recipe.value("compression", std::string("none")), "--compression");
    job.strategy_options.hierarchical = recipe.value("hierarchical", false);
    job.strategy_options.site_every = recipe.value("site_every", 0);
    job.strategy_options.H = recipe.value("H", job.strategy_options.H);
    if (recipe.contains("outer_optimizer")) {
      job.outer.kind = recipe["outer_optimizer"].get<std::string>();
      if (recipe.contains("outer_lr")) job.outer.lr = recipe["outer_lr"].get<double>();
      if (recipe.contains("outer_momentum")) job.outer.momentum = recipe["outer_momentum"].get<double>();
    }
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(fmt::format("{}: {}", origin, e.what()));
  }
  job.allow.clear();
  validate(job);
  return job;
}

nlohmann::json job_identity(const JobOptions& job, int workers) {
  const StrategyInfo& info = find_strategy(job.strategy);
  const StrategyOptions& so = job.strategy_options;
  nlohmann::json identity{{"strategy", job.strategy}, {"workers", workers}, {"servers", job.servers}};
  if (lossy(so.compression)) identity["compression"] = to_string(so.compression);
  // Sums by sites keep a ring codec's state on the leaders only; site averages
  // change what the workers hold between averages.
  if (so.hierarchical) identity["hierarchical"] = true;
  if (so.site_every > 0) identity["site_every"] = so.site_every;
  const auto outer = [&] {
    identity["outer_optimizer"] = job.outer.enabled() ? job.outer.kind : "none";
    if (job.outer.enabled()) {
      const OuterStep step = outer_step(job.outer);
      identity["outer_lr"] = step.lr;
      identity["outer_momentum"] = step.momentum;
    }
  };
  if (job.strategy == "ps-interleaved") {
    identity["T"] = so.T;
    identity["easgd_beta"] = so.easgd_beta;
    if (so.easgd_alpha) identity["easgd_alpha"] = *so.easgd_alpha;  // else beta / workers
    if (job.outer.enabled()) outer();
  }
  if (info.family == Family::kLocalSgd) {
    identity["H"] = so.H;
    outer();
  }
  return identity;
}

}  // namespace weft::runtime
