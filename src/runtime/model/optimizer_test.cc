#include "runtime/model/optimizer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include "units/units.h"

namespace weft::runtime {
namespace {

// A few parameter tensors of random shapes, as two layers.
std::vector<std::vector<torch::Tensor>> random_layers(torch::Generator& gen) {
  std::vector<std::vector<torch::Tensor>> layers(2);
  const int64_t shapes[][2] = {{3, 4}, {4, 1}, {7, 2}};
  for (int i = 0; i < 3; ++i) {
    layers[i == 0 ? 0 : 1].push_back(torch::randn({shapes[i][0], shapes[i][1]}, gen).requires_grad_(true));
  }
  return layers;
}

std::vector<std::vector<torch::Tensor>> clone_layers(const std::vector<std::vector<torch::Tensor>>& layers) {
  std::vector<std::vector<torch::Tensor>> copy;
  for (const auto& layer : layers) {
    copy.emplace_back();
    for (const torch::Tensor& p : layer) copy.back().push_back(p.detach().clone().requires_grad_(true));
  }
  return copy;
}

// Gradients that depend on the parameters (so that optimizer state matters) and on
// the step (so that they change): g = sin(p·(step + 1)) + c·p.
void set_gradients(const std::vector<std::vector<torch::Tensor>>& layers, int step) {
  torch::NoGradGuard no_grad;
  for (const auto& layer : layers) {
    for (const torch::Tensor& p : layer) p.mutable_grad() = torch::sin(p * (step + 1)) + 0.3 * p;
  }
}

std::vector<torch::Tensor> flat(const std::vector<std::vector<torch::Tensor>>& layers) {
  std::vector<torch::Tensor> all;
  for (const auto& layer : layers) all.insert(all.end(), layer.begin(), layer.end());
  return all;
}

void expect_close(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_LE((a[i] - b[i]).abs().max().item<double>(), 1e-6) << "tensor " << i;
  }
}

// Steps `ours` layer by layer (output layer first, as the engine does) and `theirs`
// with torch::optim, five times, from the same start and the same gradient rule.
template <typename TorchOptimizer, typename TorchOptions>
void compare(const OptimizerOptions& options, const TorchOptions& torch_options, std::uint64_t seed) {
  torch::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto ours = random_layers(gen);
  const auto theirs = clone_layers(ours);
  const auto start = clone_layers(ours);
  LayerOptimizer layer_optimizer(ours, options);
  TorchOptimizer reference(flat(theirs), torch_options);
  for (int step = 0; step < 5; ++step) {
    set_gradients(ours, step);
    set_gradients(theirs, step);
    for (int l = layer_optimizer.num_layers() - 1; l >= 0; --l) layer_optimizer.step(l);
    reference.step();
  }
  expect_close(flat(ours), flat(theirs));
  // The optimizer moved them: the comparison is not vacuous.
  EXPECT_GT((flat(ours)[0] - flat(start)[0]).abs().max().item<double>(), 1e-3);
}

TEST(LayerOptimizer, SgdEqualsTorchSgd) {
  for (std::uint64_t seed = 0; seed < 5; ++seed) {
    for (double decay : {0.0, 0.01}) {
      compare<torch::optim::SGD>({.kind = "sgd", .lr = 0.1, .weight_decay = decay},
                                 torch::optim::SGDOptions(0.1).weight_decay(decay), seed);
    }
  }
}

TEST(LayerOptimizer, MomentumEqualsTorchSgdWithMomentum) {
  for (std::uint64_t seed = 0; seed < 5; ++seed) {
    for (double decay : {0.0, 0.01}) {
      compare<torch::optim::SGD>({.kind = "momentum", .lr = 0.05, .momentum = 0.9, .weight_decay = decay},
                                 torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(decay), seed);
    }
  }
}

TEST(LayerOptimizer, AdamEqualsTorchAdam) {
  for (std::uint64_t seed = 0; seed < 5; ++seed) {
    for (double decay : {0.0, 0.01}) {
      compare<torch::optim::Adam>(
          {.kind = "adam", .lr = 0.01, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = decay},
          torch::optim::AdamOptions(0.01).betas({0.8, 0.99}).eps(1e-6).weight_decay(decay), seed);
    }
  }
}

TEST(LayerOptimizer, ParametersWithoutGradientsAreLeftAlone) {
  torch::Generator gen = at::make_generator<at::CPUGeneratorImpl>(1);
  const auto layers = random_layers(gen);
  const auto before = clone_layers(layers);
  LayerOptimizer optimizer(layers, {.kind = "adam"});
  set_gradients({layers[1]}, 0);
  optimizer.step(0);  // layer 0 has no gradient
  optimizer.step(1);
  EXPECT_TRUE(torch::equal(layers[0][0], before[0][0]));
  EXPECT_FALSE(torch::equal(layers[1][0], before[1][0]));
}

TEST(LayerOptimizer, ZeroGradKeepsTheGradientStorage) {
  torch::Generator gen = at::make_generator<at::CPUGeneratorImpl>(2);
  const auto layers = random_layers(gen);
  set_gradients(layers, 0);
  const void* storage = layers[1][0].grad().data_ptr();
  LayerOptimizer optimizer(layers, OptimizerOptions{});
  const auto version = layers[1][0].grad()._version();
  optimizer.zero_grad(1);
  EXPECT_EQ(layers[1][0].grad().data_ptr(), storage);
  EXPECT_EQ(layers[1][0].grad().abs().sum().item<double>(), 0);
  EXPECT_NE(layers[0][0].grad().abs().sum().item<double>(), 0);
  EXPECT_EQ(layers[1][0].grad()._version(), version);  // Note [Zeroing unseen]
}

// An optimizer whose options change between steps (a scheduler of momentum, a
// kind that starts stepping) takes the same steps as one built with each step's
// options, state carried over.
TEST(LayerOptimizer, OptionsSetBetweenStepsAreThoseOfTheNextStep) {
  torch::Generator gen = at::make_generator<at::CPUGeneratorImpl>(3);
  const auto layers = random_layers(gen);
  const auto expected = clone_layers(layers);
  const OptimizerOptions none{.kind = "none"};
  LayerOptimizer changed(layers, std::vector<std::vector<OptimizerOptions>>{{none}, {none, none}});
  LayerOptimizer reference(expected, OptimizerOptions{.kind = "momentum", .lr = 0.1, .momentum = 0.9});
  for (int step = 0; step < 3; ++step) {
    const OptimizerOptions o{.kind = "momentum", .lr = 0.1 / (step + 1), .momentum = 0.9 - 0.1 * step};
    for (int l = 0; l < 2; ++l) {
      for (std::size_t i = 0; i < layers[static_cast<size_t>(l)].size(); ++i) {
        changed.set_options(l, i, o);
        reference.set_options(l, i, o);
      }
    }
    set_gradients(layers, step);
    set_gradients(expected, step);
    for (int l = 0; l < 2; ++l) {
      changed.step(l);
      reference.step(l);
    }
  }
  for (std::size_t k = 0; k < flat(layers).size(); ++k) EXPECT_TRUE(torch::equal(flat(layers)[k], flat(expected)[k]));
  EXPECT_THROW(changed.set_options(0, 0, {.kind = "momentum", .momentum = 1}), UsageError);
  EXPECT_THROW(changed.set_options(2, 0, {}), std::logic_error);
}

TEST(LayerOptimizer, BadOptionsAndLayersAreRejected) {
  EXPECT_THROW(validate({.kind = "rmsprop"}), UsageError);
  EXPECT_THROW(validate({.lr = -1}), UsageError);
  EXPECT_NO_THROW(validate({.lr = 0}));  // torch.optim's too
  EXPECT_THROW(validate({.kind = "momentum", .momentum = 1}), UsageError);
  EXPECT_THROW(validate({.kind = "adam", .beta2 = 1}), UsageError);
  EXPECT_THROW(validate({.kind = "adam", .eps = 0}), UsageError);
  EXPECT_THROW(validate({.weight_decay = -1}), UsageError);
  EXPECT_NO_THROW(validate({}));
  LayerOptimizer optimizer({{}}, OptimizerOptions{});
  EXPECT_THROW(optimizer.step(1), std::logic_error);
  EXPECT_THROW(optimizer.zero_grad(-1), std::logic_error);
}

}  // namespace
}  // namespace weft::runtime
