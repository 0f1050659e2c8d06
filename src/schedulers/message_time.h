// What the planners that price messages — mgwfbp's merging (sync.h), D-Credit's
// windows (dcredit.h) and DreamDDP's sets (local_sgd.h) — charge one collective.
//
// Thread-safety: pure functions.
#pragma once

#include <algorithm>
#include <functional>

#include "cost/cluster.h"
#include "units/units.h"

namespace weft {

// The time one message of n bytes costs a plan.
using MessageTime = std::function<Seconds(Bytes)>;

// Note [A collective's lateness in plans]
// ---------------------------------------
// A collective starts when its last worker reaches it: `skew` after its data is
// ready on the average worker, and no earlier than `back_to_back_skew` after it
// was launched (when it queued for the channel); launched while the workers
// compute, `start_delay` later still, while its steps wait for a core (Notes
// [Skew] and [Start delay] in sim/simulator.cc). Each collective pays that once,
// whatever its size. A plan that prices a message at its time alone on the
// channel sees only the fit's start-up, and splits where each extra collective
// pays the lateness too. So the planners price a message at allreduce_time()
// plus max(skew, back_to_back_skew) + start_delay: what the simulator charges a
// message launched during the backward, exactly where the two skews are equal
// (the last message, launched after the backward, pays no start delay; the
// plans do not tell the two apart). A host without them prices messages as
// before.
inline MessageTime collective_time(const Cluster& cluster) {
  const Seconds late = std::max(cluster.host.skew, cluster.host.back_to_back_skew) + cluster.host.start_delay;
  return [time = AllReduceTime(cluster), late](Bytes n) { return late + time(n); };
}

}  // namespace weft
