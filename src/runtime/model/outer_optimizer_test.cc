// The outer optimizer's steps by hand (runtime/model/outer_optimizer.h).
#include "runtime/model/outer_optimizer.h"

#include <gtest/gtest.h>

#include "units/units.h"

namespace weft::runtime {
namespace {

std::vector<std::vector<torch::Tensor>> one_layer(std::vector<float> values) {
  return {{torch::tensor(values)}};
}

void expect_near(const torch::Tensor& t, std::vector<float> expected) {
  ASSERT_EQ(t.numel(), static_cast<std::int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(t[static_cast<long>(i)].item<float>(), expected[i], 1e-6);
}

// x0 = [1, 2], lr 0.5, momentum 0.9.
// Step 1, mean [0.5, 3]: g = [0.5, -1], buf = g, x = x0 - 0.5 (g + 0.9 buf) = [0.525, 2.95].
// Step 2, mean [0.325, 3.05]: g = [0.2, -0.1], buf = 0.9 [0.5, -1] + g = [0.65, -1],
//   x = [0.525, 2.95] - 0.5 ([0.2, -0.1] + 0.9 [0.65, -1]) = [0.1325, 3.45].
TEST(OuterOptimizer, TwoNesterovStepsByHand) {
  OuterOptimizer outer(one_layer({1, 2}), {.lr = 0.5, .momentum = 0.9});
  const Chunk whole{.layer = 0, .offset = 0, .length = 8};
  torch::Tensor mean = torch::tensor({0.5f, 3.0f});
  outer.step(whole, mean);
  expect_near(mean, {0.525f, 2.95f});
  expect_near(outer.agreed().flat(0), {0.525f, 2.95f});
  mean = torch::tensor({0.325f, 3.05f});
  outer.step(whole, mean);
  expect_near(mean, {0.1325f, 3.45f});
  expect_near(outer.momentum(0), {0.65f, -1.0f});
}

// Chunks step alone: stepping [0, 4) then [4, 8) is stepping the whole layer.
TEST(OuterOptimizer, ChunksOfALayerStepAlone) {
  OuterOptimizer whole(one_layer({1, 2}), {.lr = 0.5, .momentum = 0.9});
  OuterOptimizer split(one_layer({1, 2}), {.lr = 0.5, .momentum = 0.9});
  torch::Tensor mean = torch::tensor({0.5f, 3.0f});
  whole.step({.layer = 0, .offset = 0, .length = 8}, mean);
  torch::Tensor first = torch::tensor({0.5f}), second = torch::tensor({3.0f});
  split.step({.layer = 0, .offset = 0, .length = 4}, first);
  split.step({.layer = 0, .offset = 4, .length = 4}, second);
  EXPECT_TRUE(torch::equal(split.agreed().flat(0), whole.agreed().flat(0)));
  EXPECT_EQ(first.item<float>(), mean[0].item<float>());
  EXPECT_EQ(second.item<float>(), mean[1].item<float>());
  torch::Tensor wrong = torch::tensor({1.0f, 2.0f});
  EXPECT_THROW(split.step({.layer = 0, .offset = 4, .length = 4}, wrong), std::logic_error);
  EXPECT_THROW(split.step({.layer = 0, .offset = 4, .length = 8}, wrong), std::logic_error);
}

// lr 1, momentum 0: the new parameters are the mean.
TEST(OuterOptimizer, LrOneMomentumZeroIsTheMean) {
  OuterOptimizer outer(one_layer({1, 2, -3}), {.lr = 1, .momentum = 0});
  torch::Tensor mean = torch::tensor({0.1f, 0.7f, 5.0f});
  const torch::Tensor expected = mean.clone();
  outer.step({.layer = 0, .offset = 0, .length = 12}, mean);
  EXPECT_TRUE(torch::allclose(mean, expected, 0, 1e-6));
}

TEST(OuterOptimizer, BadOptionsNameTheFlag) {
  const auto message = [](OuterOptions o) {
    try {
      validate(o);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message({.kind = "adam"}).find("--outer-optimizer adam"), std::string::npos);
  EXPECT_NE(message({.kind = "nesterov", .lr = 0}).find("--outer-lr"), std::string::npos);
  EXPECT_NE(message({.kind = "nesterov", .lr = 1, .momentum = 1}).find("--outer-momentum"), std::string::npos);
  EXPECT_EQ(message({.kind = "nesterov", .lr = 0.7, .momentum = 0.9}), "");
}

// Note [Outer defaults, measured]
TEST(OuterDefaults, UnsetValuesAreTheMeasuredOnesForTheInnerOptimizer) {
  const OuterStep sgd = outer_step({.kind = "nesterov", .inner = "sgd"});
  EXPECT_EQ(sgd.lr, 0.7);
  EXPECT_EQ(sgd.momentum, 0.9);
  EXPECT_TRUE(outer_defaults_help("sgd"));
  // An inner optimizer with state: gentler, and no gain over the plain average.
  for (const char* inner : {"momentum", "adam", "adamw", "other"}) {
    const OuterStep stateful = outer_step({.kind = "nesterov", .inner = inner});
    EXPECT_LT(stateful.amplification(), 2) << inner;
    EXPECT_FALSE(outer_defaults_help(inner)) << inner;
  }
  // A given value stays; the other one is still the default.
  const OuterStep given = outer_step({.kind = "nesterov", .lr = 0.3, .inner = "sgd"});
  EXPECT_EQ(given.lr, 0.3);
  EXPECT_EQ(given.momentum, 0.9);
  // The defaults are safe: no warning.
  for (const char* inner : {"sgd", "momentum", "adamw"}) {
    EXPECT_EQ(outer_warning({.kind = "nesterov", .inner = inner}), std::nullopt) << inner;
  }
}

TEST(OuterDefaults, MoreAmplificationThanMeasuredSafeIsWarnedAbout) {
  // Measured: diverges over AdamW at H = 5 (a small ViT), learns less at H = 16 (a character LM).
  const auto warning = outer_warning({.kind = "nesterov", .lr = 0.7, .momentum = 0.9, .inner = "adamw"});
  ASSERT_TRUE(warning.has_value());
  EXPECT_NE(warning->find("carries each averaged change 7x"), std::string::npos) << *warning;
  EXPECT_NE(warning->find("--outer-lr 0.7"), std::string::npos) << *warning;
  EXPECT_NE(warning->find("--outer-momentum 0.5"), std::string::npos) << *warning;
  EXPECT_EQ(outer_warning({.kind = "nesterov", .lr = 0.7, .momentum = 0.9, .inner = "sgd"}), std::nullopt);
  EXPECT_EQ(outer_warning({.kind = "none", .lr = 5, .momentum = 0.99, .inner = "adamw"}), std::nullopt);
  EXPECT_NE(outer_warning({.kind = "nesterov", .lr = 2, .momentum = 0.95, .inner = "sgd"}), std::nullopt);
}

}  // namespace
}  // namespace weft::runtime
