// What a message costs under its encoding (docs/compression.md): the bytes that
// cross the wire and the compute to encode and decode them. The simulator costs
// a collective by these, and the schedulers plan their messages by the same
// rule (Note [A message's collectives]).
//
// Thread-safety: pure functions.
#pragma once

#include <vector>

#include "cost/cluster.h"
#include "cost/host.h"
#include "profile/profile.h"
#include "schedule/schedule.h"

namespace weft {

struct WireCost {
  Bytes bytes = 0;      // what an all-reduce of this size moves, as float32 bytes would
  Seconds compute = 0;  // encoding and decoding on each worker (Host::codec_cost)
  // Collectives that run one after the other (runtime/comm/codecs.cc): PowerSGD's P
  // sum must end before Q is computed and summed (its fp16 rest runs beside P);
  // every other encoding (acpsgd too: P or Q, and the rest, in one sum) is one
  // exchange. Each costs a collective's start-up.
  int exchanges = 1;
};

// What a message carries, as its wire cost reads it. It adds up over the
// message's chunks: whether a low-rank codec factorises a tensor depends on the
// chunk alone (Note [Which tensors PowerSGD factorises]), so a planner prices a
// message of many layers or blocks from each one's payload, summed.
struct Payload {
  Bytes bytes = 0;         // float32 bytes: the chunks' lengths
  Bytes whole_values = 0;  // values sent element-wise (every one, but for factorised matrices)
  Bytes factor_bytes = 0;  // the factorised matrices' factors on the wire (acpsgd: the mean of P and Q)
  double matrix_work = 0;  // over those matrices, Σ rows·cols·min(R, rows, cols)
  int matrices = 0;        // how many matrices are factorised

  // `bytes` float32 bytes sent whole: what a message of them carries when no
  // tensor of it is factorised.
  static Payload whole(Bytes bytes) { return {.bytes = bytes, .whole_values = bytes / 4}; }
  Payload& operator+=(const Payload& other);
};

// What `chunk` adds to a message encoded as `encoding`: the low-rank codecs size
// each tensor wholly inside it by its shape (Layer::shapes); a layer without
// shapes is sent whole (fp16 for powersgd, float32 for acpsgd).
Payload payload(const Encoding& encoding, const Chunk& chunk, const Profile& profile);

// The cost of a message carrying `payload` encoded as `encoding`: for `none`, its
// float32 bytes and no compute; acpsgd's bytes are the mean of its P and Q
// messages. The compute is at `host`'s codec costs.
WireCost wire_cost(const Encoding& encoding, const Payload& payload, const Host& host);

// The cost of a message carrying `chunks` (float32 byte ranges of the profile's
// layers): wire_cost of their payloads' sum.
WireCost wire_cost(const Encoding& encoding, const std::vector<Chunk>& chunks, const Profile& profile,
                   const Host& host);

// Note [A message's collectives]
// ------------------------------
// Rule: a message in an encoding is one all-reduce of its wire bytes whose
// start-up is paid once per exchange (WireCost::exchanges), each exchange after
// the first waiting `core_wait` more (the codec's thread launches it when the sum
// before returns, a wake-up among more threads than cores), plus the codec's
// compute. `none` is the all-reduce of its float32 bytes, unchanged. Why: each
// collective costs its start-up whatever its size, so a plan that merges
// messages (mgwfbp, D-Credit's windows, DreamDDP's sets) must count one per
// exchange the codec runs, on the bytes the codec sends. The simulator charges
// encoded_allreduce_flow() and the planners encoded_allreduce_time() (the same
// flow alone on the channel), so the rule is written here once.
// `reach` as allreduce_flow's (cost/cluster.h).
Flow encoded_allreduce_flow(const Cluster& cluster, const WireCost& cost, Reach reach = Reach::kAll);
// encoded_allreduce_flow(cluster, cost, reach) alone on the channel, where `time`
// is AllReduceTime(cluster, reach).
Seconds encoded_allreduce_time(const AllReduceTime& time, const Cluster& cluster, const WireCost& cost,
                               Reach reach = Reach::kAll);

}  // namespace weft
