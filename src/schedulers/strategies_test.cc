// Tests of the strategy registry (schedulers/strategies.cc). They run over every
// row, so a strategy added later is checked without new code here.

#include "schedulers/strategies.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace weft {
namespace {

using namespace literals;

// docs/strategies.md §2, in the order of its tables.
const std::vector<std::string_view> kSpecOrder = {
    "ssgd", "wfbp", "ddp", "mgwfbp", "bytescheduler", "dcredit", "flsgd", "plsgd",
    "dreamddp", "dreamddp-opt", "ps", "ps-interleaved"};

TEST(StrategiesTest, NamesAreUniqueAndInSpecOrder) {
  std::vector<std::string_view> names;
  for (const StrategyInfo& info : strategies()) names.push_back(info.name);
  EXPECT_EQ(std::set<std::string_view>(names.begin(), names.end()).size(), names.size());
  // Every name is one of docs/strategies.md's, and they appear in its order.
  auto spec = kSpecOrder.begin();
  for (std::string_view name : names) {
    spec = std::find(spec, kSpecOrder.end(), name);
    ASSERT_NE(spec, kSpecOrder.end()) << name << " is not in docs/strategies.md §2 or is out of order";
  }
  for (std::string_view name : {"ssgd", "wfbp", "ddp", "mgwfbp"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
}

TEST(StrategiesTest, FindStrategyReturnsItsRow) {
  for (const StrategyInfo& info : strategies()) {
    EXPECT_EQ(&find_strategy(info.name), &info);
    EXPECT_FALSE(info.summary.empty()) << info.name;
    EXPECT_NE(info.scheduler, nullptr) << info.name;
  }
}

TEST(StrategiesTest, UnknownNameListsTheAcceptedOnes) {
  try {
    find_strategy("wfpb");
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("--strategy wfpb: not a weft strategy"), std::string::npos) << message;
    for (const StrategyInfo& info : strategies()) {
      EXPECT_NE(message.find(info.name), std::string::npos) << message;
    }
  }
}

TEST(StrategiesTest, EveryStrategyMakesAValidScheduleForItsArchitecture) {
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<std::int64_t> params(0, 3'000'000);
  std::uniform_real_distribution<double> seconds(0.1e-3, 5e-3);
  for (int trial = 0; trial < 20; ++trial) {
    Profile profile;
    profile.model = "random";
    for (int l = 0; l < 1 + trial * 3; ++l) {
      profile.layers.push_back({.name = "l" + std::to_string(l), .params = params(rng),
                                .fp = seconds(rng), .bp = seconds(rng)});
    }
    for (const StrategyInfo& info : strategies()) {
      SCOPED_TRACE(std::string(info.name) + " trial " + std::to_string(trial));
      const Cluster cluster{.workers = 4, .bandwidth = 1_Gbit, .latency = 50_us,
                            .arch = info.arch, .servers = 2, .fitted = {}};
      const Schedule schedule = info.make(profile, cluster, {});
      EXPECT_EQ(schedule.strategy, info.name);
      EXPECT_NO_THROW(validate(schedule, profile, cluster.workers));
      EXPECT_TRUE(nlohmann::json::parse(schedule.options_json).is_object());
      // What --schedule-out writes, --schedule reads back as it was.
      EXPECT_EQ(to_json(parse_schedule(to_json(schedule), "round trip")), to_json(schedule));
      if (info.family == Family::kSynchronous) {
        EXPECT_EQ(schedule.period, 1);
      }
    }
  }
}

// Note [Sites in a schedule]: --hierarchical and --site-every, applied by make()
// after any scheduler.
Profile four_layers() {
  Profile profile;
  profile.model = "four";
  for (int l = 0; l < 4; ++l) {
    profile.layers.push_back({.name = "l" + std::to_string(l), .params = 100'000 * (l + 1), .fp = 1e-3, .bp = 2e-3});
  }
  return profile;
}

Cluster two_sites_of_two(Arch arch = Arch::kAllReduce) {
  Cluster cluster{.workers = 4, .bandwidth = 1_Gbit, .latency = 50_us, .arch = arch, .servers = 1, .fitted = {}};
  if (arch != Arch::kAllReduce) return cluster;
  cluster.topology.sites = sites_shorthand("2x2", 4, 1_Gbit, 50_us);
  cluster.topology.wan = {.bandwidth = 20_Mbit, .latency = 20_ms};
  return cluster;
}

std::string error_of(const StrategyInfo& info, const Cluster& cluster, const StrategyOptions& options) {
  try {
    info.make(four_layers(), cluster, options);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "no error";
}

TEST(StrategiesTest, HierarchicalAveragesEveryCollectiveBySites) {
  const Profile profile = four_layers();
  const Cluster cluster = two_sites_of_two();
  for (const StrategyInfo& info : strategies()) {
    if (info.arch != Arch::kAllReduce) continue;
    SCOPED_TRACE(info.name);
    for (const Encoding& encoding : {Encoding{}, parse_encoding("int8", "test")}) {
      const Schedule schedule = info.make(profile, cluster, {.compression = encoding, .hierarchical = true});
      EXPECT_NO_THROW(validate(schedule, profile, cluster.workers));
      int ops = 0;
      for (const auto& iteration : schedule.iterations) {
        for (const CommOp& op : iteration) {
          EXPECT_EQ(op.reach, Reach::kBySites);
          EXPECT_EQ(op.encoding, encoding);
          ++ops;
        }
      }
      EXPECT_GT(ops, 0);
      EXPECT_EQ(nlohmann::json::parse(schedule.options_json).value("hierarchical", false), true);
      // The reach travels with the schedule (docs/formats.md, "reach").
      const Schedule back = parse_schedule(to_json(schedule), "round trip");
      EXPECT_EQ(to_json(back), to_json(schedule));
      for (std::size_t h = 0; h < back.iterations.size(); ++h) {
        for (const CommOp& op : back.iterations[h]) EXPECT_EQ(op.reach, Reach::kBySites);
      }
    }
    // Without --hierarchical, the schedule of before: every average over one ring.
    for (const auto& iteration : info.make(profile, cluster, {}).iterations) {
      for (const CommOp& op : iteration) EXPECT_EQ(op.reach, Reach::kAll);
    }
  }
}

TEST(StrategiesTest, SiteAveragesComeInEverySiteEveryIterationAfterTheOthers) {
  const Profile profile = four_layers();
  const Cluster cluster = two_sites_of_two();
  // plsgd with H = 4 averages one layer across sites per iteration: 3, 2, 1, 0.
  const StrategyInfo& plsgd = find_strategy("plsgd");
  const Encoding int8 = parse_encoding("int8", "test");
  const Schedule schedule =
      plsgd.make(profile, cluster, {.H = 4, .compression = int8, .hierarchical = true, .site_every = 2});
  EXPECT_NO_THROW(validate(schedule, profile, cluster.workers));
  ASSERT_EQ(schedule.period, 4);
  for (int h = 0; h < 4; ++h) {
    SCOPED_TRACE(h);
    const std::vector<CommOp>& ops = schedule.iterations[static_cast<std::size_t>(h)];
    std::vector<int> across, site;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const CommOp& op = ops[i];
      if (op.reach == Reach::kSite) {
        EXPECT_EQ(i, ops.size() - 1) << "a site average comes after the iteration's others";
        EXPECT_EQ(op.encoding, Encoding{}) << "site averages are exact";
        EXPECT_EQ(op.kind, OpKind::kAverageParameters);
        EXPECT_EQ(op.needed_by, kBarrier);
        for (const Chunk& c : op.chunks) {
          EXPECT_EQ(c.offset, 0);
          EXPECT_EQ(c.length, profile.layers[static_cast<std::size_t>(c.layer)].bytes());
          site.push_back(c.layer);
        }
      } else {
        EXPECT_EQ(op.reach, Reach::kBySites);
        EXPECT_EQ(op.encoding, int8);
        for (const Chunk& c : op.chunks) across.push_back(c.layer);
      }
    }
    EXPECT_EQ(across, std::vector<int>{3 - h});
    // Iterations 1 and 3 (every 2nd) average the other layers inside each site.
    std::vector<int> expected;
    if (h % 2 == 1) {
      for (int l = 3; l >= 0; --l) {
        if (l != 3 - h) expected.push_back(l);
      }
    }
    EXPECT_EQ(site, expected);
  }
  EXPECT_EQ(nlohmann::json::parse(schedule.options_json).value("site_every", 0), 2);
  EXPECT_EQ(to_json(parse_schedule(to_json(schedule), "round trip")), to_json(schedule));

  // flsgd averages everything in its last iteration: no site average there.
  const Schedule fl = find_strategy("flsgd").make(profile, cluster, {.H = 3, .site_every = 1});
  ASSERT_EQ(fl.iterations.size(), 3u);
  for (int h = 0; h < 2; ++h) {
    ASSERT_EQ(fl.iterations[static_cast<std::size_t>(h)].size(), 1u);
    EXPECT_EQ(fl.iterations[static_cast<std::size_t>(h)][0].reach, Reach::kSite);
    EXPECT_EQ(fl.iterations[static_cast<std::size_t>(h)][0].chunks.size(), 4u);
  }
  ASSERT_EQ(fl.iterations[2].size(), 1u);
  EXPECT_EQ(fl.iterations[2][0].reach, Reach::kAll);
}

TEST(StrategiesTest, SiteOptionsAreRefusedWhereTheyCannotApply) {
  const StrategyInfo& flsgd = find_strategy("flsgd");
  const Cluster flat{.workers = 4, .bandwidth = 1_Gbit, .latency = 50_us, .arch = Arch::kAllReduce, .servers = 1,
                     .fitted = {}};
  EXPECT_NE(error_of(find_strategy("wfbp"), flat, {.hierarchical = true}).find("--hierarchical: the cluster has no "
                                                                              "sites"),
            std::string::npos);
  EXPECT_NE(error_of(flsgd, flat, {.site_every = 1}).find("--site-every: the cluster has no sites"),
            std::string::npos);
  EXPECT_NE(error_of(find_strategy("wfbp"), two_sites_of_two(), {.site_every = 1}).find("--site-every 1: wfbp"),
            std::string::npos);
  EXPECT_NE(error_of(flsgd, two_sites_of_two(), {.H = 5, .site_every = 2}).find("--site-every 2: must divide --H 5"),
            std::string::npos);
  EXPECT_NE(error_of(find_strategy("ps"), two_sites_of_two(Arch::kParameterServer), {.hierarchical = true})
                .find("--hierarchical"),
            std::string::npos);
  // A parameter-server strategy is refused by name even on a cluster with sites.
  EXPECT_NE(error_of(find_strategy("ps"), two_sites_of_two(), {.hierarchical = true})
                .find("--hierarchical: ps is a parameter-server strategy"),
            std::string::npos);
}

}  // namespace
}  // namespace weft
