// The parameter-server strategies ps and ps-interleaved (docs/strategies.md §2, §4.4). See the
// Notes in ps.h.

#include "schedulers/ps.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "schedulers/strategies.h"

namespace weft {
namespace ps {

LayerGroups fuse_layers(const Profile& profile, int target_groups) {
  if (target_groups < 1) {
    throw std::logic_error(fmt::format("ps::fuse_layers: target_groups = {}, need >= 1", target_groups));
  }
  const Bytes total = profile.total_bytes();
  if (total == 0) return {};
  // Rounding up keeps the count at or below target_groups: every closed group holds
  // at least ceil(total / target) bytes.
  const Bytes threshold = (total + target_groups - 1) / target_groups;
  return ddp_buckets(profile, threshold, threshold);
}

std::vector<Bytes> group_bytes(const Profile& profile, const LayerGroups& groups) {
  std::vector<Bytes> bytes;
  bytes.reserve(groups.size());
  for (const auto& group : groups) {
    Bytes sum = 0;
    for (int l : group) sum += profile.layers[static_cast<size_t>(l)].bytes();
    bytes.push_back(sum);
  }
  return bytes;
}

std::vector<int> assign_servers(const std::vector<Bytes>& bytes, int servers) {
  if (servers < 1) {
    throw std::logic_error(fmt::format("ps::assign_servers: {} servers, need >= 1", servers));
  }
  std::vector<int> order(bytes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return bytes[static_cast<size_t>(a)] > bytes[static_cast<size_t>(b)];
  });
  std::vector<Bytes> load(static_cast<size_t>(servers), 0);
  std::vector<int> server(bytes.size(), 0);
  for (int idx : order) {
    const auto least = std::min_element(load.begin(), load.end());  // first of equals
    server[static_cast<size_t>(idx)] = static_cast<int>(least - load.begin());
    *least += bytes[static_cast<size_t>(idx)];
  }
  return server;
}

bool communicates(int idx, int t, int T) {
  if (T < 1 || idx < 0 || t < 0) {
    throw std::logic_error(fmt::format("ps::communicates: idx {}, t {}, T {}", idx, t, T));
  }
  return idx % T == t % T;
}

std::vector<int> groups_in_iteration(int groups, int t, int T) {
  std::vector<int> out;
  for (int idx = 0; idx < groups; ++idx) {
    if (communicates(idx, t, T)) out.push_back(idx);
  }
  return out;
}

Slots allocate_slots(const Profile& profile, const LayerGroups& groups, int T, int workers) {
  if (T < 1 || workers < 1) {
    throw std::logic_error(fmt::format("ps::allocate_slots: T = {}, workers = {}; need both >= 1", T, workers));
  }
  const std::vector<Seconds> bp_end = backward_end_times(profile);
  const int n = static_cast<int>(groups.size());
  Slots s;
  s.end_comp = profile.backward_time();
  for (const auto& group : groups) {
    if (group.empty()) throw std::logic_error("ps::allocate_slots: an empty group");
    // A group's first layer in backward order is its largest index.
    const auto first = static_cast<size_t>(group.front());
    s.group_start.push_back(bp_end[first] - profile.layers[first].bp);
  }
  // Seed 000, Algorithm 1, as docs/strategies.md §4.4 states it.
  for (int idx = 0; idx < n; ++idx) {
    const Seconds cur = idx + 1 < n ? s.group_start[static_cast<size_t>(idx + 1)] : s.end_comp;
    Seconds next;
    if (idx + 1 + T < n) {
      next = s.group_start[static_cast<size_t>(idx + 1 + T)];
    } else if (idx + 1 + T == n) {
      next = s.end_comp;
    } else {
      // The window runs into the next forward, taken as half the backward part
      // (backward ≈ 2 × forward, seed 000 citing Liu et al. 2022).
      next = s.end_comp + 0.5 * (s.end_comp - cur);
    }
    s.cur.push_back(cur);
    s.next.push_back(next);
    s.slot.push_back((next - cur) / workers);
  }
  return s;
}

std::vector<Seconds> release_offsets(const Profile& profile, const LayerGroups& groups,
                                     const Slots& slots, int idx, int workers) {
  const auto i = static_cast<size_t>(idx);
  const Seconds ready = backward_end_times(profile)[static_cast<size_t>(groups[i].back())];
  const Seconds wait = slots.cur[i] - ready;
  // Equal up to rounding when no parameterless layer lies between the groups.
  if (wait < -1e-9 * std::max(1.0, slots.end_comp)) {
    throw std::logic_error(fmt::format(
        "ps::release_offsets: group {} is ready at {} s but its window starts at {} s", idx, ready,
        slots.cur[i]));
  }
  std::vector<Seconds> offsets;
  offsets.reserve(static_cast<size_t>(workers));
  for (int p = 0; p < workers; ++p) offsets.push_back(std::max(0.0, wait) + p * slots.slot[i]);
  return offsets;
}

}  // namespace ps

namespace {

void require_servers(const Cluster& cluster) {
  if (cluster.servers < 1) {
    throw UsageError(fmt::format("--servers: {} servers; need at least 1 for a parameter server",
                                 cluster.servers));
  }
  if (cluster.workers < 1) {
    throw UsageError(fmt::format("--workers: {} workers; need at least 1", cluster.workers));
  }
}

// The encoding of every push and answer: an element-wise codec, or none. A
// low-rank codec needs its factors summed by every worker before it decodes,
// which a point-to-point exchange does not do (docs/compression.md). THROWS UsageError naming what is accepted.
Encoding exchange_encoding(const StrategyOptions& options, std::string_view strategy) {
  check_exchange_encoding(options.compression, strategy);
  return options.compression;
}

// One push-update-pull of a whole group. It may leave once the backward of its
// smallest layer ends, and the next forward needs the pulled parameters first at
// that same layer: the group's input-side end.
CommOp group_op(const Profile& profile, const std::vector<int>& group, int idx, int server, Encoding encoding) {
  CommOp op;
  op.kind = OpKind::kParameterServer;
  op.encoding = encoding;
  for (int l : group) {
    op.chunks.push_back({.layer = l, .offset = 0, .length = profile.layers[static_cast<size_t>(l)].bytes()});
  }
  op.ready_after = group.back();
  op.needed_by = group.back();
  op.priority = idx;
  op.server = server;
  return op;
}

// Note [PS dispatch: credit, not in order]
// ----------------------------------------
// A worker's PS engine pushes a group as soon as it may and pulls it as soon as the
// server has updated it, with many groups outstanding (ps-lite and BytePS work
// this way). In-order dispatch would hold group idx+1's push until group idx's pull
// ends, and that pull waits for the slowest worker's push: the push and pull
// directions of a link would never overlap, and in ps-interleaved every worker
// would wait on worker P−1's slot before its own next push. So both strategies use
// the credit policy with a credit of the whole model, i.e. no limit: when an
// operation leaves is decided by its ready time and release offset alone.
// Priority (group index, backward order) only orders operations released at the
// same instant.
DispatchPolicy unlimited_credit(const Profile& profile) {
  return {.kind = DispatchPolicy::Kind::kCredit, .credit = std::max<Bytes>(1, profile.total_bytes())};
}

}  // namespace

Schedule make_ps(const Profile& profile, const Cluster& cluster, const StrategyOptions& options) {
  require_servers(cluster);
  const Encoding encoding = exchange_encoding(options, "ps");
  const LayerGroups groups = ps::fuse_layers(profile);
  const std::vector<int> server = ps::assign_servers(ps::group_bytes(profile, groups), cluster.servers);

  Schedule schedule;
  schedule.strategy = "ps";
  schedule.period = 1;
  schedule.dispatch = unlimited_credit(profile);
  schedule.easgd = {.alpha = 0, .beta = 0};  // Note [What the server does]: averaged gradients, SGD
  std::vector<CommOp>& ops = schedule.iterations.emplace_back();
  for (int idx = 0; idx < static_cast<int>(groups.size()); ++idx) {
    ops.push_back(
        group_op(profile, groups[static_cast<size_t>(idx)], idx, server[static_cast<size_t>(idx)], encoding));
  }
  schedule.options_json = nlohmann::json{{"groups", groups.size()}}.dump();
  return schedule;
}

Schedule make_ps_interleaved(const Profile& profile, const Cluster& cluster,
                             const StrategyOptions& options) {
  require_servers(cluster);
  const Encoding encoding = exchange_encoding(options, "ps-interleaved");
  const int T = options.T;
  if (T < 1) throw UsageError(fmt::format("--T {}: expected an integer >= 1", T));
  const double beta = options.easgd_beta;
  if (!(beta > 0 && beta <= 1)) {
    throw UsageError(fmt::format("--easgd-beta {}: expected a number in (0, 1]", beta));
  }
  const int P = cluster.workers;
  const double alpha = options.easgd_alpha.value_or(beta / P);
  if (!(alpha >= 0 && alpha <= 1)) {
    throw UsageError(fmt::format("--easgd-alpha {}: expected a number in [0, 1]", alpha));
  }

  const LayerGroups groups = ps::fuse_layers(profile);
  const std::vector<int> server = ps::assign_servers(ps::group_bytes(profile, groups), cluster.servers);
  const ps::Slots slots = ps::allocate_slots(profile, groups, T, P);

  Schedule schedule;
  schedule.strategy = "ps-interleaved";
  schedule.period = T;
  schedule.dispatch = unlimited_credit(profile);
  schedule.easgd = {.alpha = alpha, .beta = beta};
  for (int t = 0; t < T; ++t) {
    std::vector<CommOp>& ops = schedule.iterations.emplace_back();
    for (int idx : ps::groups_in_iteration(static_cast<int>(groups.size()), t, T)) {
      CommOp op =
          group_op(profile, groups[static_cast<size_t>(idx)], idx, server[static_cast<size_t>(idx)], encoding);
      op.release_offset = ps::release_offsets(profile, groups, slots, idx, P);
      ops.push_back(std::move(op));
    }
  }
  schedule.options_json = nlohmann::json{{"T", T},
                                         {"groups", groups.size()},
                                         {"slots_s", slots.slot},
                                         {"easgd_alpha", alpha},
                                         {"easgd_beta", beta}}
                              .dump();
  return schedule;
}

}  // namespace weft
