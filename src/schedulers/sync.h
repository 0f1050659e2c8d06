// Building blocks of the S-SGD strategies (schedulers/sync.cc), exposed for the
// schedulers that reuse them (ps-interleaved fuses layers by the mgwfbp rule) and
// for tests that compare a strategy against every alternative grouping.
//
// A grouping splits the layers that carry bytes into contiguous runs in backward
// order (L-1 first); each run becomes one message. Layers with no parameters have
// nothing to send and appear in no group.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "profile/profile.h"
#include "schedule/schedule.h"
#include "schedulers/message_time.h"

namespace weft {

// Each group lists 0-based layer indices in backward order (descending); groups
// are listed in backward order too, and together hold every layer with bytes > 0
// exactly once.
using LayerGroups = std::vector<std::vector<int>>;

// The layers with bytes > 0, in backward order.
std::vector<int> layers_with_bytes(const Profile& profile);

// PyTorch DDP's compute_bucket_assignment_by_size at layer granularity: walk the
// layers in backward order, appending each to the open bucket; a bucket closes as
// soon as its size reaches or exceeds its cap, which is `first_cap` for the first
// bucket and `cap` for every later one. See Note [DDP buckets layers, not tensors].
// REQUIRES first_cap > 0 and cap > 0 (THROWS std::logic_error otherwise).
LayerGroups ddp_buckets(const Profile& profile, Bytes first_cap, Bytes cap);

// The contiguous grouping whose last message ends earliest when messages go one
// at a time, in backward order, each starting once the channel is free and its
// last layer's backward has ended, and lasting `message_time` of what its layers
// carry, summed (MessageTime::carried; their bytes, or their encoded payload:
// Note [Plans price the encoded message] in message_time.h). Exact, by
// dynamic programming in O(L^2) calls of `message_time`; see Note [Exact merged-
// gradient WFBP] in sync.cc. Ties go to the grouping found first, which favours
// shorter last messages.
LayerGroups optimal_merge(const Profile& profile, const MessageTime& message_time);

// The finish time, from the start of the backward pass, of the last message of
// `groups` sent as optimal_merge describes (0 if there are no groups).
Seconds merged_finish_time(const Profile& profile, const LayerGroups& groups,
                           const MessageTime& message_time);

// A period-1 gradient all-reduce schedule sending one operation per group, in
// list order, one at a time (kInOrder), each needed by the barrier. An operation
// is ready after the backward of the smallest layer it carries.
// REQUIRES groups as described above for `profile` (checked by validate()).
Schedule in_order_allreduce(std::string strategy, const Profile& profile,
                            const LayerGroups& groups, std::string options_json);

// {"groups": [[11,10],[9],...]}: the grouping as JSON, for options_json.
std::string groups_json(const LayerGroups& groups);

}  // namespace weft
