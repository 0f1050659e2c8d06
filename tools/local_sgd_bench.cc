// Planning speed of the local-SGD strategies (schedulers/local_sgd.h). Goal:
// dreamddp-opt's dynamic programme on L = 1,000 layers, H = 20 under 100 ms. Also
// the seed's DFS (time and visited nodes) against the DP on every zoo model.
// Run: build/tools/bench_local_sgd
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <string>

#include "profile/zoo.h"
#include "schedulers/local_sgd.h"

namespace weft {
namespace {

using namespace literals;

const Cluster kCluster{.workers = 16, .bandwidth = 1_Gbit, .latency = 50_us};

// L layers of 1e3..1e7 parameters (log-uniform), whose backward is a fifth of
// their all-reduce time: about what H = 5 can hide, so the DFS has to search.
Profile synthetic_profile(int layers) {
  std::mt19937_64 rng(1000);
  std::uniform_real_distribution<double> unit(0, 1);
  Profile profile;
  profile.model = "synthetic";
  Seconds comm = 0;
  for (int l = 0; l < layers; ++l) {
    Layer layer{.name = "layer" + std::to_string(l),
                .params = static_cast<std::int64_t>(std::exp(std::log(1e3) + unit(rng) * std::log(1e4)))};
    comm += allreduce_time(kCluster, layer.bytes());
    profile.layers.push_back(layer);
  }
  for (Layer& layer : profile.layers) {
    layer.bp = comm / 5 / layers * (0.2 + 1.6 * unit(rng));
    layer.fp = layer.bp / 2;
  }
  return profile;
}

void BM_OptimalPartitionSynthetic(benchmark::State& state) {
  const local_sgd::Costs costs = local_sgd::costs_of(synthetic_profile(static_cast<int>(state.range(0))), kCluster);
  const int H = static_cast<int>(state.range(1));
  for (auto _ : state) benchmark::DoNotOptimize(local_sgd::optimal_partition(costs, H));
}
BENCHMARK(BM_OptimalPartitionSynthetic)
    ->ArgNames({"L", "H"})
    ->Args({1000, 20})
    ->Args({1000, 100})
    ->Args({10000, 20})
    ->Unit(benchmark::kMillisecond);

void BM_DfsSynthetic(benchmark::State& state) {
  const local_sgd::Costs costs = local_sgd::costs_of(synthetic_profile(static_cast<int>(state.range(0))), kCluster);
  const int H = static_cast<int>(state.range(1));
  std::int64_t nodes = 0;
  for (auto _ : state) nodes = local_sgd::dreamddp_dfs(costs, H).visited_nodes;
  state.counters["nodes"] = static_cast<double>(nodes);
}
BENCHMARK(BM_DfsSynthetic)->ArgNames({"L", "H"})->Args({1000, 5})->Args({1000, 20})->Unit(benchmark::kMillisecond);

void BM_Zoo(benchmark::State& state, const std::string& model, int H, bool dfs) {
  const local_sgd::Costs costs = local_sgd::costs_of(zoo_profile(model), kCluster);
  std::int64_t nodes = 0;
  for (auto _ : state) {
    if (dfs) {
      nodes = local_sgd::dreamddp_dfs(costs, H).visited_nodes;
    } else {
      benchmark::DoNotOptimize(local_sgd::optimal_partition(costs, H));
    }
  }
  state.counters["L"] = costs.size();
  if (dfs) state.counters["nodes"] = static_cast<double>(nodes);
}

void register_zoo_benchmarks() {
  for (const std::string& model : zoo_models()) {
    for (int H : {5, 20}) {
      for (bool dfs : {true, false}) {
        const std::string name = std::string(dfs ? "Dfs" : "OptimalPartition") + "/" + model +
                                 "/1Gbit/P16/H:" + std::to_string(H);
        benchmark::RegisterBenchmark(name.c_str(), BM_Zoo, model, H, dfs)->Unit(benchmark::kMicrosecond);
      }
    }
  }
}

const int registered = (register_zoo_benchmarks(), 0);

}  // namespace
}  // namespace weft
