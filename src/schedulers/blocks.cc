#include "schedulers/blocks.h"

#include <algorithm>

#include <fmt/format.h>

#include "units/limits.h"

namespace weft {

std::vector<Block> partition_blocks(const Profile& profile, Bytes partition) {
  if (partition <= 0) {
    throw UsageError(fmt::format(
        "partition size S_p (--partition): {} bytes; need a size > 0 (e.g. 4MiB, 512KiB)",
        partition));
  }
  // Counted before anything is allocated: a partition of a few bytes would cut a
  // model into hundreds of millions of messages (docs/limits.md).
  Bytes count = 0;
  for (const Layer& layer : profile.layers) count += (layer.bytes() + partition - 1) / partition;
  if (count > limits::kMaxMessages) {
    throw UsageError(fmt::format(
        "--partition {}: {} in blocks of {} is {} messages an iteration, more than the {} weft schedules; expected "
        "at least {} (docs/limits.md)",
        format_bytes(partition), profile.model, format_bytes(partition), count, limits::kMaxMessages,
        format_bytes(std::max<Bytes>(profile.total_bytes() / limits::kMaxMessages, 1) * 2)));
  }
  std::vector<Block> blocks;
  blocks.reserve(static_cast<std::size_t>(count));
  for (int l = 0; l < profile.size(); ++l) {
    const Bytes n = profile.layers[static_cast<size_t>(l)].bytes();
    for (Bytes offset = 0; offset < n; offset += partition) {
      blocks.push_back({.layer = l, .offset = offset, .length = std::min(partition, n - offset)});
    }
  }
  return blocks;
}

std::vector<CommOp> block_ops(const std::vector<Block>& blocks) {
  std::vector<CommOp> ops;
  ops.reserve(blocks.size());
  for (const Block& b : blocks) {
    ops.push_back({.chunks = {{.layer = b.layer, .offset = b.offset, .length = b.length}},
                   .kind = OpKind::kAverageGradients,
                   .ready_after = b.layer,
                   .priority = b.layer,
                   .needed_by = b.layer});
  }
  return ops;
}

}  // namespace weft
