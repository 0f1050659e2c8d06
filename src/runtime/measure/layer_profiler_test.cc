#include "runtime/measure/layer_profiler.h"

#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <atomic>
#include <optional>
#include <thread>
#include <vector>

#include "units/units.h"

namespace weft::runtime {
namespace {

TEST(LayerProfiler, MeasuresEveryLayerOfEveryModel) {
  for (const std::string& name : model_names()) {
    int calls = 0;
    const Profile profile = profile_model(
        {.model = name, .batch = 4, .warmup = 1, .iterations = 3, .progress = [&](int done, int total) {
           EXPECT_EQ(done, ++calls);
           EXPECT_EQ(total, 4);
         }});
    EXPECT_EQ(calls, 4);
    const auto model = make_model(name);
    const Profile skeleton = model->layer_profile(name, 4);
    ASSERT_EQ(profile.size(), skeleton.size()) << name;
    EXPECT_EQ(profile.model, name);
    EXPECT_EQ(profile.batch, 4);
    for (int l = 0; l < profile.size(); ++l) {
      EXPECT_EQ(profile.layers[l].name, skeleton.layers[l].name);
      EXPECT_EQ(profile.layers[l].params, skeleton.layers[l].params);
      EXPECT_GT(profile.layers[l].fp, 0) << name << " layer " << l;
      EXPECT_GT(profile.layers[l].bp, 0) << name << " layer " << l;
    }
    EXPECT_NO_THROW(validate(profile));
  }
}

TEST(LayerProfiler, LayerByLayerBackwardGivesTheWholeModelsGradients) {
  // The profiler's split backward must compute what one backward computes, or it
  // would time something else.
  const auto split = make_model("cnn", 3);
  const auto whole = make_model("cnn", 3);
  const Batch batch = make_data({.model = "cnn", .synthetic = true, .batch = 4, .seed = 3})->next();
  profile_model(*split, batch, {.model = "cnn", .warmup = 0, .iterations = 1});
  torch::Tensor x = batch.input;
  for (int l = 0; l < whole->num_layers(); ++l) x = whole->forward_layer(l, x);
  whole->loss(x, batch.target).backward();
  const auto a = split->parameters(), b = whole->parameters();
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::allclose(a[i].grad(), b[i].grad(), 1e-5, 1e-6)) << i;
  }
}

TEST(LayerProfiler, BadOptionsNameTheFlag) {
  for (const LayerProfilerOptions& bad : {LayerProfilerOptions{.batch = 0}, LayerProfilerOptions{.iterations = 0},
                                          LayerProfilerOptions{.warmup = -1}, LayerProfilerOptions{.threads = 0}}) {
    EXPECT_THROW(profile_model(bad), UsageError);
  }
  EXPECT_THROW(profile_model({.model = "resnet"}), UsageError);
}

// Note [Profiled as trained]: nobody times before all have arrived, each keeps
// computing until all are done, and a rank that left holds nobody up.
TEST(ProfilingTogether, TimesOnlyBesideEveryRankAndWaitsForNoneThatLeft) {
  const auto store = c10::make_intrusive<c10d::HashStore>();
  store->setTimeout(std::chrono::seconds(30));
  constexpr int kRanks = 3;
  std::atomic<int> arrived = 0, done = 0;
  std::vector<int> extra(kRanks, 0);  // untimed iterations after each rank's own
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&, r] {
      ProfilingTogether together(Group{.store = store, .rank = r, .world = kRanks}, kRanks,
                                 "test/profiled");
      if (r == 2) {  // fails before timing: leaves at once
        together.leave();
        return;
      }
      ++arrived;
      together.arrive();
      EXPECT_EQ(arrived.load(), 2);  // both computing ranks arrived before either timed
      if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));  // rank 1 times longer
      ++done;
      while (together.keep_computing()) ++extra[r];
      EXPECT_EQ(done.load(), 2);
    });
  }
  for (std::thread& t : ranks) t.join();
  EXPECT_GT(extra[0], 0);  // rank 0 kept computing while rank 1 timed
}

// Note [Profiled as trained]: rank 0 plans from the median of every profile
// published, the others get none, and a rank that left is left out.
TEST(ProfilingTogether, RankZeroGetsTheMedianOfEveryProfileButTheLeavers) {
  const auto store = c10::make_intrusive<c10d::HashStore>();
  store->setTimeout(std::chrono::seconds(30));
  constexpr int kRanks = 4;
  const std::vector<Seconds> fp = {1e-3, 3e-3, 0, 8e-3};  // rank 2 leaves
  std::vector<std::optional<Profile>> got(kRanks);
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&, r] {
      ProfilingTogether together(Group{.store = store, .rank = r, .world = kRanks}, kRanks, "test/median");
      if (r == 2) {
        together.leave();
        return;
      }
      Profile mine = make_model("cnn")->layer_profile("cnn", 4);
      for (Layer& layer : mine.layers) layer.fp = layer.bp = fp[r];
      got[r] = together.median(mine);
      together.leave();  // as the front ends do, after success too: no second profile
    });
  }
  for (std::thread& t : ranks) t.join();
  ASSERT_TRUE(got[0].has_value());
  for (const Layer& layer : got[0]->layers) {
    EXPECT_DOUBLE_EQ(layer.fp, 3e-3);
    EXPECT_DOUBLE_EQ(layer.bp, 3e-3);
  }
  EXPECT_FALSE(got[1].has_value());
  EXPECT_FALSE(got[3].has_value());
}

}  // namespace
}  // namespace weft::runtime
