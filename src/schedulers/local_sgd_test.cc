// Tests of the local-SGD strategies (schedulers/local_sgd.cc): the DFS against a
// literal transcription of seed 002's Algorithm 2, the dynamic programme against
// brute force and against the DFS, bubble filling, the schedules' structure, and
// the objective against the simulator.

#include "schedulers/local_sgd.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "profile/zoo.h"
#include "schedule/wire_cost.h"
#include "schedulers/codec_testing.h"
#include "schedulers/lateness_testing.h"
#include "schedulers/strategies.h"
#include "sim/simulator.h"

namespace weft {
namespace {

using namespace literals;
using local_sgd::Costs;
using local_sgd::LayerSets;
using Rng = std::mt19937_64;

double uniform(Rng& rng, double lo, double hi) {
  return std::uniform_real_distribution<double>(lo, hi)(rng);
}
double log_uniform(Rng& rng, double lo, double hi) {
  return std::exp(uniform(rng, std::log(lo), std::log(hi)));
}
int uniform_int(Rng& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

Cluster random_cluster(Rng& rng) {
  Cluster cluster;
  cluster.workers = std::vector<int>{2, 4, 16, 64}[static_cast<size_t>(uniform_int(rng, 0, 3))];
  cluster.bandwidth = log_uniform(rng, 10e6, 12.5e9);
  cluster.latency = std::vector<Seconds>{0.0, 50_us, 1_ms}[static_cast<size_t>(uniform_int(rng, 0, 2))];
  return cluster;
}

// Backward times on the scale of one layer's all-reduce, spread widely, so that a
// set hides, overflows or sits on the edge in every proportion; some layers have
// no parameters (they send nothing).
Profile random_profile(Rng& rng, int layers, const Cluster& cluster) {
  Profile profile;
  profile.model = "random";
  Bytes total = 0;
  for (int l = 0; l < layers; ++l) {
    Layer layer;
    layer.name = "layer" + std::to_string(l);
    layer.params = uniform(rng, 0, 1) < 0.1 ? 0 : static_cast<std::int64_t>(log_uniform(rng, 1e3, 1e7));
    total += layer.bytes();
    profile.layers.push_back(layer);
  }
  const Seconds scale = allreduce_time(cluster, std::max<Bytes>(total / layers, 1));
  for (Layer& layer : profile.layers) {
    layer.bp = scale * log_uniform(rng, 0.05, 5.0);
    layer.fp = layer.bp * uniform(rng, 0.3, 0.7);
  }
  return profile;
}

bool near(double a, double b, double relative = 1e-9) {
  return std::abs(a - b) <= relative * std::max(std::abs(a), std::abs(b));
}

// Every layer in exactly one set; sets contiguous and descending, sets[0] holding
// the output-side layers.
void expect_contiguous_partition(const LayerSets& sets, int layers, int H) {
  ASSERT_EQ(static_cast<int>(sets.size()), H);
  int next = layers - 1;
  for (const std::vector<int>& set : sets) {
    for (int l : set) EXPECT_EQ(l, next--);
  }
  EXPECT_EQ(next, -1);
}

// Seed 002 Algorithm 2 transcribed line by line, with its deep copies, its
// solution set Ω and the argmin over Ω (line 2), and docs/strategies.md §4.3's fix of the branch
// (lines 26-30). The conditions are the seed's, in its terms: t_BP^{L_h:H} −
// t_BP^{h0} against t_COMM of L_h, both measured from the end of h0's backward.
// 1-based layers and iterations as in the seed.
class ReferenceAlgorithm2 {
 public:
  ReferenceAlgorithm2(const Costs& costs, int H) : costs_(costs), H_(H) {}

  LayerSets solve() {
    solve_subproblem(LayerSets(static_cast<size_t>(H_)), costs_.size(), 1);
    LayerSets best;
    Seconds best_time = 0;
    for (const LayerSets& psi : omega_) {
      const Seconds t = local_sgd::period_time(costs_, psi);
      if (best.empty() || t < best_time) {
        best = psi;
        best_time = t;
      }
    }
    return best;
  }
  std::int64_t calls() const { return calls_; }

 private:
  // L_h holds 0-based layers in descending order; its first, h0, ends its backward
  // first. t_BP^{L_h:H} − t_BP^{h0}: the rest of the backward after h0's ends.
  Seconds hiding_window(const std::vector<int>& set) const {
    return costs_.backward - costs_.bp_end[static_cast<size_t>(set.front())];
  }
  Seconds comm(const std::vector<int>& set) const {
    return local_sgd::sync_end(costs_, set) - costs_.bp_end[static_cast<size_t>(set.front())];
  }

  void solve_subproblem(LayerSets psi, int l, int h) {
    ++calls_;
    std::vector<int>& set = psi[static_cast<size_t>(h - 1)];
    if (l == 0) {
      omega_.push_back(psi);
      return;
    }
    if (h == H_) {
      for (int i = l; i >= 1; --i) set.push_back(i - 1);
      omega_.push_back(psi);
      return;
    }
    std::vector<int> with_l = set;
    with_l.push_back(l - 1);
    if (set.empty()) {
      set = with_l;
      solve_subproblem(psi, l - 1, h);
    } else if (hiding_window(set) >= comm(with_l)) {
      set = with_l;
      solve_subproblem(psi, l - 1, h);
    } else if (hiding_window(set) < comm(set)) {
      solve_subproblem(psi, l, h + 1);
    } else {
      LayerSets psi_minus = psi;
      psi_minus[static_cast<size_t>(h - 1)] = with_l;
      solve_subproblem(psi_minus, l - 1, h);
      LayerSets psi_plus = psi;
      solve_subproblem(psi_plus, l, h + 1);
    }
  }

  const Costs& costs_;
  const int H_;
  std::vector<LayerSets> omega_;
  std::int64_t calls_ = 0;
};

TEST(LocalSgdPlanning, EqualNumberPartitionSplitsEvenlyOutputSideFirst) {
  for (int layers = 0; layers <= 30; ++layers) {
    for (int H = 1; H <= 12; ++H) {
      const LayerSets sets = local_sgd::equal_number_partition(layers, H);
      expect_contiguous_partition(sets, layers, H);
      for (size_t h = 1; h < sets.size(); ++h) {
        EXPECT_LE(sets[h].size(), sets[h - 1].size());
        EXPECT_LE(sets[0].size(), sets[h].size() + 1);
      }
    }
  }
}

TEST(LocalSgdPlanning, DfsIsSeedAlgorithm2) {
  Rng rng(2002);
  int searched = 0;  // cases where Algorithm 2 had to branch at least once
  for (int trial = 0; trial < 400; ++trial) {
    const Cluster cluster = random_cluster(rng);
    const int L = uniform_int(rng, 1, 14);
    const int H = uniform_int(rng, 1, 6);
    const Costs costs = local_sgd::costs_of(random_profile(rng, L, cluster), cluster);
    ReferenceAlgorithm2 reference(costs, H);
    const LayerSets expected = reference.solve();
    const local_sgd::DfsResult got = local_sgd::dreamddp_dfs(costs, H);
    SCOPED_TRACE("trial " + std::to_string(trial) + " L=" + std::to_string(L) + " H=" + std::to_string(H));
    expect_contiguous_partition(got.sets, L, H);
    EXPECT_EQ(got.sets, expected);
    EXPECT_EQ(got.visited_nodes, reference.calls());
    if (reference.calls() > L + H) ++searched;
  }
  EXPECT_GT(searched, 50) << "the random cases rarely reach the DFS branch";
}

TEST(LocalSgdPlanning, DynamicProgrammeEqualsBruteForce) {
  Rng rng(7);
  for (int trial = 0; trial < 600; ++trial) {
    const Cluster cluster = random_cluster(rng);
    const int L = uniform_int(rng, 1, 12);
    const int H = uniform_int(rng, 1, 4);
    const Costs costs = local_sgd::costs_of(random_profile(rng, L, cluster), cluster);
    const LayerSets dp = local_sgd::optimal_partition(costs, H);
    const LayerSets brute = local_sgd::brute_force_partition(costs, H);
    SCOPED_TRACE("trial " + std::to_string(trial) + " L=" + std::to_string(L) + " H=" + std::to_string(H));
    expect_contiguous_partition(dp, L, H);
    const Seconds dp_time = local_sgd::period_time(costs, dp);
    const Seconds brute_time = local_sgd::period_time(costs, brute);
    EXPECT_TRUE(near(dp_time, brute_time)) << dp_time << " vs " << brute_time;
    // Never worse than the DFS; in fact equal (Note [The DFS prunings are exact]).
    const Seconds dfs_time = local_sgd::period_time(costs, local_sgd::dreamddp_dfs(costs, H).sets);
    EXPECT_LE(dp_time, dfs_time * (1 + 1e-12));
    EXPECT_TRUE(near(dp_time, dfs_time)) << dp_time << " vs " << dfs_time;
  }
}

TEST(LocalSgdPlanning, OptimumNeverWorseThanDfsOnTheZoo) {
  for (const std::string& model : zoo_models()) {
    const Profile profile = zoo_profile(model);
    for (BytesPerSecond bandwidth : {100_Mbit, 1_Gbit, 10_Gbit}) {
      const Cluster cluster{.workers = 16, .bandwidth = bandwidth, .latency = 50_us};
      const Costs costs = local_sgd::costs_of(profile, cluster);
      for (int H : {2, 5, 10, 20}) {
        SCOPED_TRACE(model + " " + format_bandwidth(bandwidth) + " H=" + std::to_string(H));
        const LayerSets opt = local_sgd::optimal_partition(costs, H);
        const LayerSets dfs = local_sgd::dreamddp_dfs(costs, H).sets;
        expect_contiguous_partition(opt, profile.size(), H);
        expect_contiguous_partition(dfs, profile.size(), H);
        const Seconds opt_time = local_sgd::period_time(costs, opt);
        const Seconds dfs_time = local_sgd::period_time(costs, dfs);
        EXPECT_LE(opt_time, dfs_time * (1 + 1e-12));
        EXPECT_TRUE(near(opt_time, dfs_time)) << opt_time << " vs " << dfs_time;
        const LayerSets equal = local_sgd::equal_number_partition(profile.size(), H);
        EXPECT_LE(opt_time, local_sgd::period_time(costs, equal) * (1 + 1e-12));
      }
    }
  }
}

TEST(LocalSgdPlanning, BubbleFillingAddsOutputSideLayersAtNoCost) {
  Rng rng(12);
  int filled_any = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const Cluster cluster = random_cluster(rng);
    const int L = uniform_int(rng, 1, 30);
    const int H = uniform_int(rng, 1, 8);
    const Costs costs = local_sgd::costs_of(random_profile(rng, L, cluster), cluster);
    const LayerSets sets = trial % 2 ? local_sgd::optimal_partition(costs, H)
                                     : local_sgd::dreamddp_dfs(costs, H).sets;
    const LayerSets filled = local_sgd::fill_bubbles(costs, sets);
    const LayerSets all = local_sgd::merged(sets, filled);
    ASSERT_EQ(filled.size(), sets.size());
    for (size_t h = 0; h < sets.size(); ++h) {
      // Output side, contiguous from L−1, disjoint from the set it joins.
      for (size_t k = 0; k < filled[h].size(); ++k) {
        EXPECT_EQ(filled[h][k], L - 1 - static_cast<int>(k));
        EXPECT_EQ(std::count(sets[h].begin(), sets[h].end(), filled[h][k]), 0);
      }
      EXPECT_LE(local_sgd::iteration_time(costs, all[h]), local_sgd::iteration_time(costs, sets[h]));
      // Maximal: one more layer would be in the set already or cost time.
      const int next = L - 1 - static_cast<int>(filled[h].size());
      if (next >= 0 && std::count(sets[h].begin(), sets[h].end(), next) == 0) {
        std::vector<int> more = all[h];
        more.push_back(next);
        std::sort(more.begin(), more.end(), std::greater<>());
        EXPECT_GT(local_sgd::iteration_time(costs, more), local_sgd::iteration_time(costs, sets[h]));
      }
      if (!filled[h].empty()) ++filled_any;
    }
  }
  EXPECT_GT(filled_any, 50);
}

TEST(LocalSgdSchedules, RejectPeriodBelowOne) {
  const Profile profile = zoo_profile("resnet18");
  const Cluster cluster{.workers = 4, .bandwidth = 1_Gbit};
  for (SchedulerFn make : {&make_flsgd, &make_plsgd, &make_dreamddp, &make_dreamddp_opt}) {
    for (int H : {0, -3}) {
      try {
        make(profile, cluster, StrategyOptions{.H = H});
        ADD_FAILURE() << "H = " << H << " accepted";
      } catch (const UsageError& e) {
        EXPECT_NE(std::string(e.what()).find("--H"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(std::to_string(H)), std::string::npos) << e.what();
      }
    }
  }
}

// Which layers each iteration of the schedule averages, from its operations.
LayerSets averaged_layers(const Schedule& schedule) {
  LayerSets layers;
  for (const std::vector<CommOp>& ops : schedule.iterations) {
    std::vector<int>& set = layers.emplace_back();
    for (const CommOp& op : ops) {
      for (const Chunk& chunk : op.chunks) set.push_back(chunk.layer);
    }
  }
  return layers;
}

TEST(LocalSgdSchedules, EveryLayerAveragedAtLeastOncePerPeriod) {
  Rng rng(5);
  for (int trial = 0; trial < 60; ++trial) {
    const Cluster cluster = random_cluster(rng);
    const int L = uniform_int(rng, 1, 40);
    const int H = uniform_int(rng, 1, 12);
    Profile profile = random_profile(rng, L, cluster);
    for (SchedulerFn make : {&make_flsgd, &make_plsgd, &make_dreamddp, &make_dreamddp_opt}) {
      const Schedule schedule = make(profile, cluster, StrategyOptions{.H = H});
      SCOPED_TRACE(schedule.strategy + " L=" + std::to_string(L) + " H=" + std::to_string(H));
      validate(schedule, profile, cluster.workers);
      EXPECT_EQ(schedule.period, H);
      EXPECT_EQ(schedule.dispatch.kind, DispatchPolicy::Kind::kInOrder);
      std::vector<int> times(static_cast<size_t>(L), 0);
      for (const std::vector<int>& set : averaged_layers(schedule)) {
        for (int l : set) ++times[static_cast<size_t>(l)];
      }
      for (int l = 0; l < L; ++l) {
        EXPECT_GE(times[static_cast<size_t>(l)], profile.layers[static_cast<size_t>(l)].params > 0 ? 1 : 0)
            << "layer " << l;
      }
      for (const std::vector<CommOp>& ops : schedule.iterations) {
        for (const CommOp& op : ops) {
          EXPECT_EQ(op.kind, OpKind::kAverageParameters);
          EXPECT_EQ(op.needed_by, kBarrier);
        }
      }
      // The plan is printed from options_json: its sets must be the schedule's.
      const nlohmann::json options = nlohmann::json::parse(schedule.options_json);
      EXPECT_EQ(options.at("H").get<int>(), H);
      LayerSets from_options = options.at("sets").get<LayerSets>();
      if (options.contains("filled")) {
        from_options = local_sgd::merged(from_options, options.at("filled").get<LayerSets>());
      }
      LayerSets from_ops = averaged_layers(schedule);
      for (LayerSets* sets : {&from_options, &from_ops}) {
        for (std::vector<int>& set : *sets) {
          std::erase_if(set, [&](int l) { return profile.layers[static_cast<size_t>(l)].params == 0; });
          std::sort(set.begin(), set.end());
        }
      }
      EXPECT_EQ(from_options, from_ops);
    }
  }
}

TEST(LocalSgdSchedules, PlsgdWithPeriodOneAveragesEveryLayerEveryIteration) {
  Rng rng(1);
  for (int trial = 0; trial < 20; ++trial) {
    const Cluster cluster = random_cluster(rng);
    const int L = uniform_int(rng, 1, 40);
    const Profile profile = random_profile(rng, L, cluster);
    const Schedule schedule = make_plsgd(profile, cluster, StrategyOptions{.H = 1});
    ASSERT_EQ(schedule.period, 1);
    std::vector<int> expected;
    for (int l = L - 1; l >= 0; --l) {
      if (profile.layers[static_cast<size_t>(l)].params > 0) expected.push_back(l);
    }
    std::vector<int> got;
    for (const CommOp& op : schedule.iterations[0]) {
      ASSERT_EQ(op.chunks.size(), 1u);
      EXPECT_EQ(op.ready_after, op.chunks[0].layer);
      EXPECT_EQ(op.chunks[0].length, profile.layers[static_cast<size_t>(op.ready_after)].bytes());
      got.push_back(op.chunks[0].layer);
    }
    EXPECT_EQ(got, expected);  // every layer, as soon as its backward ends, in order
  }
}

TEST(LocalSgdSchedules, FlsgdAveragesTheWholeModelOnceAtTheEndOfThePeriod) {
  const Profile profile = zoo_profile("resnet50");
  const Cluster cluster{.workers = 16, .bandwidth = 1_Gbit};
  const Schedule schedule = make_flsgd(profile, cluster, StrategyOptions{.H = 5});
  ASSERT_EQ(schedule.iterations.size(), 5u);
  for (int h = 0; h < 4; ++h) EXPECT_TRUE(schedule.iterations[static_cast<size_t>(h)].empty());
  ASSERT_EQ(schedule.iterations[4].size(), 1u);
  EXPECT_EQ(schedule.iterations[4][0].bytes(), profile.total_bytes());
  EXPECT_EQ(schedule.iterations[4][0].ready_after, 0);
}

TEST(LocalSgdPlanning, DynamicProgrammeEqualsDfsOnLargerCases) {
  // Beyond brute force's reach the DFS is the oracle (Note [The DFS prunings are
  // exact]); these sizes exercise the DP's hidden/overflow split at scale.
  Rng rng(99);
  for (int trial = 0; trial < 150; ++trial) {
    const Cluster cluster = random_cluster(rng);
    const int L = uniform_int(rng, 13, 200);
    const int H = uniform_int(rng, 1, 12);
    const Costs costs = local_sgd::costs_of(random_profile(rng, L, cluster), cluster);
    const LayerSets dp = local_sgd::optimal_partition(costs, H);
    SCOPED_TRACE("trial " + std::to_string(trial) + " L=" + std::to_string(L) + " H=" + std::to_string(H));
    expect_contiguous_partition(dp, L, H);
    const Seconds dp_time = local_sgd::period_time(costs, dp);
    const Seconds dfs_time = local_sgd::period_time(costs, local_sgd::dreamddp_dfs(costs, H).sets);
    EXPECT_TRUE(near(dp_time, dfs_time)) << dp_time << " vs " << dfs_time;
  }
}

// A random contiguous plan: H counts summing to L.
LayerSets random_plan(Rng& rng, int L, int H) {
  std::vector<int> cuts{0, L};
  for (int h = 1; h < H; ++h) cuts.push_back(uniform_int(rng, 0, L));
  std::sort(cuts.begin(), cuts.end());
  LayerSets sets;
  for (size_t h = 0; h + 1 < cuts.size(); ++h) {
    std::vector<int>& set = sets.emplace_back();
    for (int l = L - 1 - cuts[h]; l > L - 1 - cuts[h + 1]; --l) set.push_back(l);
  }
  return sets;
}

Seconds simulated_period(const Schedule& schedule, const Profile& profile, const Cluster& cluster) {
  return simulate(schedule, profile, cluster).summary.iteration * schedule.period;
}

TEST(LocalSgdSimulated, ObjectiveIsWhatTheSimulatorMeasures) {
  Rng rng(31);
  for (int trial = 0; trial < 200; ++trial) {
    const Cluster cluster = random_cluster(rng);
    const int L = uniform_int(rng, 1, 20);
    const int H = uniform_int(rng, 1, 6);
    const Profile profile = random_profile(rng, L, cluster);
    const Costs costs = local_sgd::costs_of(profile, cluster);
    const LayerSets sets = random_plan(rng, L, H);
    expect_contiguous_partition(sets, L, H);
    // Half the cases with bubble filling, whose layers lead each iteration's chain.
    const LayerSets filled = trial % 2 ? local_sgd::fill_bubbles(costs, sets) : LayerSets(sets.size());
    const Schedule schedule = local_sgd::partial_sync_schedule("plan", profile, sets, filled);
    SCOPED_TRACE("trial " + std::to_string(trial) + " " + schedule.options_json);
    const Seconds predicted = local_sgd::period_time(costs, local_sgd::merged(sets, filled));
    const Seconds simulated = simulated_period(schedule, profile, cluster);
    EXPECT_TRUE(near(predicted, simulated)) << predicted << " vs " << simulated;
  }
}

TEST(LocalSgdSimulated, StrategiesTakeThePredictedTime) {
  Rng rng(32);
  for (int trial = 0; trial < 40; ++trial) {
    const Cluster cluster = random_cluster(rng);
    const int L = uniform_int(rng, 1, 30);
    const int H = uniform_int(rng, 1, 8);
    const Profile profile = random_profile(rng, L, cluster);
    const Costs costs = local_sgd::costs_of(profile, cluster);
    const StrategyOptions options{.H = H};
    SCOPED_TRACE("trial " + std::to_string(trial) + " L=" + std::to_string(L) + " H=" + std::to_string(H));
    const Seconds opt = simulated_period(make_dreamddp_opt(profile, cluster, options), profile, cluster);
    const Seconds dfs = simulated_period(make_dreamddp(profile, cluster, options), profile, cluster);
    const Seconds plsgd = simulated_period(make_plsgd(profile, cluster, options), profile, cluster);
    EXPECT_TRUE(near(opt, local_sgd::period_time(costs, local_sgd::optimal_partition(costs, H))));
    EXPECT_LE(opt, dfs * (1 + 1e-9));
    EXPECT_LE(opt, plsgd * (1 + 1e-9));
    EXPECT_TRUE(near(plsgd, local_sgd::period_time(costs, local_sgd::equal_number_partition(L, H))));
    // flsgd: H − 1 plain iterations, then one all-reduce of the whole model.
    const Seconds flsgd = simulated_period(make_flsgd(profile, cluster, options), profile, cluster);
    const Seconds compute = costs.forward + costs.backward;
    EXPECT_TRUE(near(flsgd, H * compute + allreduce_time(cluster, profile.total_bytes())))
        << flsgd;
  }
}

// Note [Plans price the encoded message]: in every codec, each layer's cost is
// its encoded all-reduce, and the objective of dreamddp-opt's sets is what the
// simulator measures of the encoded schedule.
TEST(LocalSgdSimulated, SetsPriceTheEncodedMessage) {
  std::mt19937 rng(33);
  const std::vector<Encoding> encodings = candidate_encodings();
  for (int trial = 0; trial < 60; ++trial) {
    const Cluster cluster{.workers = 2 << (trial % 4), .bandwidth = 1.25e6 * (1 << (trial % 7)),
                          .latency = 1e-4 * (trial % 5)};
    const Profile profile = random_shaped_profile(rng, 16, allreduce_time(cluster, 4096));
    const Encoding& encoding = encodings[static_cast<size_t>(trial) % encodings.size()];
    const int H = 1 + trial % 5;
    SCOPED_TRACE("trial " + std::to_string(trial) + " " + to_string(encoding) + " H " + std::to_string(H));
    const Costs costs = local_sgd::costs_of(profile, cluster, encoding);
    for (int l = 0; l < profile.size(); ++l) {
      const Chunk whole{.layer = l, .offset = 0, .length = profile.layers[static_cast<size_t>(l)].bytes()};
      EXPECT_DOUBLE_EQ(costs.comm[static_cast<size_t>(l)],
                       encoded_allreduce_time(AllReduceTime(cluster), cluster,
                                              wire_cost(encoding, {whole}, profile, cluster.host)));
    }
    const Schedule schedule = find_strategy("dreamddp-opt").make(profile, cluster, {.H = H, .compression = encoding});
    const auto sets = nlohmann::json::parse(schedule.options_json);
    const LayerSets all = local_sgd::merged(sets.at("sets").get<LayerSets>(), sets.at("filled").get<LayerSets>());
    const Seconds predicted = local_sgd::period_time(costs, all);
    EXPECT_TRUE(near(predicted, simulated_period(schedule, profile, cluster)))
        << predicted << " vs " << simulated_period(schedule, profile, cluster);
  }
}

// Note [A collective's lateness in plans]: the layers of lateness_case(), each
// averaged by its own all-reduce, in a period of 2. Priced without lateness every
// plan overhangs the backward by one all-reduce, and the plan averages all four
// layers in one iteration; with every collective 6 ms late, a chain of four
// overhangs it by far more, and the plan averages the output layer alone in one
// iteration, the other three in the next. The simulator, charging that lateness,
// finds that faster.
TEST(LocalSgdSimulated, SetsPriceEachCollectivesLateness) {
  const auto [profile, late, prompt] = lateness_case();
  const Costs costs = local_sgd::costs_of(profile, late);
  for (int l = 0; l < profile.size(); ++l) {
    EXPECT_DOUBLE_EQ(costs.comm[static_cast<size_t>(l)],
                     6e-3 + allreduce_time(late, profile.layers[static_cast<size_t>(l)].bytes()));
  }
  const auto sets = [](const Schedule& s) {
    return nlohmann::json::parse(s.options_json).at("sets").get<LayerSets>();
  };
  const StrategyOptions options{.H = 2};
  const Schedule priced = make_dreamddp_opt(profile, late, options);
  const Schedule unpriced = make_dreamddp_opt(profile, prompt, options);
  EXPECT_EQ(sets(unpriced), (LayerSets{{3, 2, 1, 0}, {}}));
  EXPECT_EQ(sets(priced), (LayerSets{{3}, {2, 1, 0}}));
  EXPECT_LT(simulated_period(priced, profile, late), simulated_period(unpriced, profile, late));
}

TEST(LocalSgdSimulated, BubbleFillingNeverSlowsAnIteration) {
  Rng rng(33);
  int filled_any = 0;
  for (int trial = 0; trial < 100; ++trial) {
    const Cluster cluster = random_cluster(rng);
    const int L = uniform_int(rng, 1, 30);
    const int H = uniform_int(rng, 1, 6);
    const Profile profile = random_profile(rng, L, cluster);
    const Costs costs = local_sgd::costs_of(profile, cluster);
    const LayerSets sets = trial % 2 ? local_sgd::optimal_partition(costs, H) : random_plan(rng, L, H);
    const LayerSets filled = local_sgd::fill_bubbles(costs, sets);
    SCOPED_TRACE("trial " + std::to_string(trial));
    EXPECT_LE(simulated_period(local_sgd::partial_sync_schedule("filled", profile, sets, filled), profile, cluster),
              simulated_period(local_sgd::partial_sync_schedule("plain", profile, sets, LayerSets(sets.size())),
                               profile, cluster) * (1 + 1e-9));
    // Iteration by iteration: a period of two, sets[h] (filled or not) and then
    // every other layer, so that only iteration h differs between the two runs.
    for (size_t h = 0; h < sets.size(); ++h) {
      std::vector<int> rest;
      for (int l = L - 1; l >= 0; --l) {
        if (std::count(sets[h].begin(), sets[h].end(), l) == 0) rest.push_back(l);
      }
      const LayerSets two = {sets[h], rest};
      const Schedule plain = local_sgd::partial_sync_schedule("plain", profile, two, {{}, {}});
      const Schedule more = local_sgd::partial_sync_schedule("filled", profile, two, {filled[h], {}});
      EXPECT_LE(simulated_period(more, profile, cluster),
                simulated_period(plain, profile, cluster) * (1 + 1e-9));
      if (!filled[h].empty()) ++filled_any;
    }
  }
  EXPECT_GT(filled_any, 20);
}

TEST(LocalSgdSimulated, PlsgdWithPeriodOneTimesLikeWfbp) {
  // Same messages at the same moments; only what is averaged differs.
  Rng rng(34);
  for (int trial = 0; trial < 30; ++trial) {
    const Cluster cluster = random_cluster(rng);
    const Profile profile = random_profile(rng, uniform_int(rng, 1, 40), cluster);
    const Seconds plsgd = simulated_period(make_plsgd(profile, cluster, {.H = 1}), profile, cluster);
    const Seconds wfbp = simulated_period(make_wfbp(profile, cluster, {}), profile, cluster);
    EXPECT_TRUE(near(plsgd, wfbp)) << plsgd << " vs " << wfbp;
  }
}

}  // namespace
}  // namespace weft
