#include "runtime/model/outer_optimizer.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "schedulers/strategies.h"
#include "units/ranges.h"
#include "units/units.h"

namespace weft::runtime {

OuterOptimizer::OuterOptimizer(const std::vector<std::vector<torch::Tensor>>& layers, OuterStep step)
    : step_(step), agreed_(layers) {
  for (int l = 0; l < agreed_.num_layers(); ++l) momentum_.push_back(torch::zeros_like(agreed_.flat(l)));
}

void OuterOptimizer::step(const Chunk& chunk, torch::Tensor mean) {
  torch::NoGradGuard no_grad;
  torch::Tensor agreed = agreed_.slice(chunk);
  if (mean.numel() != agreed.numel()) {
    throw std::logic_error(fmt::format("OuterOptimizer::step: {} values for a chunk of {} elements of layer {}",
                                       mean.numel(), agreed.numel(), chunk.layer));
  }
  torch::Tensor buffer = momentum(chunk.layer).narrow(0, chunk.offset / static_cast<Bytes>(sizeof(float)),
                                                      agreed.numel());
  const torch::Tensor g = agreed - mean;  // the pseudo-gradient
  buffer.mul_(step_.momentum).add_(g);
  agreed.sub_(g.add(buffer, step_.momentum), step_.lr);
  mean.copy_(agreed);
}

}  // namespace weft::runtime
