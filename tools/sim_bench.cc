// Simulator and planner speed (issue: foundation). Goals: 1,000 iterations of gpt2
// on 32 workers under 1 s per strategy; `weft plan` over every zoo model and every
// strategy under 2 s. Run: build/tools/bench_sim
#include <benchmark/benchmark.h>

#include "plan/planner.h"
#include "profile/zoo.h"
#include "sim/simulator.h"

namespace weft {
namespace {

using namespace literals;

void BM_Simulate1000IterationsGpt2(benchmark::State& state, std::string strategy, Arch arch) {
  const Profile profile = zoo_profile("gpt2");
  const Cluster cluster{.workers = 32, .bandwidth = 1_Gbit, .latency = 50_us, .arch = arch};
  const Schedule schedule = find_strategy(strategy).make(profile, cluster, {});
  for (auto _ : state) {
    const Timeline t = simulate(schedule, profile, cluster, {.iterations = 1000});
    benchmark::DoNotOptimize(t.summary.iteration);
  }
  // Compute events (a forward and a backward per layer per worker) plus one per op.
  std::int64_t ops = 0;
  for (const auto& it : schedule.iterations) ops += static_cast<std::int64_t>(it.size());
  const double events = 1000.0 * cluster.workers *
                        (2.0 * profile.size() + static_cast<double>(ops) / schedule.period);
  state.counters["events/s"] = benchmark::Counter(events, benchmark::Counter::kIsIterationInvariantRate);
}

void register_simulation_benchmarks() {
  for (const StrategyInfo& info : strategies()) {
    benchmark::RegisterBenchmark(("Simulate1000/gpt2/P32/" + std::string(info.name)).c_str(),
                                 BM_Simulate1000IterationsGpt2, std::string(info.name), info.arch)
        ->Unit(benchmark::kMillisecond);
  }
}

void BM_PlanEveryZooModel(benchmark::State& state) {
  for (auto _ : state) {
    for (const std::string& model : zoo_models()) {
      const Profile profile = zoo_profile(model);
      for (Arch arch : {Arch::kAllReduce, Arch::kParameterServer}) {
        const Cluster cluster{.workers = 32, .bandwidth = 1_Gbit, .latency = 50_us, .arch = arch};
        benchmark::DoNotOptimize(plan(profile, cluster).recommended);
      }
    }
  }
}
BENCHMARK(BM_PlanEveryZooModel)->Unit(benchmark::kMillisecond);

const int registered = (register_simulation_benchmarks(), 0);

}  // namespace
}  // namespace weft
