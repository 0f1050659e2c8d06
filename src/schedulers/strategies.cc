// The strategy registry: one row per strategy of docs/strategies.md §2, in the order of its
// tables. Adding a strategy is one row here plus its make_ function.

#include "schedulers/strategies.h"

#include <fmt/format.h>

#include <string>

#include "units/ranges.h"

namespace weft {

const std::vector<StrategyInfo>& strategies() {
  using enum Family;
  static const std::vector<StrategyInfo> table = {
      // S-SGD (schedulers/sync.cc)
      {"ssgd", kSynchronous, Arch::kAllReduce,
       "no overlap: all gradients in one all-reduce after the whole backward", make_ssgd},
      {"wfbp", kSynchronous, Arch::kAllReduce,
       "wait-free backprop: each layer all-reduced when its backward ends", make_wfbp},
      {"ddp", kSynchronous, Arch::kAllReduce,
       "PyTorch DDP buckets: reverse layer order, 1 MiB first bucket, then 25 MiB", make_ddp},
      {"mgwfbp", kSynchronous, Arch::kAllReduce,
       "merged-gradient WFBP: the optimal contiguous merging of layers", make_mgwfbp},
      // Blocks of S_p bytes, layer-wise update (schedulers/bytescheduler.cc, dcredit.cc)
      {"bytescheduler", kSynchronous, Arch::kAllReduce, "ByteScheduler: S_p-byte blocks by layer priority, a fixed credit C of bytes in flight", make_bytescheduler},
      {"dcredit", kSynchronous, Arch::kAllReduce, "D-Credit: S_p-byte blocks by layer priority, a dynamic window sequence planned offline", make_dcredit},
      // Local SGD (schedulers/local_sgd.cc)
      {"flsgd", kLocalSgd, Arch::kAllReduce, "local SGD: the whole model averaged every H iterations, blocking", make_flsgd, true},
      {"plsgd", kLocalSgd, Arch::kAllReduce, "partial local SGD: H equal-count layer groups, one averaged per iteration", make_plsgd, true},
      {"dreamddp", kLocalSgd, Arch::kAllReduce, "DreamDDP: layer groups by the seed's pruned DFS, then bubble filling", make_dreamddp, true},
      {"dreamddp-opt", kLocalSgd, Arch::kAllReduce, "DreamDDP's objective minimised exactly (dynamic programme), then bubble filling", make_dreamddp_opt, true},
      // Parameter server (schedulers/ps.cc)
      {"ps", kParameterServer, Arch::kParameterServer, "synchronous parameter server: every fused group pushed and pulled every iteration", make_ps},
      {"ps-interleaved", kParameterServer, Arch::kParameterServer, "seed 000: fused groups interleaved over T iterations, staggered worker slots, EASGD", make_ps_interleaved, true},
  };
  return table;
}

Schedule StrategyInfo::make(const Profile& profile, const Cluster& cluster, const StrategyOptions& options) const {
  Schedule schedule = scheduler(profile, cluster, options);
  if (!lossy(options.compression)) return schedule;
  for (auto& ops : schedule.iterations) {
    for (CommOp& op : ops) op.encoding = options.compression;
  }
  return schedule;
}

const StrategyInfo& find_strategy(std::string_view name, std::string_view flag) {
  std::string accepted;
  for (const StrategyInfo& info : strategies()) {
    if (info.name == name) return info;
    accepted += accepted.empty() ? "" : ", ";
    accepted += info.name;
  }
  throw UsageError(ranges::given(flag, name) + ": not a weft strategy; accepted: " + accepted);
}

}  // namespace weft
