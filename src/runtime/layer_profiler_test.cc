#include "runtime/layer_profiler.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace weft::runtime

namespace weft::runtime {
namespace {

// Note [Measuring collectives at once]: both rounds wait once for the last rank
// (the back-to-back skew); what the second collective adds is measured against
// one collective's own time.
TEST(PairSlowdown, IsTheSecondCollectivesExtraTimeOverOnesOwn) {
  // 1.5 ms waiting for the last rank, 5 ms of start-up each.
  EXPECT_DOUBLE_EQ(pair_slowdown(6.5e-3, 11.5e-3, 1.5e-3), 1.0);  // paid one after the other
  EXPECT_DOUBLE_EQ(pair_slowdown(6.5e-3, 6.5e-3, 1.5e-3), 0.0);   // overlapping
  EXPECT_NEAR(pair_slowdown(6.5e-3, 9.0e-3, 1.5e-3), 0.5, 1e-12);
  // The plain ratio (9.75 / 6.5 = 1.5) would sit on the midpoint of 1x and 2x.
  EXPECT_NEAR(pair_slowdown(6.5e-3, 9.75e-3, 1.5e-3), 0.65, 1e-12);
  EXPECT_DOUBLE_EQ(pair_slowdown(6.5e-3, 6.0e-3, 1.5e-3), 0.0);  // a faster pair is noise
  EXPECT_DOUBLE_EQ(pair_slowdown(1e-3, 2e-3, 3e-3), 1.0);        // skew above single: over single
  EXPECT_DOUBLE_EQ(pair_slowdown(6.5e-3, 9e-3, 6.4e-3), 1.0);    // a skew of nearly all the round: at most 1
  EXPECT_DOUBLE_EQ(pair_slowdown(0, 2e-3, 0), 0.0);
}

// Note [Measuring skew]: the simulator stretches a collective launched while its
// workers compute by 1 + comm_slowdown and starts it start_delay later; the
// delay is what the stretch leaves of the measured difference.
TEST(StartDelay, IsWhatTheStretchLeavesOfTheTimeComputing) {
  EXPECT_NEAR(start_delay(14.4e-3, 8.0e-3, 0.2), 4.8e-3, 1e-12);  // 14.4 = 4.8 + 8.0 · 1.2
  EXPECT_NEAR(start_delay(14.4e-3, 8.0e-3, 0), 6.4e-3, 1e-12);    // no stretch: all of it
  EXPECT_DOUBLE_EQ(start_delay(3e-3, 2e-3, 0.9), 0.0);            // the stretch more than covers it
  EXPECT_DOUBLE_EQ(start_delay(0, 0, 0), 0.0);
}

}  // namespace
}  // namespace weft::runtime
