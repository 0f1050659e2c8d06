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
  OuterOptimizer outer(one_layer({1, 2}), {.kind = "nesterov", .lr = 0.5, .momentum = 0.9});
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
  OuterOptimizer whole(one_layer({1, 2}), {.kind = "nesterov", .lr = 0.5, .momentum = 0.9});
  OuterOptimizer split(one_layer({1, 2}), {.kind = "nesterov", .lr = 0.5, .momentum = 0.9});
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
  OuterOptimizer outer(one_layer({1, 2, -3}), {.kind = "nesterov", .lr = 1, .momentum = 0});
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

}  // namespace
}  // namespace weft::runtime
