#include "units/cores.h"
#include "testing/testing.h"
#include "units/units.h"

#include <map>
#include <set>
#include <stdexcept>

#include <gtest/gtest.h>

namespace weft {
namespace {

std::vector<int> first_cores(int n) {
  std::vector<int> cores;
  for (int c = 0; c < n; ++c) cores.push_back(2 * c);  // not 0..n-1: cores_of picks from the list
  return cores;
}

TEST(CoresOf, FourProcessesOnTwoCoresTakeTurns) {
  const std::vector<int> cores{0, 1};
  EXPECT_EQ(cores_of(cores, 0, 4), std::vector<int>{0});
  EXPECT_EQ(cores_of(cores, 1, 4), std::vector<int>{1});
  EXPECT_EQ(cores_of(cores, 2, 4), std::vector<int>{0});
  EXPECT_EQ(cores_of(cores, 3, 4), std::vector<int>{1});
}

TEST(CoresOf, FewerProcessesThanCoresGetBlocksTheFirstOnesLarger) {
  const std::vector<int> cores{0, 1, 2, 3, 4};
  EXPECT_EQ(cores_of(cores, 0, 2), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(cores_of(cores, 1, 2), (std::vector<int>{3, 4}));
  EXPECT_EQ(cores_of(cores, 0, 1), cores);
}

// Every process gets a core; a core holds as many processes as any other, give or
// take one; processes that fit have cores of their own, and all of them are used.
TEST(CoresOf, SharesEveryCoreEvenly) {
  for (int c = 1; c <= 9; ++c) {
    const std::vector<int> cores = first_cores(c);
    for (int processes = 1; processes <= 20; ++processes) {
      std::map<int, int> holding;
      for (int p = 0; p < processes; ++p) {
        const std::vector<int> mine = cores_of(cores, p, processes);
        ASSERT_FALSE(mine.empty()) << p << " of " << processes << " on " << c;
        for (int core : mine) {
          ASSERT_TRUE(std::set<int>(cores.begin(), cores.end()).contains(core));
          ++holding[core];
        }
      }
      int least = processes, most = 0;
      for (int core : cores) {
        least = std::min(least, holding[core]);
        most = std::max(most, holding[core]);
      }
      EXPECT_LE(most - least, 1) << processes << " processes on " << c << " cores";
      if (processes <= c) {
        EXPECT_EQ(most, 1) << processes << " processes on " << c << " cores";
      }
      EXPECT_GE(least, 1) << "a core left idle: " << processes << " processes on " << c << " cores";
    }
  }
}

TEST(CoresOf, RefusesWhatIsNotAProcessOfTheJob) {
  EXPECT_THROW(cores_of({}, 0, 1), std::invalid_argument);
  EXPECT_THROW(cores_of({0}, 1, 1), std::invalid_argument);
  EXPECT_THROW(cores_of({0}, -1, 1), std::invalid_argument);
}

TEST(Pinning, AutoPinsOnlyWhereEachProcessHasACoreOfItsOwn) {
  const int cores = static_cast<int>(usable_cores().size());
  EXPECT_TRUE(pinning_for(0, 1, CorePlacement::kShared).empty());
  EXPECT_FALSE(pinning_for(0, cores + 1, CorePlacement::kPinned).empty());
  EXPECT_FALSE(pinning_for(0, cores, CorePlacement::kAuto).empty());
  EXPECT_TRUE(pinning_for(0, cores + 1, CorePlacement::kAuto).empty());
}

TEST(Placement, ReadsWhatItWrites) {
  for (const CorePlacement p : {CorePlacement::kAuto, CorePlacement::kPinned, CorePlacement::kShared}) {
    EXPECT_EQ(parse_core_placement(to_string(p)), p);
  }
  try {
    parse_core_placement("numa", "--cores");
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "--cores numa: expected auto, pinned or shared");
  }
}

TEST(CoreList, ReadsTheKernelsRanges) {
  EXPECT_EQ(test_support::parse_core_list("0-2,5"), (std::vector<int>{0, 1, 2, 5}));
  EXPECT_EQ(test_support::parse_core_list("Name:\tsh\nCpus_allowed_list:\t1\nMems_allowed:\t1\n"), std::vector<int>{1});
}

// The test process itself, pinned to one of its cores and then put back.
TEST(Pinning, PinsTheCallingProcess) {
  const std::vector<int> before = usable_cores();
  ASSERT_FALSE(before.empty());
  ASSERT_TRUE(pin(core_set({before.back()})));
  EXPECT_EQ(usable_cores(), std::vector<int>{before.back()});
  ASSERT_TRUE(pin(core_set(before)));
  EXPECT_EQ(usable_cores(), before);
}

}  // namespace
}  // namespace weft
