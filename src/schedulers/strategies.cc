// The strategy registry: one row per strategy of docs/strategies.md §2, in the order of its
// tables. Adding a strategy is one row here plus its make_ function.

#include "schedulers/strategies.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

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

namespace {

void check_sites(const StrategyInfo& strategy, const Cluster& cluster, const StrategyOptions& options) {
  const auto need_sites = [&](std::string_view flag) {
    if (cluster.topology.empty()) {
      throw UsageError(fmt::format("{}: the cluster has no sites; give them with --sites AxB (and --wan-bandwidth, "
                                   "--wan-latency) or --topology FILE",
                                   flag));
    }
  };
  if (options.hierarchical) {
    need_sites("--hierarchical");
    if (strategy.arch != Arch::kAllReduce) {
      throw UsageError(fmt::format("--hierarchical: {} is a parameter-server strategy; sites average the all-reduce "
                                   "strategies' collectives",
                                   strategy.name));
    }
  }
  if (options.site_every > 0) {
    need_sites("--site-every");
    if (strategy.family != Family::kLocalSgd) {
      throw UsageError(fmt::format("--site-every {}: {} averages every iteration already; sites average between "
                                   "the averages of local SGD (flsgd, plsgd, dreamddp, dreamddp-opt)",
                                   options.site_every, strategy.name));
    }
    if (options.H % options.site_every != 0) {
      throw UsageError(fmt::format("--site-every {}: must divide --H {}, so that every period ends alike",
                                   options.site_every, options.H));
    }
  }
}

// Note [Sites in a schedule]: in every site_every-th iteration of the period,
// one exact site average of the layers the plan does not average across sites
// then, after the iteration's other operations.
void add_site_averages(Schedule& schedule, const Profile& profile, int site_every) {
  for (int h = site_every - 1; h < schedule.period; h += site_every) {
    std::vector<CommOp>& ops = schedule.iterations[static_cast<std::size_t>(h)];
    std::vector<bool> across(static_cast<std::size_t>(profile.size()), false);
    for (const CommOp& op : ops) {
      for (const Chunk& c : op.chunks) across[static_cast<std::size_t>(c.layer)] = true;
    }
    CommOp site{.kind = OpKind::kAverageParameters, .ready_after = 0, .needed_by = kBarrier, .reach = Reach::kSite};
    for (int l = profile.size() - 1; l >= 0; --l) {
      const Bytes bytes = profile.layers[static_cast<std::size_t>(l)].bytes();
      if (bytes > 0 && !across[static_cast<std::size_t>(l)]) site.chunks.push_back({.layer = l, .offset = 0, .length = bytes});
    }
    if (!site.chunks.empty()) ops.push_back(std::move(site));
  }
}

}  // namespace

Schedule StrategyInfo::make(const Profile& profile, const Cluster& cluster, const StrategyOptions& options) const {
  check_sites(*this, cluster, options);
  Schedule schedule = scheduler(profile, cluster, options);
  for (auto& ops : schedule.iterations) {
    for (CommOp& op : ops) {
      op.encoding = options.compression;
      if (op.kind != OpKind::kParameterServer) op.reach = averaging_reach(options);
    }
  }
  if (options.site_every > 0) add_site_averages(schedule, profile, options.site_every);
  if (options.hierarchical || options.site_every > 0) {
    nlohmann::json json = nlohmann::json::parse(schedule.options_json.empty() ? "{}" : schedule.options_json);
    if (options.hierarchical) json["hierarchical"] = true;
    if (options.site_every > 0) json["site_every"] = options.site_every;
    schedule.options_json = json.dump();
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
