#include "runtime/layer_profiler.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "units/units.h"

namespace weft::runtime {
namespace {

using Clock = std::chrono::steady_clock;

Seconds since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

Seconds median(std::vector<Seconds> samples) {
  const auto middle = samples.begin() + static_cast<std::ptrdiff_t>(samples.size() / 2);
  std::nth_element(samples.begin(), middle, samples.end());
  if (samples.size() % 2 == 1) return *middle;
  return (*middle + *std::max_element(samples.begin(), middle)) / 2;
}

void check(const LayerProfilerOptions& o) {
  const auto require = [](bool ok, std::string_view flag, int value, std::string_view accepted) {
    if (!ok) throw UsageError(fmt::format("{} {} is not accepted; expected {}", flag, value, accepted));
  };
  require(o.batch >= 1, "--batch", o.batch, "an integer >= 1");
  require(o.warmup >= 0, "--warmup", o.warmup, "an integer >= 0");
  require(o.iterations >= 1, "--iterations", o.iterations, "an integer >= 1");
  require(o.threads >= 1, "--threads", o.threads, "an integer >= 1");
}

struct LayerTimes {
  std::vector<Seconds> forward;
  std::vector<Seconds> backward;
};

// One iteration, layer by layer (the method in layer_profiler.h).
LayerTimes time_iteration(LayeredModel& model, const Batch& batch) {
  const int layers = model.num_layers();
  LayerTimes times{std::vector<Seconds>(layers), std::vector<Seconds>(layers)};
  std::vector<torch::Tensor> inputs(layers);
  std::vector<torch::Tensor> outputs(layers);
  for (int l = 0; l < layers; ++l) {
    inputs[l] = l == 0 ? batch.input : outputs[l - 1].detach().requires_grad_(true);
    const auto start = Clock::now();
    outputs[l] = model.forward_layer(l, inputs[l]);
    if (l == layers - 1) outputs[l] = model.loss(outputs[l], batch.target);
    times.forward[l] = since(start);
  }
  torch::Tensor gradient;  // of the loss with respect to the current layer's output
  for (int l = layers - 1; l >= 0; --l) {
    const auto start = Clock::now();
    if (l == layers - 1) outputs[l].backward();
    else outputs[l].backward(gradient);
    times.backward[l] = since(start);
    if (l > 0) gradient = inputs[l].grad();
  }
  return times;
}

}  // namespace

Profile profile_model(LayeredModel& model, const Batch& batch, const LayerProfilerOptions& options) {
  check(options);
  torch::set_num_threads(options.threads);
  const int layers = model.num_layers();
  std::vector<std::vector<Seconds>> forward(layers), backward(layers);
  const int total = options.warmup + options.iterations;
  for (int i = 0; i < total; ++i) {
    for (const torch::Tensor& p : model.parameters()) {
      if (p.grad().defined()) p.grad().zero_();
    }
    const LayerTimes times = time_iteration(model, batch);
    if (i >= options.warmup) {
      for (int l = 0; l < layers; ++l) {
        forward[l].push_back(times.forward[l]);
        backward[l].push_back(times.backward[l]);
      }
    }
    if (options.progress) options.progress(i + 1, total);
  }
  Profile profile = model.layer_profile(options.model, static_cast<int>(batch.input.size(0)));
  profile.device = fmt::format("cpu, {} thread{}", options.threads, options.threads == 1 ? "" : "s");
  for (int l = 0; l < layers; ++l) {
    profile.layers[l].fp = median(forward[l]);
    profile.layers[l].bp = median(backward[l]);
  }
  return profile;
}

Profile profile_model(const LayerProfilerOptions& options) {
  check(options);
  const std::shared_ptr<LayeredModel> model = make_model(options.model, options.seed);
  const Batch batch =
      make_data({.model = options.model, .synthetic = true, .batch = options.batch, .seed = options.seed})->next();
  return profile_model(*model, batch, options);
}

}  // namespace weft::runtime
