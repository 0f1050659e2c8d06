// The simulator: a discrete-event executor of a Schedule (docs/design.md §1.2, §1.3).
//
// Each worker has one compute stream: forward 0..L-1, then backward L-1..0, every
// iteration. The forward of layer l in iteration t starts when the stream is free
// and every operation of iteration t−1 whose needed_by is l has completed (and,
// before layer 0, every kBarrier operation of t−1). An operation of iteration t
// becomes ready at the end of the backward of its ready_after layer plus its
// worker's release offset; a Dispatcher per worker decides when it leaves.
//
// Network: every transfer is a Flow (cost/cluster.h); flows crossing a link share it
// max-min fairly by their weights, recomputed at every start and finish (fluid
// model); under a measured fit, collectives beyond the transport's limit wait
// (Note [Collectives in flight] in simulator.cc). All-reduce
// messages are collective: they start when every worker has launched them and end
// for all at once. Parameter-server operations are, per worker, a push; the server
// update when all P pushes of that op have arrived (instantaneous); then a pull.
//
// Thread-safety: simulate() is a pure function; it may run on many threads at once.
#pragma once

#include "cost/cluster.h"
#include "profile/profile.h"
#include "schedule/schedule.h"
#include "timeline/timeline.h"

namespace weft {

struct SimOptions {
  // Iterations to run; 0 = enough whole periods for a steady state (the summary
  // averages over whole periods after a warm-up period).
  int iterations = 0;
  // Record events (for a trace) for the first `record_iterations` iterations only;
  // 0 records none. The summary never depends on recording.
  int record_iterations = 0;
};

// THROWS std::logic_error if the schedule does not validate against the profile
// and cluster; never exits.
Timeline simulate(const Schedule& schedule, const Profile& profile, const Cluster& cluster,
                  const SimOptions& options = {});

}  // namespace weft
