#include "runtime/model/synchronised.h"

#include <stdexcept>

#include <fmt/format.h>

namespace weft::runtime {

SynchronisedParameters::SynchronisedParameters(const std::vector<std::vector<torch::Tensor>>& layers) {
  torch::NoGradGuard no_grad;
  for (const auto& params : layers) {
    std::vector<torch::Tensor> flat;
    for (const auto& p : params) flat.push_back(p.detach().to(torch::kFloat32).reshape({-1}));
    flat_.push_back(flat.empty() ? torch::empty({0}, torch::kFloat32) : torch::cat(flat).contiguous());
  }
}

torch::Tensor SynchronisedParameters::slice(const Chunk& chunk) {
  constexpr Bytes kElement = sizeof(float);
  const bool inside = chunk.layer >= 0 && chunk.layer < num_layers() && chunk.offset >= 0 && chunk.length >= 0 &&
                      chunk.offset % kElement == 0 && chunk.length % kElement == 0 &&
                      (chunk.offset + chunk.length) / kElement <= flat(chunk.layer).numel();
  if (!inside) {
    throw std::logic_error(fmt::format("SynchronisedParameters: chunk (layer {}, offset {}, length {}) is not whole "
                                       "float32 elements of a layer",
                                       chunk.layer, chunk.offset, chunk.length));
  }
  return flat(chunk.layer).narrow(0, chunk.offset / kElement, chunk.length / kElement);
}

}  // namespace weft::runtime
