// One training iteration of a worker through its communication engine: the
// training thread's side of the protocol of engine.h. `weft train`'s loop
// (trainer.cc) and the engine-overhead bench (tools/overhead_bench.cc) both run
// it, so the bench times exactly what training does.
//
// Thread-safety: the training thread only, as Engine's own calls.
#pragma once

#include <torch/torch.h>

#include "runtime/comm/engine.h"
#include "runtime/model/data.h"
#include "runtime/model/model.h"
#include "timeline/recorder.h"

namespace weft::runtime {

struct IterationResult {
  torch::Tensor loss;
  Seconds compute = 0;  // the forward and backward, without the waits for the engine
};

// For each layer, engine.wait_for_forward then its forward (recorded as "fp
// <layer>" in lane "compute" when the recorder keeps `iteration`); the loss; the
// backward between engine.start_backward and engine.end_backward. THROWS what the
// engine throws.
IterationResult train_iteration(Engine& engine, LayeredModel& model, const Batch& batch, Recorder& recorder,
                                int iteration);

}  // namespace weft::runtime
