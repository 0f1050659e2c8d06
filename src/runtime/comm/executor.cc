#include "runtime/comm/executor.h"

#include <stdexcept>

#include <fmt/format.h>

#include "runtime/comm/averaging.h"
#include "runtime/comm/parameter_server.h"

namespace weft::runtime {

void OpExecutor::load_state(const std::map<std::string, torch::Tensor>& state) {
  if (!state.empty()) {
    throw std::invalid_argument(fmt::format("engine state {}: this executor keeps no state", state.begin()->first));
  }
}

std::unique_ptr<OpExecutor> make_executor(OpKind kind, const EngineOptions& options) {
  switch (kind) {
    case OpKind::kAverageGradients: return make_averaging_executor(options, true);
    case OpKind::kAverageParameters: return make_averaging_executor(options, false);
    case OpKind::kParameterServer: return make_parameter_server_executor(options);
  }
  throw std::logic_error(fmt::format("engine: no executor for OpKind {}", static_cast<int>(kind)));
}

}  // namespace weft::runtime
