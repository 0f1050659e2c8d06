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

}  // namespace
}  // namespace weft
