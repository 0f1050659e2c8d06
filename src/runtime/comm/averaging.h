// The mean all-reduce executor (Note [Executors per OpKind], runtime/comm/
// executor.h) of gradients (kAverageGradients) or of parameters
// (kAverageParameters): a sum over the workers (ring all-reduce, or all-gather
// for small messages; runtime/comm/process_group.h), then division by their
// number; or, for a message with a lossy encoding, its codec's mean
// (runtime/comm/codecs.h). Which workers, and by which collectives, the message's
// reach says (Note [Averages by reach] in averaging.cc; runtime/comm/sites.h).
//
// Thread-safety: as OpExecutor.
#pragma once

#include <memory>

#include "runtime/comm/executor.h"

namespace weft::runtime {

// REQUIRES: `options` outlive the executor.
std::unique_ptr<OpExecutor> make_averaging_executor(const EngineOptions& options, bool gradients);

}  // namespace weft::runtime
