#include "schedulers/blocks.h"

#include <algorithm>

#include <fmt/format.h>

namespace weft {

std::vector<Block> partition_blocks(const Profile& profile, Bytes partition) {
  if (partition <= 0) {
    throw UsageError(fmt::format(
        "partition size S_p (--partition): {} bytes; need a size > 0 (e.g. 4MiB, 512KiB)",
        partition));
  }
  std::vector<Block> blocks;
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
