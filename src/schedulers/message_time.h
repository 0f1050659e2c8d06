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
// was launched (when it queued for the channel) (Note [Skew] in
// sim/simulator.cc). Each collective pays that once, whatever its size. A plan
// that prices a message at its time alone on the channel sees only the fit's
// start-up, and splits where each extra collective pays the lateness too. So the
// planners price a message at allreduce_time() plus max(skew,
// back_to_back_skew), exactly what the simulator charges where the two skews
// are equal. The host's core_wait is left out: it holds only while the cores
// are all taken, which a plan does not know (and priced in, the stored benches
// replay worse: src/cli/replay_test.cc). A host without skews prices messages
// as before.
inline MessageTime collective_time(const Cluster& cluster) {
  const Seconds late = std::max(cluster.host.skew, cluster.host.back_to_back_skew);
  return [time = AllReduceTime(cluster), late](Bytes n) { return late + time(n); };
}

}  // namespace weft
