#include "runtime/model/evaluation.h"

#include <stdexcept>

#include <fmt/format.h>

namespace weft::runtime {

EvalResult evaluate(LayeredModel& model, DataSource& data, int batch) {
  torch::NoGradGuard no_grad;
  model.eval();
  double loss = 0;
  std::int64_t correct = 0, total = 0, samples = 0;
  for (const Batch& b : data.eval_batches(batch)) {
    torch::Tensor x = b.input;
    for (int l = 0; l < model.num_layers(); ++l) x = model.forward_layer(l, x);
    const auto n = b.input.size(0);
    loss += model.loss(x, b.target).item<double>() * static_cast<double>(n);
    samples += n;
    correct += model.correct(x, b.target);
    total += b.target.numel();
  }
  model.train();
  return {.accuracy = total > 0 ? static_cast<double>(correct) / static_cast<double>(total) : 0,
          .loss = samples > 0 ? loss / static_cast<double>(samples) : 0};
}

torch::Tensor flat_parameters(const std::vector<std::vector<torch::Tensor>>& layers) {
  std::vector<torch::Tensor> all;
  for (const auto& layer : layers) {
    for (const auto& p : layer) all.push_back(p.detach().reshape({-1}));
  }
  return all.empty() ? torch::empty({0}) : torch::cat(all);
}

void load_flat_parameters(LayeredModel& model, const torch::Tensor& flat) {
  torch::NoGradGuard no_grad;
  std::int64_t at = 0;
  for (int l = 0; l < model.num_layers(); ++l) {
    for (torch::Tensor p : model.layer_parameters(l)) {
      if (at + p.numel() > flat.numel()) {
        throw std::logic_error(fmt::format("load_flat_parameters: {} values for a larger model", flat.numel()));
      }
      p.copy_(flat.narrow(0, at, p.numel()).view(p.sizes()));
      at += p.numel();
    }
  }
  if (at != flat.numel()) {
    throw std::logic_error(fmt::format("load_flat_parameters: {} values for a model of {}", flat.numel(), at));
  }
}

}  // namespace weft::runtime
