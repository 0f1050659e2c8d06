// ScheduleIndex: the dependencies of a Schedule, computed once for both executors:
// when each operation becomes ready, and what each forward waits for.
//
// The simulator (sim/simulator.cc) and the runtime engine (runtime/comm/engine.cc) both
// read their dependency bookkeeping from here, so they cannot disagree on what a
// schedule means (Note [One schedule, two executors] in schedule.h).
//
// Note [Dependencies of an operation]
// -----------------------------------
// Rule: an operation of iteration t is *ready* once the backward of every layer in
// waits_on (ready_after and each layer it carries) has ended in iteration t, and
// then its release offset has passed. The forward of layer l in iteration t+1 waits
// for every operation of iteration t whose *needed layer* is <= l, where the needed
// layer is min(needed_by, the smallest layer it carries), kBarrier counting as 0.
// Invariant: needed layer <= needed_by and <= every layer carried; backward runs
// L−1..0, so with validate()'s ready_after <= every layer carried, an operation is
// ready at the end of ready_after's backward (ready_at).
// Why: an operation writes the tensors of the layers it carries when it completes
// (averaged gradients before the step, averaged or pulled parameters), so no
// forward may read them sooner, whatever needed_by says; one rule lets validate()
// accept exactly the schedules both executors run alike.
//
// Thread-safety: immutable after construction.
#pragma once

#include <vector>

#include "schedule/schedule.h"

namespace weft {

// The dependencies of one iteration of the period. Operations are indices into
// schedule.iterations[i]; layers are 0..L-1.
struct IterationIndex {
  // op -> the layers whose backward must end before it is ready, ascending.
  std::vector<std::vector<int>> waits_on;
  // layer -> the ops whose waits_on holds it, ascending.
  std::vector<std::vector<int>> waiting_on;
  // layer -> the ops the end of its backward makes ready (backward running L−1..0:
  // those whose smallest waits_on is the layer), ascending.
  std::vector<std::vector<int>> ready_at;
  // op -> its needed layer: the first forward of the next iteration that waits for it.
  std::vector<int> needed;
  // layer -> how many ops have it as their needed layer.
  std::vector<int> blockers;
};

class ScheduleIndex {
 public:
  // REQUIRES: `schedule` passed validate() for a model of `layers` layers.
  // THROWS std::logic_error naming the iteration and operation if a layer it
  // indexes by (ready_after, needed_by, a chunk's) is outside 0..layers-1.
  ScheduleIndex(const Schedule& schedule, int layers);

  int layers() const { return layers_; }
  // The index of global iteration t (iteration t % period of the period).
  const IterationIndex& at(int global_iteration) const {
    return iterations_[static_cast<size_t>(global_iteration) % iterations_.size()];
  }

 private:
  int layers_;
  std::vector<IterationIndex> iterations_;
};

// The needed layer of `op` (Note [Dependencies of an operation]).
int needed_layer(const CommOp& op);

}  // namespace weft
