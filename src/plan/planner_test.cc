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

// Note [Costed only with shapes]: the zoo's models give their tensors' shapes, so
// PowerSGD costs less than fp16 there; without shapes its rows are listed, not
// shown with another codec's figures, and asking for nothing else is refused.
TEST(Planner, LowRankCodecsAreCostedOnlyWithShapes) {
  const PlanOptions every{.strategies = {"wfbp"},
                          .compressions = {{}, parse_encoding("fp16", "test"), parse_encoding("powersgd:1", "test")}};
  Profile profile = zoo_profile("resnet50");
  std::int64_t params = 0;
  for (const Layer& layer : profile.layers) {
    std::int64_t elements = 0;
    for (const auto& shape : layer.shapes) {
      std::int64_t n = 1;
      for (std::int64_t d : shape) n *= d;
      elements += n;
    }
    EXPECT_EQ(elements, layer.params) << layer.name;
    params += layer.params;
  }
  EXPECT_GT(params, 0);
  const Plan shaped = plan(profile, kCluster, every);
  ASSERT_EQ(shaped.strategies.size(), 3u);
  EXPECT_TRUE(shaped.uncosted.empty());
  EXPECT_LT(shaped.strategies[2].timeline.summary.iteration, shaped.strategies[1].timeline.summary.iteration);

  for (Layer& layer : profile.layers) layer.shapes.clear();
  const Plan shapeless = plan(profile, kCluster, every);
  ASSERT_EQ(shapeless.strategies.size(), 2u);
  ASSERT_EQ(shapeless.uncosted.size(), 1u);
  EXPECT_EQ(shapeless.uncosted[0].label, "wfbp+powersgd:1");
  EXPECT_NE(shapeless.uncosted[0].why.find("no tensor shapes"), std::string::npos);
  EXPECT_TRUE(nlohmann::json::parse(plan_json(shapeless)).contains("uncosted"));
  const PlanOptions only{.strategies = {"wfbp"}, .compressions = {parse_encoding("powersgd:1", "test")}};
  EXPECT_THROW(plan(profile, kCluster, only), UsageError);
}

// Note [Variants across sites]: with sites, each all-reduce strategy also by
// sites, and local SGD also with site averages; the fastest row wins.
Cluster two_sites_of_two() {
  Cluster c{.workers = 4, .bandwidth = 1_Gbit, .latency = 50_us};
  c.topology.sites = sites_shorthand("2x2", 4, 1_Gbit, 50_us);
  c.topology.wan = {.bandwidth = 20_Mbit, .latency = 20_ms};
  return c;
}

std::vector<std::string> labels_of(const Plan& p) {
  std::vector<std::string> out;
  for (const PlannedStrategy& s : p.strategies) out.push_back(s.label());
  return out;
}

TEST(Planner, WithSitesEachAllReduceStrategyIsAlsoPlannedBySites) {
  const Profile profile = zoo_profile("resnet18");
  const Plan p = plan(profile, two_sites_of_two(), {.strategies = {"wfbp", "flsgd"}, .tune = false});
  EXPECT_EQ(labels_of(p), (std::vector<std::string>{"wfbp", "wfbp/hier", "flsgd", "flsgd/hier", "flsgd/site1",
                                                    "flsgd/hier/site1"}));
  for (const PlannedStrategy& s : p.strategies) {
    for (const auto& ops : s.schedule.iterations) {
      for (const CommOp& op : ops) {
        EXPECT_TRUE(op.reach == (s.hierarchical ? Reach::kBySites : Reach::kAll) ||
                    (s.site_every > 0 && op.reach == Reach::kSite))
            << s.label();
      }
    }
  }
  // Over a 20 Mbit WAN, by sites is faster; the fastest row of all is recommended,
  // and the JSON says which variant it is.
  const PlannedStrategy* best = p.best();
  ASSERT_NE(best, nullptr);
  for (const PlannedStrategy& s : p.strategies) {
    EXPECT_LE(best->timeline.summary.iteration, s.timeline.summary.iteration) << s.label();
  }
  EXPECT_EQ(best->label(), "flsgd/hier");
  const auto j = nlohmann::json::parse(plan_json(p));
  EXPECT_EQ(j["recommended"], "flsgd");
  EXPECT_EQ(j["recommended_hierarchical"], true);
  EXPECT_FALSE(j.contains("recommended_site_every"));
  EXPECT_EQ(j["topology"]["sites"].size(), 2u);
  EXPECT_DOUBLE_EQ(j["topology"]["wan"]["latency_s"].get<double>(), 20_ms);
  EXPECT_EQ(j["strategies"][5]["site_every"], 1);
  // The reference stays flat wfbp over one ring.
  EXPECT_DOUBLE_EQ(p.wfbp_iteration, p.strategies[0].timeline.summary.iteration);
}

TEST(Planner, ASiteVariantTheUserGaveIsPlannedAlone) {
  const Profile profile = zoo_profile("resnet18");
  const Cluster cluster = two_sites_of_two();
  // --hierarchical: only by sites; --site-every: local SGD's only, the others without it.
  const Plan given = plan(profile, cluster, {.strategy = {.H = 4, .hierarchical = true, .site_every = 2}, .tune = false});
  for (const PlannedStrategy& s : given.strategies) {
    EXPECT_TRUE(s.hierarchical) << s.label();
    EXPECT_EQ(s.site_every, find_strategy(s.name).family == Family::kLocalSgd ? 2 : 0) << s.label();
  }
  // Named with --site-every, a strategy that cannot take it is refused by name.
  EXPECT_THROW(plan(profile, cluster, {.strategies = {"wfbp"}, .strategy = {.site_every = 1}}), UsageError);
  // Without variants (weft simulate): the strategy as given, one row.
  const Plan one = plan(profile, cluster, {.strategies = {"flsgd"}, .tune = false, .site_variants = false});
  EXPECT_EQ(labels_of(one), std::vector<std::string>{"flsgd"});
}

TEST(Planner, WithoutSitesThePlanIsAsBefore) {
  const Plan p = plan(zoo_profile("resnet18"), kCluster, {.strategies = {"wfbp", "flsgd"}, .tune = false});
  EXPECT_EQ(labels_of(p), (std::vector<std::string>{"wfbp", "flsgd"}));
  const auto j = nlohmann::json::parse(plan_json(p));
  for (const char* key : {"topology", "recommended_hierarchical", "recommended_site_every"}) {
    EXPECT_FALSE(j.contains(key)) << key;
  }
  EXPECT_FALSE(j["strategies"][0].contains("hierarchical"));
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
