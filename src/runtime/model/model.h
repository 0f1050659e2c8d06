// Layered LibTorch models (docs/runtime.md §3): a model is an ordered list of layers, each a
// module that owns parameters; the layer list is what profiles and schedules index.
//
// The training loop runs the forward layer by layer so that the communication
// engine can hold layer l until its "needed by" operations have completed:
//
//   for (int l = 0; l < model.num_layers(); ++l) { engine.wait_for_forward(l); x = model.forward_layer(l, x); }
//
// Thread-safety: like any torch::nn::Module; one training thread per model.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <torch/torch.h>

#include "profile/profile.h"

namespace weft::runtime {

class LayeredModel : public torch::nn::Module {
 public:
  virtual int num_layers() const = 0;
  virtual std::string layer_name(int layer) const = 0;
  // The parameters layer `layer` owns, in a fixed order: the order of the bytes of
  // the layer in Chunk offsets (each tensor flattened, concatenated).
  virtual std::vector<torch::Tensor> layer_parameters(int layer) = 0;
  // Runs layer `layer` on the output of layer `layer - 1` (the batch input for 0).
  virtual torch::Tensor forward_layer(int layer, const torch::Tensor& x) = 0;
  // The training loss of the last layer's output against the batch target.
  virtual torch::Tensor loss(const torch::Tensor& output, const torch::Tensor& target) = 0;
  // Number of correct predictions in the batch (evaluation); classification
  // models compare argmax with target, gpt-tiny counts correct next characters.
  virtual std::int64_t correct(const torch::Tensor& output, const torch::Tensor& target) = 0;

  // The profile skeleton: names and parameter counts, times zero (docs/formats.md §6).
  Profile layer_profile(std::string_view model_name, int batch);
};

// Models shipped: "mlp", "cnn", "gpt-tiny". Parameters are initialised from `seed`
// (the same seed gives bit-identical models in every process).
// THROWS UsageError listing the accepted names.
std::shared_ptr<LayeredModel> make_model(std::string_view name, std::uint64_t seed = 0);
std::vector<std::string> model_names();

}  // namespace weft::runtime
