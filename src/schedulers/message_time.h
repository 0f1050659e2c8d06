// What the planners that price messages — mgwfbp's merging (sync.h), D-Credit's
// windows (dcredit.h) and DreamDDP's sets (local_sgd.h) — charge one collective.
//
// Thread-safety: MessageTime is immutable once built; calls are pure.
#pragma once

#include <algorithm>
#include <concepts>
#include <functional>
#include <type_traits>
#include <utility>

#include "cost/cluster.h"
#include "profile/profile.h"
#include "schedule/encoding.h"
#include "schedule/schedule.h"
#include "schedule/wire_cost.h"
#include "units/units.h"

namespace weft {

// The time one message costs a plan, from what it carries: a planner sums the
// payloads of the chunks it puts in one message (carried()) and prices the sum.
class MessageTime {
 public:
  // A message priced by its float32 bytes alone: time(bytes). Implicit, so that a
  // function of Bytes is a MessageTime. Its payloads are the chunks' bytes.
  template <typename F>
    requires(!std::same_as<std::remove_cvref_t<F>, MessageTime> && std::invocable<const F&, Bytes>)
  MessageTime(F time)  // NOLINT(google-explicit-constructor)
      : price_([time = std::move(time)](const Payload& p) { return Seconds{time(p.bytes)}; }) {}

  // A message of `profile`'s chunks encoded as `encoding`, priced by `price` of
  // their payloads' sum (schedule/wire_cost.h). `profile` must outlive this.
  MessageTime(const Encoding& encoding, const Profile& profile, std::function<Seconds(const Payload&)> price)
      : price_(std::move(price)), encoding_(encoding), profile_(&profile) {}

  // What `chunk` adds to a message.
  Payload carried(const Chunk& chunk) const {
    return profile_ != nullptr ? payload(encoding_, chunk, *profile_) : Payload::whole(chunk.length);
  }
  Seconds operator()(const Payload& message) const { return price_(message); }
  // A message of n float32 bytes sent whole.
  Seconds operator()(Bytes n) const { return price_(Payload::whole(n)); }

 private:
  std::function<Seconds(const Payload&)> price_;
  Encoding encoding_;
  const Profile* profile_ = nullptr;
};

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
// `reach`: which workers the message averages, priced on the links it crosses
// (Note [Collectives across sites] in cost/cluster.h).
inline MessageTime collective_time(const Cluster& cluster, Reach reach = Reach::kAll) {
  const Seconds late = std::max(cluster.host.skew, cluster.host.back_to_back_skew);
  return [time = AllReduceTime(cluster, reach), late](Bytes n) { return late + time(n); };
}

// Note [Plans price the encoded message]
// --------------------------------------
// Rule: a scheduler that prices messages to plan — mgwfbp's merging, D-Credit's
// windows, DreamDDP's sets (a message a layer) — prices each one as its encoding
// sends it: its chunks' payloads summed, costed by Note [A message's
// collectives] (schedule/wire_cost.h), the simulator's own rule.
// Why: a codec shrinks the bytes, not the start-ups (PowerSGD pays two a
// message), so a plan made for float32 sizes keeps as many messages as float32
// warranted, each paying a start-up for few bytes. `wfbp` stays one message a
// layer (its definition; mgwfbp is the merged one), `ddp` keeps PyTorch's float32
// buckets (as the hooks compress them), and `bytescheduler` never fuses blocks
// (its credit bounds bytes in flight; its S_p is tuned by simulating the encoded
// schedule, plan/tuning.h). `none` prices exactly as before.

// The same for messages of `profile`'s layers in `encoding`: the lateness once,
// and the encoded message's collectives as the simulator charges them (Note [A
// message's collectives] in schedule/wire_cost.h), so a plan merges what the
// codec made small. For `none`, collective_time(cluster). `cluster` and
// `profile` must outlive the result.
inline MessageTime collective_time(const Cluster& cluster, const Profile& profile, const Encoding& encoding,
                                   Reach reach = Reach::kAll) {
  if (!lossy(encoding)) return collective_time(cluster, reach);
  const Seconds late = std::max(cluster.host.skew, cluster.host.back_to_back_skew);
  return MessageTime(encoding, profile,
                     [&cluster, encoding, reach, time = AllReduceTime(cluster, reach), late](const Payload& p) {
                       return late + encoded_allreduce_time(time, cluster, wire_cost(encoding, p, cluster.host), reach);
                     });
}

}  // namespace weft
