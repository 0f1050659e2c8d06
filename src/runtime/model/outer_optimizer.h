// The outer optimizer of local SGD (docs/local-sgd.md): at a layer's
// synchronisation the workers' averaged change since its last synchronisation is a
// pseudo-gradient, g = agreed − mean(parameters), stepped by SGD with Nesterov
// momentum (torch.optim.SGD's rule, dampening 0):
//   buf = momentum·buf + g;   agreed = agreed − lr·(g + momentum·buf)
// and every worker's parameters become the new agreed ones. `none` keeps today's
// plain average (the engine then never calls this class). With lr 1 and momentum
// 0 the step is the plain average up to rounding (agreed − (agreed − mean)).
//
// The state — the agreed parameters (runtime/model/synchronised.h) and the momentum
// buffers — is per layer and element-wise, so any chunk of a layer steps alone:
// DreamDDP's layer sets each step their own layers, in their own iterations.
// Every rank holds the same state (it starts from the common initial parameters
// and sees the same averages), so every rank computes the same new parameters.
//
// Thread-safety: as SynchronisedParameters.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <torch/torch.h>

#include "runtime/model/outer_options.h"
#include "runtime/model/synchronised.h"
#include "schedule/schedule.h"

namespace weft::runtime {

class OuterOptimizer {
 public:
  // The agreed parameters start as a copy of `layers` (the common initial ones).
  // `step`: outer_step of enabled, validated options.
  OuterOptimizer(const std::vector<std::vector<torch::Tensor>>& layers, OuterStep step);

  // `mean` (a view, written through) holds the workers' mean of chunk's parameters (float32, contiguous,
  // chunk.length bytes); replaces it in place by the new agreed parameters, which
  // also become the agreed state. THROWS std::logic_error for a chunk outside its
  // layer or a `mean` of another size.
  void step(const Chunk& chunk, torch::Tensor mean);

  SynchronisedParameters& agreed() { return agreed_; }
  // Layer l's momentum buffer, flat like agreed().flat(l) (zeros before any step).
  torch::Tensor& momentum(int layer) { return momentum_.at(static_cast<size_t>(layer)); }

 private:
  OuterStep step_;
  SynchronisedParameters agreed_;
  std::vector<torch::Tensor> momentum_;
};

}  // namespace weft::runtime
