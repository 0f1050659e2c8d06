#include "schedule/index.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

namespace weft {

int needed_layer(const CommOp& op) {
  int needed = op.needed_by == kBarrier ? 0 : op.needed_by;
  for (const Chunk& c : op.chunks) needed = std::min(needed, c.layer);
  return needed;
}

ScheduleIndex::ScheduleIndex(const Schedule& schedule, int layers) : layers_(layers) {
  const auto L = static_cast<size_t>(layers);
  for (int p = 0; p < schedule.period; ++p) {
    const std::vector<CommOp>& ops = schedule.iterations.at(static_cast<size_t>(p));
    IterationIndex& index = iterations_.emplace_back();
    index.waits_on.resize(ops.size());
    index.waiting_on.resize(L);
    index.ready_at.resize(L);
    index.needed.resize(ops.size());
    index.blockers.assign(L, 0);
    for (size_t i = 0; i < ops.size(); ++i) {
      const CommOp& op = ops[i];
      const auto outside = [&](int layer, const char* what) {
        if (layer >= 0 && layer < layers) return;
        throw std::logic_error(fmt::format("schedule '{}': iteration {}, op {}: {} {} is not a layer (0..{})",
                                           schedule.strategy, p, i, what, layer, layers - 1));
      };
      outside(op.ready_after, "ready_after");
      if (op.needed_by != kBarrier) outside(op.needed_by, "needed_by");
      std::vector<int>& waits = index.waits_on[i];
      waits.push_back(op.ready_after);
      for (const Chunk& c : op.chunks) {
        outside(c.layer, "chunk of layer");
        waits.push_back(c.layer);
      }
      std::ranges::sort(waits);
      waits.erase(std::unique(waits.begin(), waits.end()), waits.end());
      for (int l : waits) index.waiting_on[static_cast<size_t>(l)].push_back(static_cast<int>(i));
      index.ready_at[static_cast<size_t>(waits.front())].push_back(static_cast<int>(i));
      index.needed[i] = needed_layer(op);
      ++index.blockers[static_cast<size_t>(index.needed[i])];
    }
  }
}

}  // namespace weft
