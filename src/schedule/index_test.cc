#include "schedule/index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "profile/profile.h"
#include "schedule/random_schedule_testing.h"

namespace weft {
namespace {

Profile layers_of(int n, std::int64_t params = 100) {
  Profile p;
  p.model = "hand-built";
  for (int l = 0; l < n; ++l) p.layers.push_back({.name = "l" + std::to_string(l), .params = params});
  return p;
}

Chunk whole(int layer) { return {.layer = layer, .offset = 0, .length = 400}; }

TEST(ScheduleIndex, AnOperationIsNeededByItsNeededByOrItsFirstLayerWhicheverComesFirst) {
  EXPECT_EQ(needed_layer({.chunks = {whole(3)}, .ready_after = 3, .needed_by = 1}), 1);
  EXPECT_EQ(needed_layer({.chunks = {whole(3), whole(2)}, .ready_after = 2, .needed_by = 3}), 2);
  EXPECT_EQ(needed_layer({.chunks = {whole(3)}, .ready_after = 3, .needed_by = kBarrier}), 0);
}

TEST(ScheduleIndex, AnOperationIsReadyAfterTheBackwardsOfReadyAfterAndOfTheLayersItCarries) {
  Schedule s{.strategy = "hand-built"};
  s.iterations = {{{.chunks = {whole(2), whole(3)}, .ready_after = 1, .needed_by = 3},
                   {.chunks = {whole(0), whole(1)}, .ready_after = 0, .needed_by = kBarrier}}};
  validate(s, layers_of(4), 2);
  const ScheduleIndex index(s, 4);
  const IterationIndex& at = index.at(7);
  EXPECT_EQ(at.waits_on[0], (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(at.waits_on[1], (std::vector<int>{0, 1}));
  EXPECT_EQ(at.waiting_on[1], (std::vector<int>{0, 1}));
  EXPECT_EQ(at.ready_at[1], (std::vector<int>{0}));
  EXPECT_EQ(at.ready_at[0], (std::vector<int>{1}));
  EXPECT_EQ(at.needed, (std::vector<int>{2, 0}));
  EXPECT_EQ(at.blockers, (std::vector<int>{1, 0, 1, 0}));
}

TEST(ScheduleIndex, ALayerOutsideTheModelIsALogicError) {
  Schedule s{.strategy = "hand-built"};
  s.iterations = {{{.chunks = {whole(0)}, .ready_after = 0, .needed_by = 4}}};
  EXPECT_THROW(ScheduleIndex(s, 4), std::logic_error);
}

// The property both executors rely on, over schedules validate() accepts.
TEST(ScheduleIndex, EveryValidScheduleIndexesByTheRule) {
  std::mt19937 rng(43);
  for (int trial = 0; trial < 300; ++trial) {
    const Profile profile = test_support::random_model(rng);
    const int workers = std::uniform_int_distribution(1, 4)(rng);
    const Schedule s = test_support::random_valid_schedule(profile, workers, rng);
    ASSERT_NO_THROW(validate(s, profile, workers)) << "trial " << trial;
    const int layers = profile.size();
    const ScheduleIndex index(s, layers);
    for (int t = 0; t < s.period; ++t) {
      const IterationIndex& at = index.at(t);
      const auto& ops = s.iterations[static_cast<size_t>(t)];
      int blockers = 0;
      for (int l = 0; l < layers; ++l) blockers += at.blockers[static_cast<size_t>(l)];
      EXPECT_EQ(blockers, static_cast<int>(ops.size()));
      for (size_t i = 0; i < ops.size(); ++i) {
        const CommOp& op = ops[i];
        const int needed = at.needed[i];
        EXPECT_LE(needed, op.needed_by == kBarrier ? 0 : op.needed_by);
        for (const Chunk& c : op.chunks) EXPECT_LE(needed, c.layer) << "trial " << trial;
        // Ready at the end of ready_after's backward, which ends after every other
        // layer the op waits for (backward runs L-1..0).
        EXPECT_EQ(at.waits_on[i].front(), op.ready_after);
        const auto& at_layer = at.ready_at[static_cast<size_t>(op.ready_after)];
        EXPECT_NE(std::ranges::find(at_layer, static_cast<int>(i)), at_layer.end());
        for (int l : at.waits_on[i]) {
          const auto& waiting = at.waiting_on[static_cast<size_t>(l)];
          EXPECT_NE(std::ranges::find(waiting, static_cast<int>(i)), waiting.end());
        }
      }
    }
  }
}

}  // namespace
}  // namespace weft
