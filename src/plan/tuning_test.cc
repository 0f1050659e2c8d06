// Tests of the planner's tuning of S_p and C (plan/tuning.h).

#include "plan/tuning.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "profile/zoo.h"
#include "schedulers/blocks.h"
#include "sim/simulator.h"

namespace weft {
namespace {

using namespace literals;

Seconds iteration_time(const StrategyInfo& s, const Profile& p, const Cluster& c,
                       const StrategyOptions& o) {
  return simulate(s.make(p, c, o), p, c).summary.iteration;
}

Profile random_profile(std::mt19937& rng) {
  std::uniform_int_distribution<int> layers(1, 10);
  std::uniform_int_distribution<std::int64_t> params(1, 4'000'000);
  std::uniform_real_distribution<double> fp(1e-4, 2e-2);
  Profile p{.model = "random"};
  const int n = layers(rng);
  for (int l = 0; l < n; ++l) {
    const Seconds f = fp(rng);
    p.layers.push_back({.name = "l" + std::to_string(l), .params = params(rng), .fp = f, .bp = 2 * f});
  }
  return p;
}

Cluster random_cluster(std::mt19937& rng) {
  const int workers = std::uniform_int_distribution<int>(2, 32)(rng);
  const double mbit = std::pow(10.0, std::uniform_real_distribution<double>(2, 4)(rng));
  return {.workers = workers, .bandwidth = mbit * 1e6 / 8,
          .latency = std::uniform_real_distribution<double>(0, 200e-6)(rng)};
}

TEST(TuningTest, CandidatesArePowersOfTwoUpToTheLargestLayer) {
  const Profile p = zoo_profile("vgg16");
  const std::vector<Bytes> partitions = partition_candidates(p);
  ASSERT_FALSE(partitions.empty());
  EXPECT_NE(std::find(partitions.begin(), partitions.end(), kDefaultPartition), partitions.end());
  Bytes largest = 0;
  for (const Layer& l : p.layers) largest = std::max(largest, l.bytes());
  EXPECT_GE(partitions.back(), largest);       // no partitioning is a candidate
  EXPECT_LT(partitions.back() / 2, largest);   // and nothing beyond it
  for (Bytes sp : partitions) EXPECT_EQ(sp & (sp - 1), 0) << sp;
  const std::vector<Bytes> credits = credit_candidates(p, 1_MiB);
  EXPECT_EQ(credits.front(), 1_MiB);
  EXPECT_GE(credits.back(), p.total_bytes());
  EXPECT_LT(credits.back() / 2, p.total_bytes());
}

TEST(TuningTest, StrategiesWithNothingToTuneGetTheirOptionsBack) {
  const Profile p = zoo_profile("resnet18");
  const Cluster c{.workers = 8, .bandwidth = 1_Gbit, .latency = 50_us};
  const StrategyOptions base{.H = 7, .T = 2};
  for (const char* name : {"ssgd", "wfbp", "ddp", "mgwfbp"}) {
    const StrategyOptions out = tune(find_strategy(name), p, c, base);
    EXPECT_EQ(out.H, 7) << name;
    EXPECT_EQ(out.T, 2) << name;
    EXPECT_FALSE(out.partition) << name;
    EXPECT_FALSE(out.credit) << name;
  }
}

TEST(TuningTest, UserSetValuesAreKept) {
  const Profile p = zoo_profile("resnet18");
  const Cluster c{.workers = 8, .bandwidth = 100_Mbit, .latency = 50_us};
  const StrategyOptions fixed = tune(find_strategy("bytescheduler"), p, c,
                                     {.partition = 300_KiB, .credit = 5_MiB});
  EXPECT_EQ(fixed.partition, 300_KiB);
  EXPECT_EQ(fixed.credit, 5_MiB);
  const StrategyOptions half = tune(find_strategy("bytescheduler"), p, c, {.partition = 300_KiB});
  EXPECT_EQ(half.partition, 300_KiB);
  ASSERT_TRUE(half.credit);
  const StrategyOptions dcredit = tune(find_strategy("dcredit"), p, c, {.partition = 300_KiB});
  EXPECT_EQ(dcredit.partition, 300_KiB);
  EXPECT_FALSE(dcredit.credit);  // dcredit has no credit
}

TEST(TuningTest, DcreditGetsTheBestPartitionOfTheGrid) {
  std::mt19937 rng(11);
  const StrategyInfo& s = find_strategy("dcredit");
  for (int trial = 0; trial < 6; ++trial) {
    const Profile p = random_profile(rng);
    const Cluster c = random_cluster(rng);
    const StrategyOptions chosen = tune(s, p, c, {});
    ASSERT_TRUE(chosen.partition);
    const Seconds tuned = iteration_time(s, p, c, chosen);
    EXPECT_LE(tuned, iteration_time(s, p, c, {}) * (1 + 1e-9)) << "trial " << trial;
    for (Bytes sp : partition_candidates(p)) {
      EXPECT_LE(tuned, iteration_time(s, p, c, {.partition = sp}) * (1 + 1e-9))
          << "trial " << trial << " S_p " << sp;
    }
    const auto options = nlohmann::json::parse(s.make(p, c, chosen).options_json);
    EXPECT_EQ(options.at("partition_B").get<Bytes>(), *chosen.partition);
    EXPECT_TRUE(options.contains("windows"));
  }
}

TEST(TuningTest, ByteschedulerGetsAnOptimumNoSingleMoveImproves) {
  std::mt19937 rng(12);
  const StrategyInfo& s = find_strategy("bytescheduler");
  for (int trial = 0; trial < 4; ++trial) {
    const Profile p = random_profile(rng);
    const Cluster c = random_cluster(rng);
    const StrategyOptions chosen = tune(s, p, c, {});
    ASSERT_TRUE(chosen.partition);
    ASSERT_TRUE(chosen.credit);
    const Seconds tuned = iteration_time(s, p, c, chosen);
    EXPECT_LE(tuned, iteration_time(s, p, c, {}) * (1 + 1e-9)) << "trial " << trial;
    for (Bytes sp : partition_candidates(p)) {
      EXPECT_LE(tuned, iteration_time(s, p, c, {.partition = sp, .credit = chosen.credit}) * (1 + 1e-9))
          << "trial " << trial << " S_p " << sp;
    }
    for (Bytes credit : credit_candidates(p, *chosen.partition)) {
      EXPECT_LE(tuned, iteration_time(s, p, c, {.partition = chosen.partition, .credit = credit}) * (1 + 1e-9))
          << "trial " << trial << " C " << credit;
    }
    const auto options = nlohmann::json::parse(s.make(p, c, chosen).options_json);
    EXPECT_EQ(options.at("partition_B").get<Bytes>(), *chosen.partition);
    EXPECT_EQ(options.at("credit_B").get<Bytes>(), *chosen.credit);
  }
}

// docs/strategies.md §2's claim for D-Credit, in the model: with S_p tuned it is never slower
// than WFBP on any zoo model, from slow to fast links, at 8 and 32 workers.
TEST(TuningTest, TunedDcreditIsNeverSlowerThanWfbpOnTheZoo) {
  const StrategyInfo& dcredit = find_strategy("dcredit");
  const StrategyInfo& wfbp = find_strategy("wfbp");
  for (const std::string& model : zoo_models()) {
    const Profile p = zoo_profile(model);
    for (BytesPerSecond bandwidth : {100_Mbit, 1_Gbit, 10_Gbit}) {
      for (int workers : {8, 32}) {
        const Cluster c{.workers = workers, .bandwidth = bandwidth, .latency = 50_us};
        const Seconds tuned = iteration_time(dcredit, p, c, tune(dcredit, p, c, {}));
        EXPECT_LE(tuned, iteration_time(wfbp, p, c, {}) * (1 + 1e-9))
            << model << " at " << format_bandwidth(bandwidth) << ", " << workers << " workers";
      }
    }
  }
}

// Tuning's cost is its simulations: the alternating search meets the same
// (S_p, C) in every round, and each is simulated once.
std::vector<std::pair<Bytes, Bytes>> simulated_options;
Schedule recorded_bytescheduler(const Profile& p, const Cluster& c, const StrategyOptions& o) {
  simulated_options.emplace_back(o.partition.value_or(0), o.credit.value_or(0));
  return find_strategy("bytescheduler").make(p, c, o);
}

TEST(TuningTest, EachCandidateIsSimulatedOnce) {
  StrategyInfo recorded = find_strategy("bytescheduler");
  recorded.scheduler = recorded_bytescheduler;
  for (const char* model : {"resnet50", "vgg16"}) {
    simulated_options.clear();
    const Profile p = zoo_profile(model);
    const Cluster c{.workers = 8, .bandwidth = 1e9 / 8, .latency = 50e-6};
    const StrategyOptions tuned = tune(recorded, p, c, {});
    std::vector<std::pair<Bytes, Bytes>> distinct = simulated_options;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    EXPECT_EQ(distinct.size(), simulated_options.size()) << model;
    // Still the best of what it simulated, as before.
    EXPECT_EQ(tuned.partition, tune(find_strategy("bytescheduler"), p, c, {}).partition) << model;
  }
}

// A model of 1,500 layers (more than kMostBlocks): each layer at least one block, so only the default
// S_p is a candidate, and tuning costs one simulation per credit.
TEST(TuningTest, AVeryDeepModelTunesInFewSimulations) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::int64_t> params(1'000, 3'000'000);
  Profile p{.model = "deep"};
  for (int l = 0; l < 1'500; ++l) {
    p.layers.push_back({.name = "l" + std::to_string(l), .params = params(rng), .fp = 1e-4, .bp = 2e-4});
  }
  const Cluster c{.workers = 8, .bandwidth = 10e9 / 8, .latency = 50e-6};
  StrategyInfo recorded = find_strategy("bytescheduler");
  recorded.scheduler = recorded_bytescheduler;
  simulated_options.clear();
  tune(recorded, p, c, {});
  EXPECT_EQ(partition_candidates(p), std::vector<Bytes>{kDefaultPartition});
  EXPECT_LE(simulated_options.size(), 1 + credit_candidates(p, kDefaultPartition).size());
}

}  // namespace
}  // namespace weft
