// What the planners that price messages — mgwfbp's merging (sync.h), D-Credit's
// windows (dcredit.h) and DreamDDP's sets (local_sgd.h) — charge one collective.
//
// Thread-safety: pure functions.
#pragma once

#include <algorithm>
#include <functional>

#include "cost/cluster.h"
#include "profile/profile.h"
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
// plans do not tell the two apart). A profile without them prices messages as
// before.
//
// Measured side by side (BENCHMARKS.md "A collective's lateness in plans"; 4
// workers on 2 cores, cnn, one profile per link: skew 2.1 ms and start delay 4.2
// ms at 100Mbit): dcredit at 1Gbit planned 4 MiB blocks in 3 windows where it had
// 128 KiB blocks in 5, and ran 13% faster (7 of 8 rounds); mgwfbp sent the head
// with block3, and dcredit at 100Mbit fewer windows, within 3% either way. The
// simulator expects more of the merged plans than they give (4–18% more).
// DreamDDP's sets, priced so (local_sgd.h), average the output layer alone and
// fill the other iterations' bubbles with it at 1Gbit where they had averaged
// two and two; dreamddp ran 7% faster there (4 of 5 rounds), dreamddp-opt 3%,
// and both the same at 100Mbit.
inline MessageTime collective_time(const Profile& profile, const Cluster& cluster) {
  const Seconds late = std::max(profile.skew, profile.back_to_back_skew) + profile.start_delay;
  return [&cluster, late](Bytes n) { return late + allreduce_time(cluster, n); };
}

}  // namespace weft
