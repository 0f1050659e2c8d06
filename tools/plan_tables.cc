// The planner's tables of BENCHMARKS.md, printed as Markdown: the simulator's
// predicted steady-state iteration times (plan/planner.h), so every number here is
// deterministic and the same on any machine. Run:
//
//   build-figures/tools/plan_tables dcredit     # D-Credit and ByteScheduler
//   build-figures/tools/plan_tables local-sgd   # DreamDDP and local SGD
//   build-figures/tools/plan_tables ps          # parameter server
//   build-figures/tools/plan_tables             # all three, in that order
//
// `scripts/figures.sh check` compares these with the tables in BENCHMARKS.md.
//
// Every cluster has the default per-message latency of `weft plan` (50 us) and
// every profile the zoo's defaults (batch 32 per worker, v100 preset), so a row
// can be reproduced with `weft plan --model M --workers P --bandwidth B`.
#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "plan/planner.h"
#include "profile/zoo.h"
#include "schedulers/local_sgd.h"

namespace weft {
namespace {

using namespace literals;

constexpr Seconds kLatency = 50_us;  // the default of `weft plan --latency`

struct Link {
  std::string_view name;
  BytesPerSecond rate;
};

// One strategy, simulated alone on `cluster` (plan() also simulates the wfbp
// reference, which these tables show as a column of their own).
PlannedStrategy predict(const Profile& profile, const Cluster& cluster, std::string_view strategy,
                        StrategyOptions options = {}, bool tune = true) {
  Plan p = plan(profile, cluster,
                {.strategies = {std::string(strategy)}, .strategy = options, .tune = tune});
  return std::move(p.strategies.at(0));
}

Seconds iteration(const PlannedStrategy& s) { return s.timeline.summary.iteration; }

nlohmann::json options_of(const PlannedStrategy& s) {
  return nlohmann::json::parse(s.schedule.options_json.empty() ? "{}" : s.schedule.options_json);
}

std::string ms(Seconds t) { return fmt::format("{:.1f}", t * 1e3); }
// The speed-up of `candidate` over `baseline` (> 1: candidate is faster).
std::string speedup(Seconds baseline, Seconds candidate) { return fmt::format("{:.2f}", baseline / candidate); }
std::string bytes_option(const nlohmann::json& options, const char* key) {
  return format_bytes(options.at(key).get<Bytes>());
}

// dcredit's phase-1 horizon, in one-block transfer times: a number, or "unbounded".
std::string horizon_option(const nlohmann::json& options) {
  const nlohmann::json& horizon = options.at("horizon");
  return horizon.is_string() ? horizon.get<std::string>() : fmt::format("{}", horizon.get<double>());
}

void print_row(const std::vector<std::string>& cells) {
  std::string line = "|";
  for (const std::string& cell : cells) line += " " + cell + " |";
  fmt::print("{}\n", line);
}

// The first `text_columns` columns are left-aligned, the numbers after them right.
void print_header(const std::vector<std::string>& names, size_t text_columns) {
  print_row(names);
  std::string rule = "|";
  for (size_t i = 0; i < names.size(); ++i) rule += i < text_columns ? "---|" : "---:|";
  fmt::print("{}\n", rule);
}

// D-Credit against the S-SGD baselines it is measured against in seed 001. Two
// bounds come first: the compute of one iteration and the time of the whole
// model's gradients as one all-reduce alone (allreduce_time), which no S-SGD
// schedule beats when it is the larger.
void dcredit_table() {
  print_header({"model", "link", "P", "compute ms", "model all-reduce ms", "wfbp ms", "mgwfbp ms",
                "bs default ms", "bs tuned ms",
                "dcredit ms", "dc/wfbp", "dc/mgwfbp", "dc/bs default", "dc/bs tuned",
                "bs tuned S_p, C", "dcredit S_p, horizon"},
               2);
  for (const std::string& model : zoo_models()) {
    const Profile profile = zoo_profile(model);
    for (const Link link : {Link{"1Gbit", 1_Gbit}, Link{"10Gbit", 10_Gbit}}) {
      for (int workers : {8, 32}) {
        const Cluster cluster{.workers = workers, .bandwidth = link.rate, .latency = kLatency};
        const PlannedStrategy wfbp = predict(profile, cluster, "wfbp");
        const PlannedStrategy mgwfbp = predict(profile, cluster, "mgwfbp");
        const PlannedStrategy bs_default = predict(profile, cluster, "bytescheduler", {}, /*tune=*/false);
        const PlannedStrategy bs_tuned = predict(profile, cluster, "bytescheduler");
        const PlannedStrategy dcredit = predict(profile, cluster, "dcredit");
        const Seconds dc = iteration(dcredit);
        const nlohmann::json bs_options = options_of(bs_tuned);
        const nlohmann::json dc_options = options_of(dcredit);
        print_row({model, std::string(link.name), std::to_string(workers),
                   ms(profile.forward_time() + profile.backward_time()),
                   ms(allreduce_time(cluster, profile.total_bytes())), ms(iteration(wfbp)),
                   ms(iteration(mgwfbp)), ms(iteration(bs_default)), ms(iteration(bs_tuned)), ms(dc),
                   speedup(iteration(wfbp), dc), speedup(iteration(mgwfbp), dc),
                   speedup(iteration(bs_default), dc), speedup(iteration(bs_tuned), dc),
                   bytes_option(bs_options, "partition_B") + ", " + bytes_option(bs_options, "credit_B"),
                   bytes_option(dc_options, "partition_B") + ", " + horizon_option(dc_options)});
      }
    }
  }
}

// Local SGD (seed 002) on 16 workers. The DFS gap is measured on the objective
// both searches minimise (local_sgd::period_time, before bubble filling), in
// seconds per period; the simulated columns include bubble filling.
void local_sgd_table() {
  constexpr int kWorkers = 16;
  print_header({"model", "link", "H", "wfbp ms", "flsgd ms", "plsgd ms", "dreamddp ms",
                "dreamddp-opt ms", "opt/wfbp", "opt/flsgd", "opt/plsgd", "DFS − DP objective s",
                "DFS nodes"},
               2);
  for (const std::string& model : zoo_models()) {
    const Profile profile = zoo_profile(model);
    for (const Link link : {Link{"100Mbit", 100_Mbit}, Link{"1Gbit", 1_Gbit}, Link{"10Gbit", 10_Gbit}}) {
      const Cluster cluster{.workers = kWorkers, .bandwidth = link.rate, .latency = kLatency};
      const Seconds wfbp = iteration(predict(profile, cluster, "wfbp"));
      const local_sgd::Costs costs = local_sgd::costs_of(profile, cluster);
      for (int H : {5, 10}) {
        const StrategyOptions options{.H = H};
        const Seconds flsgd = iteration(predict(profile, cluster, "flsgd", options));
        const Seconds plsgd = iteration(predict(profile, cluster, "plsgd", options));
        const Seconds dreamddp = iteration(predict(profile, cluster, "dreamddp", options));
        const Seconds opt = iteration(predict(profile, cluster, "dreamddp-opt", options));
        const local_sgd::DfsResult dfs = local_sgd::dreamddp_dfs(costs, H);
        const Seconds gap = local_sgd::period_time(costs, dfs.sets) -
                            local_sgd::period_time(costs, local_sgd::optimal_partition(costs, H));
        print_row({model, std::string(link.name), std::to_string(H), ms(wfbp), ms(flsgd), ms(plsgd),
                   ms(dreamddp), ms(opt), speedup(wfbp, opt), speedup(flsgd, opt), speedup(plsgd, opt),
                   gap == 0 ? "0" : fmt::format("{:.1e}", gap), std::to_string(dfs.visited_nodes)});
      }
    }
  }
}

// Parameter server (seed 000): one server whose link equals a worker's, against
// WFBP all-reduce on the same workers and links. Peak incast is the simulator's
// Summary::peak_server_incast: the most push transfers ever crossing the server's
// ingress link at once, over the whole run (see BENCHMARKS.md).
void ps_table() {
  print_header({"model", "P", "strategy", "T", "iteration ms", "vs wfbp", "peak incast",
                "server busy", "groups"},
               3);
  for (const std::string model : {"resnet50", "gpt2"}) {
    const Profile profile = zoo_profile(model);
    for (int workers : {8, 32}) {
      const Cluster allreduce{.workers = workers, .bandwidth = 1_Gbit, .latency = kLatency};
      Cluster ps = allreduce;
      ps.arch = Arch::kParameterServer;
      ps.servers = 1;
      const Seconds wfbp = iteration(predict(profile, allreduce, "wfbp"));
      print_row({model, std::to_string(workers), "wfbp (all-reduce)", "", ms(wfbp), "1.00", "", "", ""});
      const auto row = [&](std::string_view strategy, int T) {
        const PlannedStrategy s = predict(profile, ps, strategy, {.T = T});
        const Summary& sum = s.timeline.summary;
        print_row({model, std::to_string(workers), std::string(strategy), T > 0 ? std::to_string(T) : "",
                   ms(sum.iteration), speedup(wfbp, sum.iteration), std::to_string(sum.peak_server_incast),
                   fmt::format("{:.0f}%", 100 * sum.server_busy),
                   std::to_string(options_of(s).at("groups").get<int>())});
      };
      row("ps", 0);
      for (int T : {1, 2, 3, 5}) row("ps-interleaved", T);
    }
  }
}

struct Table {
  std::string_view name;
  std::function<void()> print;
};

int run(int argc, char** argv) {
  const std::vector<Table> tables = {
      {"dcredit", dcredit_table}, {"local-sgd", local_sgd_table}, {"ps", ps_table}};
  if (argc > 2) {
    std::fprintf(stderr, "usage: %s [dcredit|local-sgd|ps]\n", argv[0]);
    return 2;
  }
  const std::string_view wanted = argc == 2 ? argv[1] : "";
  bool printed = false;
  for (const Table& table : tables) {
    if (!wanted.empty() && table.name != wanted) continue;
    if (printed) fmt::print("\n");
    table.print();
    printed = true;
  }
  if (!printed) {
    std::fprintf(stderr, "plan_tables: unknown table '%s'; expected dcredit, local-sgd or ps\n", argv[1]);
    return 2;
  }
  return 0;
}

}  // namespace
}  // namespace weft

int main(int argc, char** argv) {
  try {
    return weft::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "plan_tables: %s\n", e.what());
    return 1;
  }
}
