// What a message costs under its encoding (docs/compression.md): the bytes that
// cross the wire and the compute to encode and decode them. The simulator costs
// a collective by these; the planner compares codecs through it.
//
// Thread-safety: pure functions.
#pragma once

#include <vector>

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

// The cost of a message carrying `chunks` (float32 byte ranges of the profile's
// layers) encoded as `encoding`. For `none`: the chunks' bytes and no compute.
// The low-rank codecs size each tensor wholly inside a chunk by its shape
// (Layer::shapes); a layer without shapes is costed as values sent whole (fp16
// for powersgd, float32 for acpsgd), and acpsgd's bytes are the mean of its P and
// Q messages. The compute is at
// `host`'s codec costs.
WireCost wire_cost(const Encoding& encoding, const std::vector<Chunk>& chunks, const Profile& profile,
                   const Host& host);

}  // namespace weft
