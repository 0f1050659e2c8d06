// The strategies (docs/strategies.md §2): pure functions from (profile, cluster, options) to a
// Schedule, and the registry that names them.
//
// A scheduler includes only the profile, cost-model and schedule headers: never the
// simulator or the runtime. Searches that need the simulator (tuning S_p, credit)
// live in the planner (plan/planner.h), which calls schedulers with options fixed.
//
// Thread-safety: pure functions over constant tables.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cost/cluster.h"
#include "profile/profile.h"
#include "schedule/schedule.h"

namespace weft {

struct StrategyOptions {
  int H = 5;                       // local SGD period (flsgd, plsgd, dreamddp*)
  int T = 3;                       // interleaving period (ps-interleaved)
  std::optional<Bytes> partition;  // S_p for bytescheduler/dcredit; unset = default
  std::optional<Bytes> credit;     // C for bytescheduler; unset = default
  std::optional<double> easgd_alpha;  // unset = beta / P
  double easgd_beta = 0.9;
  Encoding compression;  // every message's wire encoding (docs/compression.md); parameter servers: element-wise only
  // Sites (docs/strategies.md, "Sites"; Note [Sites in a schedule]): every average
  // across the sites goes by sites (Reach::kBySites) rather than one ring;
  // local SGD only: between its averages, each site averages every `site_every`
  // iterations (Reach::kSite; 0 = never, else a divisor of H).
  bool hierarchical = false;
  int site_every = 0;
};

// Which workers a strategy's collectives average over (Note [Sites in a schedule]).
inline Reach averaging_reach(const StrategyOptions& options) {
  return options.hierarchical ? Reach::kBySites : Reach::kAll;
}

using SchedulerFn = Schedule (*)(const Profile&, const Cluster&, const StrategyOptions&);

enum class Family { kSynchronous, kLocalSgd, kParameterServer };

struct StrategyInfo {
  std::string_view name;
  Family family;
  Arch arch;                 // the architecture it runs on
  std::string_view summary;  // one line, for --help and the README table
  SchedulerFn scheduler;
  // Whether its synchronisations move parameters rather than gradients: local
  // SGD's averages and EASGD's centre (ps-interleaved). Only those have a change
  // since the last synchronisation for an outer optimizer (docs/local-sgd.md) to
  // step.
  bool moves_parameters = false;

  // The strategy's schedule, its operations encoded as options.compression says
  // (docs/compression.md), its averages reaching as options.hierarchical and
  // options.site_every say (Note [Sites in a schedule]). THROWS UsageError as the
  // scheduler does (the parameter servers' exchanges take the element-wise
  // encodings only), and naming --hierarchical or --site-every where the cluster
  // has no sites, the strategy is not all-reduce (--hierarchical) or local SGD
  // (--site-every), or --site-every does not divide --H.
  Schedule make(const Profile& profile, const Cluster& cluster, const StrategyOptions& options) const;
};

// Every strategy, in the order tables print them.
const std::vector<StrategyInfo>& strategies();
// THROWS UsageError naming `flag` (as the caller spells it, units/ranges.h) and
// listing the accepted names.
const StrategyInfo& find_strategy(std::string_view name, std::string_view flag = "--strategy");

// S-SGD (schedulers/sync.cc).
Schedule make_ssgd(const Profile&, const Cluster&, const StrategyOptions&);
Schedule make_wfbp(const Profile&, const Cluster&, const StrategyOptions&);
Schedule make_ddp(const Profile&, const Cluster&, const StrategyOptions&);
Schedule make_mgwfbp(const Profile&, const Cluster&, const StrategyOptions&);

// Blocks of options.partition bytes (default kDefaultPartition, schedulers/blocks.h),
// layer-wise update. bytescheduler: a credit of options.credit bytes in flight
// (default kDefaultCredit; schedulers/bytescheduler.cc); dcredit: D-Credit's window
// sequence (schedulers/dcredit.h). THROW UsageError naming --partition or --credit
// when it is <= 0.
Schedule make_bytescheduler(const Profile&, const Cluster&, const StrategyOptions&);
Schedule make_dcredit(const Profile&, const Cluster&, const StrategyOptions&);

// Local SGD (schedulers/local_sgd.cc; planning pieces in local_sgd.h). Period
// options.H; THROW UsageError naming --H when H < 1.
Schedule make_flsgd(const Profile&, const Cluster&, const StrategyOptions&);
Schedule make_plsgd(const Profile&, const Cluster&, const StrategyOptions&);
Schedule make_dreamddp(const Profile&, const Cluster&, const StrategyOptions&);
Schedule make_dreamddp_opt(const Profile&, const Cluster&, const StrategyOptions&);

// Parameter server (schedulers/ps.cc; planning pieces in ps.h). Layers fused into
// at most ps::kTargetGroups groups by size, sharded over cluster.servers.
// ps: every group pushed and pulled every iteration, easgd = {0, 0} (the server
// averages gradients and applies SGD). ps-interleaved: period options.T, seed 000's
// slots as per-worker release offsets, EASGD with options.easgd_alpha/beta.
// THROW UsageError naming --servers (< 1), --T (< 1), --easgd-beta (outside
// (0, 1]) or --easgd-alpha (outside [0, 1]).
Schedule make_ps(const Profile&, const Cluster&, const StrategyOptions&);
Schedule make_ps_interleaved(const Profile&, const Cluster&, const StrategyOptions&);

}  // namespace weft
