#include "plan/planner.h"

#include <algorithm>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "profile/zoo.h"

namespace weft {
namespace {

using namespace literals;

const Cluster kCluster{.workers = 16, .bandwidth = 1_Gbit, .latency = 50_us};

TEST(Planner, EvaluatesEveryStrategyOfTheArchitectureAndRecommendsTheFastest) {
  const Plan p = plan(zoo_profile("resnet50"), kCluster);
  std::vector<std::string> expected;
  for (const StrategyInfo& info : strategies()) {
    if (info.arch == Arch::kAllReduce) expected.emplace_back(info.name);
  }
  std::vector<std::string> got;
  for (const auto& s : p.strategies) got.push_back(s.name);
  EXPECT_EQ(got, expected);
  const auto best = std::min_element(p.strategies.begin(), p.strategies.end(), [](auto& a, auto& b) {
    return a.timeline.summary.iteration < b.timeline.summary.iteration;
  });
  EXPECT_EQ(p.recommended, best->name);
  for (const auto& s : p.strategies) {
    EXPECT_NEAR(s.speedup_vs_wfbp * s.timeline.summary.iteration, p.wfbp_iteration, 1e-12);
  }
}

TEST(Planner, JsonHasExactlyTheFieldsOfTheSpec) {
  const auto j =
      nlohmann::json::parse(plan_json(plan(zoo_profile("gpt2"), kCluster, {.strategies = {"wfbp", "ssgd"}})));
  for (const char* key : {"model", "workers", "bandwidth_Bps", "latency_s", "arch", "strategies", "recommended"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["model"], "gpt2");
  EXPECT_EQ(j["arch"], "allreduce");
  ASSERT_EQ(j["strategies"].size(), 2u);
  const auto& row = j["strategies"][0];
  for (const char* key : {"name", "period", "iteration_s", "compute_s", "slowed_compute_s", "exposed_comm_s",
                          "speedup_vs_wfbp", "options"}) {
    EXPECT_TRUE(row.contains(key)) << key;
  }
  EXPECT_EQ(row["name"], "wfbp");
  EXPECT_DOUBLE_EQ(row["speedup_vs_wfbp"].get<double>(), 1.0);
  EXPECT_NEAR(row["exposed_comm_s"].get<double>(),
              row["iteration_s"].get<double>() - row["compute_s"].get<double>(), 1e-12);
}

TEST(Planner, RejectsUnknownStrategiesNamingTheAcceptedOnes) {
  try {
    plan(zoo_profile("resnet18"), kCluster, {.strategies = {"magic"}});
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("wfbp"), std::string::npos) << e.what();
  }
}

TEST(Planner, RejectsAStrategyOfAnotherArchitecture) {
  Cluster ps = kCluster;
  ps.arch = Arch::kParameterServer;
  EXPECT_THROW(plan(zoo_profile("resnet18"), ps, {.strategies = {"wfbp"}}), UsageError);
}

TEST(Planner, RejectsABadCluster) {
  Cluster bad = kCluster;
  bad.workers = 0;
  EXPECT_THROW(plan(zoo_profile("resnet18"), bad), UsageError);
}

}  // namespace
}  // namespace weft
