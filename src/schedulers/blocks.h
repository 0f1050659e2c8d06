// Partition blocks: the unit that ByteScheduler and D-Credit schedule (docs/strategies.md §2,
// §4.2), shared by schedulers/bytescheduler.cc and schedulers/dcredit.cc.
//
// Layer l is split into m(l) = ceil(n(l)/S_p) blocks of S_p bytes, the last one
// shorter; a layer without parameters has no block. Every block is one CommOp that
// averages gradients, is ready after its own layer's backward and is needed by its
// own layer's next forward (layer-wise update). Priority is the layer index (the
// input side is needed first by the next forward); blocks of one layer are listed
// in byte order, and the Dispatcher breaks equal priorities by list order, so the
// blocks of a layer leave in byte order.
//
// Thread-safety: pure functions.
#pragma once

#include <vector>

#include "profile/profile.h"
#include "schedule/schedule.h"
#include "units/units.h"

namespace weft {

// Defaults of ByteScheduler's open-source ByteCore (bytescheduler/common/bytecore.py:
// BYTESCHEDULER_PARTITION = 1,000,000 parameters, BYTESCHEDULER_CREDIT = 4,000,000
// parameters, i.e. 4 MB and 16 MB of fp32 gradients), rounded to powers of two.
// D-Credit builds on ByteScheduler's partitioning and uses the same default S_p.
inline constexpr Bytes kDefaultPartition = Bytes{4} << 20;  // S_p
inline constexpr Bytes kDefaultCredit = Bytes{16} << 20;    // C

// One block: a contiguous byte range of one layer.
struct Block {
  int layer = 0;
  Bytes offset = 0;
  Bytes length = 0;
};

// The blocks of every layer, in priority order: layer ascending, then offset
// ascending. THROWS UsageError naming the partition size if `partition` <= 0 or
// cuts the model into more than limits::kMaxMessages blocks.
std::vector<Block> partition_blocks(const Profile& profile, Bytes partition);

// One operation per block, in the same order (see the header comment for its
// fields). The result is the operation list of one S-SGD iteration.
std::vector<CommOp> block_ops(const std::vector<Block>& blocks);

}  // namespace weft
