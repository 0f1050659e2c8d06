// Per-layer optimizers (docs/runtime.md §3): SGD, momentum SGD, Adam and AdamW, stepped one layer at
// a time so that the communication engine can update layer l as soon as its data is
// averaged (layer-wise update), while other layers are still in flight.
//
// State (momentum buffers, Adam moments and step counts) is per layer and local to
// the worker. Thread-safety: step(l) and step(m) for l != m may run on different
// threads; the same layer must not be stepped concurrently.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <torch/torch.h>

namespace weft::runtime {

struct OptimizerOptions {
  // "none": step and zero_grad leave the parameter and its gradient alone (the
  // caller steps it by other means, e.g. a Python optimizer after Engine::drain).
  std::string kind = "sgd";  // "sgd" | "momentum" | "adam" | "adamw" | "none"
  double lr = 0.05;
  double momentum = 0.9;     // "momentum"
  double dampening = 0;      // "momentum" (torch.optim.SGD's dampening)
  bool nesterov = false;     // "momentum"
  double beta1 = 0.9;        // "adam", "adamw"
  double beta2 = 0.999;      // "adam", "adamw"
  double eps = 1e-8;         // "adam", "adamw"
  double weight_decay = 0;   // added to the gradient; "adamw": decoupled, p *= 1 - lr * weight_decay
};

// THROWS UsageError listing the accepted kinds.
void validate(const OptimizerOptions& options);

class LayerOptimizer {
 public:
  // params[l] are layer l's parameters (LayeredModel::layer_parameters(l)).
  LayerOptimizer(std::vector<std::vector<torch::Tensor>> params, OptimizerOptions options);
  // The same with options per parameter: options[l][i] for params[l][i] (as a
  // torch.optim param group gives them). THROWS UsageError as validate(), and
  // std::logic_error when the shapes of `options` and `params` differ.
  LayerOptimizer(std::vector<std::vector<torch::Tensor>> params,
                 std::vector<std::vector<OptimizerOptions>> options);

  // Replaces the options of parameter `parameter` of `layer` from its next step
  // on: a scheduler's lr, momentum or betas, or another kind (e.g. "none" to
  // "momentum": the moments allocated so far are kept, a missing one starts as
  // torch.optim starts it). Thread-safe with step() and zero_grad(). THROWS
  // UsageError as validate(), std::logic_error for a parameter out of range.
  void set_options(int layer, std::size_t parameter, const OptimizerOptions& options);
  const OptimizerOptions& options(int layer, std::size_t parameter) const;

  // Applies one step to layer `layer` using each parameter's current .grad()
  // (no-op for parameters without a gradient). REQUIRES: 0 <= layer < num_layers().
  void step(int layer);
  // Zeroes the layer's gradients in place without counting it as a change of the
  // tensors (Note [Zeroing unseen]); leaves a "none" parameter's alone.
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
  std::vector<std::vector<OptimizerOptions>> parameter_options_;  // [layer][parameter]
  // Guards parameter_options_; behind a pointer so that the optimizer stays movable.
  std::unique_ptr<std::mutex> options_mutex_ = std::make_unique<std::mutex>();
  std::vector<std::vector<torch::Tensor>> first_moment_;   // momentum or Adam m
  std::vector<std::vector<torch::Tensor>> second_moment_;  // Adam v
  std::vector<std::int64_t> steps_;
};

}  // namespace weft::runtime
