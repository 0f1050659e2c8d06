// `weft plan` and `weft simulate`: the planner and the simulator on the command line.
#include <algorithm>
#include <functional>
#include <iostream>
#include <map>
#include <set>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/cluster_flags.h"
#include "cli/commands.h"
#include "plan/planner.h"
#include "sim/simulator.h"
#include "units/files.h"
#include "units/limits.h"

namespace weft::cli {
namespace {

struct PlanFlags {
  ModelFlags model;
  ClusterSpec cluster;
  StrategySpec strategy;
  std::vector<std::string> strategies;
  bool json = false;
  bool no_tune = false;
  std::string trace;
};

std::string short_options(const Schedule& s) {
  const auto j = nlohmann::json::parse(s.options_json.empty() ? "{}" : s.options_json);
  std::string out;
  for (const auto& [key, value] : j.items()) {
    if (!value.is_primitive()) continue;  // sets and windows are in --json
    out += (out.empty() ? "" : " ") + key + "=" + value.dump();
  }
  return out;
}

// "11-8,5,3-2" for a set of layer indices.
std::string ranges(std::vector<int> layers) {
  std::sort(layers.begin(), layers.end(), std::greater<>());
  std::string out;
  for (size_t i = 0; i < layers.size();) {
    size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] - 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(layers[i]);
    if (j > i) out += "-" + std::to_string(layers[j]);
    i = j + 1;
  }
  return out.empty() ? "-" : out;
}

// Which layers each iteration of the period averages (local SGD schedules that
// record "sets", and "filled" for the layers bubble filling added), one line per
// iteration; empty for schedules without sets.
std::string layer_sets(const PlannedStrategy& s) {
  const auto j = nlohmann::json::parse(s.schedule.options_json.empty() ? "{}" : s.schedule.options_json);
  if (!j.contains("sets")) return "";
  const auto& sets = j["sets"];
  std::string out;
  for (size_t h = 0; h < sets.size(); ++h) {
    std::string filled;
    if (j.contains("filled") && h < j["filled"].size() && !j["filled"][h].empty()) {
      filled = " + filled " + ranges(j["filled"][h].get<std::vector<int>>());
    }
    out += fmt::format("  iteration {}: {}{}\n", h, ranges(sets[h].get<std::vector<int>>()), filled);
  }
  return out;
}

// Which rows trade accuracy for speed, and the fastest that does not.
void print_compression_note(const Plan& plan) {
  const bool any = std::any_of(plan.strategies.begin(), plan.strategies.end(),
                               [](const PlannedStrategy& s) { return lossy(s.compression); });
  if (!any) return;
  fmt::print("rows with +CODEC average approximately (they trade accuracy for speed; docs/compression.md)\n");
  if (!lossy(plan.recommended_compression)) return;
  const PlannedStrategy* exact = nullptr;
  for (const PlannedStrategy& s : plan.strategies) {
    if (!lossy(s.compression) && (!exact || s.timeline.summary.iteration < exact->timeline.summary.iteration)) {
      exact = &s;
    }
  }
  if (exact) {
    fmt::print("the fastest exact strategy is {} ({} per iteration)\n", exact->label(),
               format_duration(exact->timeline.summary.iteration));
  }
}

// "2 sites: 0-1 at 1 Gbit/s, 50us; 2-3 at ...; WAN 20 Mbit/s, 20ms".
std::string describe_topology(const Topology& t) {
  std::vector<std::string> sites;
  for (const Site& site : t.sites) {
    const bool contiguous = std::adjacent_find(site.ranks.begin(), site.ranks.end(), [](int a, int b) {
                              return b != a + 1;
                            }) == site.ranks.end();
    const std::string ranks = contiguous && site.ranks.size() > 1
                                  ? fmt::format("{}-{}", site.ranks.front(), site.ranks.back())
                                  : fmt::format("{}", fmt::join(site.ranks, ","));
    sites.push_back(fmt::format("{} at {}, latency {}", ranks, format_bandwidth(site.bandwidth),
                                format_duration(site.latency)));
  }
  return fmt::format("{} sites (workers {}); WAN {}, latency {}{}", t.sites.size(), fmt::join(sites, "; "),
                     format_bandwidth(t.wan.bandwidth), format_duration(t.wan.latency), describe_links(t));
}

// Note [Variants across sites] (plan/planner.cc): what /hier and /siteN mean, and
// why the recommended variant won: its time against the same strategy's others.
void print_sites_note(const Plan& plan) {
  if (plan.cluster.topology.empty()) return;
  fmt::print("/hier: averages across sites by sites (--hierarchical); /siteN: local SGD also averages inside "
             "each site every N iterations (--site-every N); docs/strategies.md, Sites\n");
  const PlannedStrategy* best = plan.best();
  if (!best) return;
  std::vector<std::string> others;
  for (const PlannedStrategy& s : plan.strategies) {
    if (&s == best || s.name != best->name || s.compression != best->compression) continue;
    others.push_back(fmt::format("{} {}", s.label(), format_duration(s.timeline.summary.iteration)));
  }
  if (others.empty()) return;
  const std::string how = best->hierarchical && best->site_every > 0 ? "by sites, with site averages"
                          : best->hierarchical                       ? "by sites"
                          : best->site_every > 0                     ? "over one ring, with site averages"
                                                                     : "over one ring of all workers";
  fmt::print("{} averages {}: {} per iteration, against {}\n", best->label(), how,
             format_duration(best->timeline.summary.iteration), fmt::join(others, ", "));
}

void print_table(const Plan& plan, const Profile& profile) {
  const Cluster& c = plan.cluster;
  fmt::print("{} on {} workers, {} links, latency {}, {}{}\n", plan.model, c.workers,
             format_bandwidth(c.bandwidth), format_duration(c.latency), to_string(c.arch),
             c.fitted ? fmt::format(" (fitted a={} b={:.3g}s/B)", format_duration(c.fitted->a), c.fitted->b)
                      : "");
  if (!c.topology.empty()) fmt::print("sites: {}\n", describe_topology(c.topology));
  const Host& h = c.host;
  if (h.cores > 0 && h.processes > 0) {
    fmt::print("cores (--host): {} per {} workers, shared with messages that keep {:.2f} of a core busy each "
               "(weight {:.2f}); a collective waits {} for a core while all are taken\n",
               h.cores, h.processes, h.comm_cores, h.comm_weight, format_duration(h.core_wait));
  }
  if ((h.skew > 0 || h.back_to_back_skew > 0 || h.drift > 0) && c.arch == Arch::kAllReduce) {
    fmt::print("skew (--host): each collective starts {} after its data is ready and {} after it is launched, {} "
               "later per second the workers computed apart beyond an iteration\n",
               format_duration(h.skew), format_duration(h.back_to_back_skew), format_duration(h.drift));
  }
  std::size_t width = 14;  // wider for compressed rows' labels
  for (const PlannedStrategy& s : plan.strategies) width = std::max(width, s.label().size());
  fmt::print("{:<{}} {:>6} {:>12} {:>12} {:>12} {:>9}  {}\n", "strategy", width, "period", "iteration",
             "compute", "exposed comm", "vs wfbp", "options");
  const PlannedStrategy* best = plan.best();
  for (const PlannedStrategy& s : plan.strategies) {
    const Summary& sum = s.timeline.summary;
    fmt::print("{:<{}} {:>6} {:>12} {:>12} {:>12} {:>8.2f}x  {}{}\n", s.label(), width, s.schedule.period,
               format_duration(sum.iteration), format_duration(sum.compute),
               format_duration(sum.exposed_comm), s.speedup_vs_wfbp, short_options(s.schedule),
               &s == best ? "  <- recommended" : "");
  }
  print_compression_note(plan);
  print_sites_note(plan);
  if (!plan.uncosted.empty()) {  // Note [Costed only with shapes], plan/planner.cc
    std::vector<std::string> labels;
    for (const Uncosted& u : plan.uncosted) labels.push_back(u.label);
    fmt::print("not costed: {}: {}\n", fmt::join(labels, ", "), plan.uncosted.front().why);
  }
  // DreamDDP's sets, once per strategy: again for a codec or a sites variant only
  // where they differ from every set printed for it.
  std::map<std::string, std::set<std::string>> printed;
  for (const PlannedStrategy& s : plan.strategies) {
    if (s.name != "dreamddp" && s.name != "dreamddp-opt") continue;
    const std::string sets = layer_sets(s);
    if (sets.empty() || !printed[s.name].insert(sets).second) continue;
    fmt::print("{} averages, per iteration of the period (layer indices, output side first):\n{}", s.label(), sets);
  }
}

void run_plan(const PlanFlags& flags) {
  const Profile profile = load_model(flags.model);
  const Cluster cluster = make_cluster(flags.cluster, flags.model.profile_file);
  // --compression auto: every S-SGD strategy with every codec (docs/compression.md).
  const bool every_codec = flags.strategy.compression == "auto";
  StrategySpec strategy = flags.strategy;
  if (every_codec) strategy.compression = "none";
  PlanOptions options{.strategies = flags.strategies,
                      .strategy = make_strategy_options(strategy),
                      .tune = !flags.no_tune,
                      .record_iterations = flags.trace.empty() ? 0 : 3};
  if (every_codec) options.compressions = candidate_encodings();
  const Plan plan = weft::plan(profile, cluster, options);
  if (flags.json) {
    fmt::print("{}\n", plan_json(plan));
  } else {
    print_table(plan, profile);
  }
  if (!flags.trace.empty()) {
    std::vector<const Timeline*> timelines;
    for (const PlannedStrategy& s : plan.strategies) timelines.push_back(&s.timeline);
    write_output("--trace", flags.trace, chrome_trace_json(timelines));
    if (!flags.json) fmt::print("trace: {} (open in https://ui.perfetto.dev)\n", flags.trace);
  }
}

struct SimulateFlags {
  ModelFlags model;
  ClusterSpec cluster;
  StrategySpec strategy;
  std::string name = "wfbp";
  std::string schedule;  // simulate this schedule instead of planning `name`
  int iterations = 0;
  bool json = false;
  bool no_tune = false;
  std::string trace;
  int trace_iterations = 5;
  std::string schedule_out;
};

// The planner resolves and tunes the strategy, as `weft plan` and `weft train` do.
Schedule planned_schedule(const SimulateFlags& flags, const Profile& profile, const Cluster& cluster) {
  PlanOptions options{.strategies = {flags.name},
                      .strategy = make_strategy_options(flags.strategy),
                      .tune = !flags.no_tune,
                      .site_variants = false};  // the strategy as its flags say
  return weft::plan(profile, cluster, options).strategies.at(0).schedule;
}

// --schedule: a schedule that does not fit the model or the cluster is bad input.
Schedule given_schedule(const std::string& file, const Profile& profile, const Cluster& cluster) {
  Schedule schedule = load_schedule(file);
  try {
    validate(schedule, profile, cluster.workers);
  } catch (const std::logic_error& e) {
    throw UsageError(fmt::format("--schedule {}: does not fit the model and workers given: {}", file, e.what()));
  }
  const bool ps = std::ranges::any_of(schedule.iterations, [](const std::vector<CommOp>& ops) {
    return std::ranges::any_of(ops, [](const CommOp& op) { return op.kind == OpKind::kParameterServer; });
  });
  if (ps != (cluster.arch == Arch::kParameterServer)) {
    throw UsageError(fmt::format("--schedule {}: its operations are {}, so give --arch {}", file,
                                 ps ? "a parameter server's" : "all-reduces", ps ? "ps (and --servers)" : "allreduce"));
  }
  for (std::size_t i = 0; i < schedule.iterations.size(); ++i) {
    for (std::size_t k = 0; k < schedule.iterations[i].size(); ++k) {
      const CommOp& op = schedule.iterations[i][k];
      // Note [Sites in a schedule]: a reach needs the sites it names.
      if (op.reach != Reach::kAll && cluster.topology.empty()) {
        throw UsageError(fmt::format("--schedule {}: iterations[{}][{}] averages with reach {}, which needs sites: "
                                     "give them with --sites AxB (and --wan-bandwidth, --wan-latency) or --topology "
                                     "FILE",
                                     file, i, k, to_string(op.reach)));
      }
      if (ps && op.server >= cluster.servers) {
        throw UsageError(fmt::format("--schedule {}: iterations[{}][{}].server is {}; expected a server of --servers "
                                     "{} (0 to {})",
                                     file, i, k, op.server, cluster.servers, cluster.servers - 1));
      }
    }
  }
  return schedule;
}

// --schedule-out: a bad path is bad input.
void run_simulate(const SimulateFlags& flags) {
  if (flags.iterations < 0 || flags.iterations > limits::kMaxIterations) {
    throw UsageError(fmt::format("--iterations {}: expected an integer in [0, {}] (0: enough for a steady state)",
                                 flags.iterations, limits::kMaxIterations));
  }
  ranges::check(ranges::kTraceIterations, flags.trace_iterations);
  const Profile profile = load_model(flags.model);
  const Cluster cluster = make_cluster(flags.cluster, flags.model.profile_file);
  const Schedule schedule = flags.schedule.empty() ? planned_schedule(flags, profile, cluster)
                                                   : given_schedule(flags.schedule, profile, cluster);
  const Timeline timeline = simulate(schedule, profile, cluster,
                                     {.iterations = flags.iterations,
                                      .record_iterations = flags.trace.empty() ? 0 : flags.trace_iterations});
  if (!flags.schedule_out.empty()) write_output("--schedule-out", flags.schedule_out, to_json(schedule));
  if (!flags.trace.empty()) write_output("--trace", flags.trace, chrome_trace_json({&timeline}));
  if (flags.json) {
    fmt::print("{}\n", summary_json(timeline.summary));
    return;
  }
  const Summary& s = timeline.summary;
  fmt::print("{} {} on {} workers at {}: {} iterations simulated\n", profile.model, schedule.strategy,
             cluster.workers, format_bandwidth(cluster.bandwidth), s.iterations);
  if (!cluster.topology.empty()) fmt::print("  sites         {}\n", describe_topology(cluster.topology));
  fmt::print("  iteration     {}\n  compute       {}\n  exposed comm  {}\n  link busy     {:.0f}%\n",
             format_duration(s.iteration), format_duration(s.compute), format_duration(s.exposed_comm),
             100 * s.link_utilisation);
  if (cluster.arch == Arch::kParameterServer) {
    fmt::print("  peak incast   {} pushes into one server\n  server busy   {:.0f}%\n", s.peak_server_incast,
               100 * s.server_busy);
  }
  if (!flags.trace.empty()) fmt::print("trace: {}\n", flags.trace);
}

}  // namespace

void add_plan(CLI::App& app, int& exit_status) {
  auto flags = std::make_shared<PlanFlags>();
  CLI::App* cmd = app.add_subcommand("plan", "Predict every strategy's iteration time and recommend one");
  add_model_flags(*cmd, flags->model);
  add_cluster_flags(*cmd, flags->cluster);
  add_strategy_flags(*cmd, flags->strategy);
  cmd->get_option("--compression")
      ->description(fmt::format("wire encoding of every averaging message (S-SGD and local SGD): {}, or auto: "
                                "each such strategy with each of them; see docs/compression.md",
                                kEncodingsAccepted));
  cmd->add_option("--strategy", flags->strategies, "only these strategies (repeatable; default: all for --arch)");
  cmd->add_flag("--json", flags->json, "print the plan as JSON (docs/formats.md §6)");
  cmd->add_flag("--no-tune", flags->no_tune, "use default partition/credit instead of searching them");
  cmd->add_option("--trace", flags->trace, "write the predicted timelines of every strategy (Chrome trace JSON)");
  cmd->callback([flags] { run_plan(*flags); });
}

void add_simulate(CLI::App& app, int& exit_status) {
  auto flags = std::make_shared<SimulateFlags>();
  CLI::App* cmd = app.add_subcommand("simulate", "Simulate one strategy for N iterations");
  add_model_flags(*cmd, flags->model);
  add_cluster_flags(*cmd, flags->cluster);
  add_strategy_flags(*cmd, flags->strategy);
  cmd->add_option("--strategy", flags->name, "the strategy")->capture_default_str();
  cmd->add_option("--iterations,-n", flags->iterations, "iterations to simulate (0 = enough for a steady state)")
      ->capture_default_str()
      ->check(in_range(ranges::kIterations));
  cmd->add_flag("--json", flags->json, "print the summary as JSON");
  cmd->add_flag("--no-tune", flags->no_tune, "use default partition/credit instead of searching them");
  cmd->add_option("--trace", flags->trace, "write the timeline (Chrome trace JSON, opens in Perfetto)");
  cmd->add_option("--trace-iterations", flags->trace_iterations, "iterations recorded in --trace")
      ->capture_default_str()
      ->check(in_range(ranges::kTraceIterations));
  cmd->add_option("--schedule-out", flags->schedule_out, "write the schedule as JSON");
  CLI::Option* schedule = cmd->add_option(
      "--schedule", flags->schedule,
      "simulate this schedule (from --schedule-out) as it is, instead of planning --strategy: e.g. what a run "
      "executed, on other layer times");
  for (const char* planning : {"--strategy", "--H", "--T", "--partition", "--credit", "--easgd-alpha", "--easgd-beta",
                               "--no-tune", "--hierarchical", "--site-every"}) {
    schedule->excludes(cmd->get_option(planning));
  }
  cmd->callback([flags] { run_simulate(*flags); });
}

}  // namespace weft::cli
