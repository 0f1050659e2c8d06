// Per-layer optimizers (SPEC §3): SGD, momentum SGD and Adam, stepped one layer at
// a time so that the communication engine can update layer l as soon as its data is
// averaged (layer-wise update), while other layers are still in flight.
//
// State (momentum buffers, Adam moments and step counts) is per layer and local to
// the worker. Thread-safety: step(l) and step(m) for l != m may run on different
// threads; the same layer must not be stepped concurrently.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <torch/torch.h>

namespace weft::runtime {

struct OptimizerOptions {
  std::string kind = "sgd";  // "sgd" | "momentum" | "adam"
  double lr = 0.05;
  double momentum = 0.9;     // "momentum"
  double beta1 = 0.9;        // "adam"
  double beta2 = 0.999;      // "adam"
  double eps = 1e-8;         // "adam"
  double weight_decay = 0;
};

// THROWS UsageError listing the accepted kinds.
void validate(const OptimizerOptions& options);

class LayerOptimizer {
 public:
  // params[l] are layer l's parameters (LayeredModel::layer_parameters(l)).
  LayerOptimizer(std::vector<std::vector<torch::Tensor>> params, OptimizerOptions options);

  // Applies one step to layer `layer` using each parameter's current .grad()
  // (no-op for parameters without a gradient). REQUIRES: 0 <= layer < num_layers().
  void step(int layer);
  void zero_grad(int layer);
  int num_layers() const { return static_cast<int>(params_.size()); }

  // For checkpoints (docs/checkpoints.md): the state as named tensors — "steps"
  // (int64, one per layer) and "m/<l>/<i>", "v/<l>/<i>" for the moments allocated
  // so far (copies) — and back. load_state REQUIRES: an optimizer of the same kind
  // over layers of the same shapes; THROWS std::logic_error naming the tensor that
  // does not fit.
  std::map<std::string, torch::Tensor> state() const;
  void load_state(const std::map<std::string, torch::Tensor>& state);

 private:
  std::vector<std::vector<torch::Tensor>> params_;
  OptimizerOptions options_;
  std::vector<std::vector<torch::Tensor>> first_moment_;   // momentum or Adam m
  std::vector<std::vector<torch::Tensor>> second_moment_;  // Adam v
  std::vector<std::int64_t> steps_;
};

}  // namespace weft::runtime
