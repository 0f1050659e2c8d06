// The ranks' common time origin (Note [A common time origin], process_group.h),
// with ranks as threads over an in-memory store.
#include "runtime/comm/process_group.h"

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <gtest/gtest.h>

#include <thread>

namespace weft::runtime {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Each rank r gives `machines[r]` and a barrier exit r·5 ms after `start`; returns
// the origin each rank got.
std::vector<Clock::time_point> origins(const std::vector<std::string>& machines, Clock::time_point start) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  const int world = static_cast<int>(machines.size());
  std::vector<Clock::time_point> got(machines.size());
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back([&, r] {
      got[static_cast<size_t>(r)] =
          common_origin(*store, r, world, machines[static_cast<size_t>(r)], start + milliseconds(5 * r));
    });
  }
  for (std::thread& t : ranks) t.join();
  return got;
}

TEST(CommonOrigin, RanksOfOneMachineCountFromTheLastToLeaveTheBarrier) {
  const Clock::time_point start = Clock::now();
  for (const Clock::time_point origin : origins({"boot-a", "boot-a", "boot-a"}, start)) {
    EXPECT_EQ(origin, start + milliseconds(10));
  }
}

TEST(CommonOrigin, RanksOnSeveralMachinesKeepTheirOwnExit) {
  const Clock::time_point start = Clock::now();
  const std::vector<Clock::time_point> got = origins({"boot-a", "boot-a", "boot-b"}, start);
  for (size_t r = 0; r < got.size(); ++r) EXPECT_EQ(got[r], start + milliseconds(5 * static_cast<int>(r)));
}

TEST(CommonOrigin, AnUnknownMachineSharesNothing) {
  const Clock::time_point start = Clock::now();
  const std::vector<Clock::time_point> got = origins({"", ""}, start);
  EXPECT_EQ(got[0], start);
  EXPECT_EQ(got[1], start + milliseconds(5));
}

}  // namespace
}  // namespace weft::runtime
