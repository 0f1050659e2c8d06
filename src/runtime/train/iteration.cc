#include "runtime/train/iteration.h"

namespace weft::runtime {

IterationResult train_iteration(Engine& engine, LayeredModel& model, const Batch& batch, Recorder& recorder,
                                int iteration) {
  IterationResult result;
  torch::Tensor x = batch.input;
  for (int l = 0; l < model.num_layers(); ++l) {
    engine.wait_for_forward(l);
    const Seconds start = recorder.now();
    x = model.forward_layer(l, x);
    const Seconds end = recorder.now();
    result.compute += end - start;
    if (recorder.records(iteration)) {
      recorder.add({.lane = "compute", .name = "fp " + model.layer_name(l), .start = start, .end = end,
                    .iteration = iteration, .layer = l});
    }
  }
  const Seconds backward_start = recorder.now();
  result.loss = model.loss(x, batch.target);
  engine.start_backward();
  result.loss.backward();
  result.compute += recorder.now() - backward_start;
  engine.end_backward();
  return result;
}

}  // namespace weft::runtime
