#include "runtime/outer_optimizer.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "schedulers/strategies.h"
#include "units/ranges.h"
#include "units/units.h"

namespace weft::runtime {

void validate(const OuterOptions& o) {
  if (o.kind != "none" && o.kind != "nesterov") {
    throw UsageError(fmt::format("--outer-optimizer {}: not an outer optimizer; accepted: none, nesterov", o.kind));
  }
  ranges::check(ranges::kOuterLr, o.lr);
  ranges::check(ranges::kOuterMomentum, o.momentum);
}

void check_outer_step(const OuterOptions& o, std::string_view strategy) {
  if (!o.enabled()) return;
  std::vector<std::string_view> stepping;
  for (const StrategyInfo& s : strategies()) {
    if (s.moves_parameters) stepping.push_back(s.name);
  }
  if (std::find(stepping.begin(), stepping.end(), strategy) != stepping.end()) return;
  throw UsageError(fmt::format("--outer-optimizer {}: only local SGD's averages and EASGD's centre have an outer "
                               "step ({}); --strategy {} has none",
                               o.kind, fmt::join(stepping, ", "), strategy));
}

OuterOptimizer::OuterOptimizer(const std::vector<std::vector<torch::Tensor>>& layers, OuterOptions options)
    : options_(std::move(options)), agreed_(layers) {
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
  buffer.mul_(options_.momentum).add_(g);
  agreed.sub_(g.add(buffer, options_.momentum), options_.lr);
  mean.copy_(agreed);
}

}  // namespace weft::runtime
