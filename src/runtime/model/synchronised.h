// The parameters every worker agreed on at each layer's last synchronisation: for
// the parameter-averaging operations, the average the layer was last set to
// (initially the common initial parameters, which every rank builds from the same
// seed). What local SGD's change since the last average is measured from — by the
// outer optimizer (runtime/model/outer_optimizer.h) and by anything that sends that change
// instead of the parameters (a codec). docs/local-sgd.md.
//
// Stored per layer as one flat float32 tensor, the layer's parameters flattened and
// concatenated in layer_parameters order — the byte layout of the engine's chunks —
// so a chunk (layer, offset, length in bytes) is the slice [offset/4, (offset +
// length)/4) of flat(layer).
//
// Thread-safety: none; the engine's communication thread is its only user while the
// engine runs, the training thread (checkpoints) only while it is drained.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "schedule/schedule.h"

namespace weft::runtime {

class SynchronisedParameters {
 public:
  // A copy of `layers` (layers[l] = LayeredModel::layer_parameters(l), float32).
  explicit SynchronisedParameters(const std::vector<std::vector<torch::Tensor>>& layers);

  int num_layers() const { return static_cast<int>(flat_.size()); }
  // Layer `layer`'s agreed parameters, flat. REQUIRES: 0 <= layer < num_layers().
  torch::Tensor& flat(int layer) { return flat_.at(static_cast<size_t>(layer)); }
  // The elements of `chunk` in flat(chunk.layer) (a view: writes go through).
  // THROWS std::logic_error if the chunk is not a whole number of float32 elements
  // inside its layer.
  torch::Tensor slice(const Chunk& chunk);

 private:
  std::vector<torch::Tensor> flat_;
};

}  // namespace weft::runtime
