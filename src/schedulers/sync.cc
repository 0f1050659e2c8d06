// The S-SGD strategies ssgd, wfbp, ddp and mgwfbp (docs/strategies.md §2): gradients averaged
// every iteration, one message at a time in backward order, the next forward
// waiting for all of them.

#include "schedulers/sync.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "schedulers/strategies.h"

namespace weft {
namespace {

// Layer l's gradient, whole: what in_order_allreduce sends of it.
Chunk whole_layer(const Profile& profile, int l) {
  return {.layer = l, .offset = 0, .length = profile.layers[static_cast<size_t>(l)].bytes()};
}

// PyTorch's defaults (torch/nn/parallel/distributed.py: bucket_cap_mb = 25;
// torch/csrc/distributed/c10d/reducer.hpp: kDefaultFirstBucketBytes = 1 MiB).
constexpr Bytes kDdpFirstBucketBytes = Bytes{1} << 20;
constexpr Bytes kDdpBucketBytes = Bytes{25} << 20;

}  // namespace

std::vector<int> layers_with_bytes(const Profile& profile) {
  std::vector<int> layers;
  for (int l = profile.size() - 1; l >= 0; --l) {
    if (profile.layers[static_cast<size_t>(l)].bytes() > 0) layers.push_back(l);
  }
  return layers;
}

// Note [DDP buckets layers, not tensors]
// --------------------------------------
// PyTorch's Reducer assigns *parameter tensors* to buckets
// (compute_bucket_assignment_by_size, reducer.cpp) and, after the first
// iteration, rebuilds the buckets in the order gradients became ready: reverse
// layer order, first bucket capped at 1 MiB so that communication starts early,
// 25 MiB after that. A profile knows layers, not their tensors, so we bucket whole
// layers with the same rule: a layer is never split across buckets, and a bucket
// may overshoot its cap by up to one layer where PyTorch would overshoot by one
// tensor (a conv's weight and bias can land in different PyTorch buckets, never in
// ours). The first bucket's cap is the one PyTorch uses once it has rebuilt the
// buckets, i.e. in the steady state the simulator reports.
LayerGroups ddp_buckets(const Profile& profile, Bytes first_cap, Bytes cap) {
  if (first_cap <= 0 || cap <= 0) {
    throw std::logic_error("ddp_buckets: caps must be > 0, got first_cap=" +
                           std::to_string(first_cap) + " cap=" + std::to_string(cap));
  }
  LayerGroups buckets;
  std::vector<int> open;
  Bytes open_bytes = 0;
  for (int l : layers_with_bytes(profile)) {
    open.push_back(l);
    open_bytes += profile.layers[static_cast<size_t>(l)].bytes();
    if (open_bytes >= (buckets.empty() ? first_cap : cap)) {
      buckets.push_back(std::move(open));
      open.clear();
      open_bytes = 0;
    }
  }
  if (!open.empty()) buckets.push_back(std::move(open));
  return buckets;
}

// Note [Exact merged-gradient WFBP]
// ---------------------------------
// mgwfbp sends contiguous runs of layers (in backward order) as single messages,
// one message at a time, and the next forward waits for all of them, so an
// iteration lasts fp + max(bp, F) where F is when the last message ends. Minimising
// F over all contiguous groupings is therefore the whole problem.
//
// Let v_0..v_{m-1} be the layers with bytes in backward order, r_k the end of v_k's
// backward, c(n) the time of one n-byte message, and f(i) the earliest finish of the
// last message over all groupings of the prefix v_0..v_{i-1} (f(0) = 0, the start
// of the backward pass). A grouping of v_0..v_k whose last message holds v_i..v_k
// ends at  max(F_i, r_k) + c(bytes(v_i..v_k)),  where F_i is when its grouping of
// the prefix v_0..v_{i-1} ends. That expression is non-decreasing in F_i, so
// swapping the prefix's grouping for an optimal one never makes it worse, and
//     f(k+1) = min over i <= k of  max(f(i), r_k) + c(bytes(v_i..v_k)),
// which gives the optimum over all 2^(m-1) groupings in O(m^2) evaluations of c.
// The argument uses nothing about c: it holds for the α–β ring model and for a
// fitted a + b·n alike. Layers without parameters can be left out: in a grouping of
// the whole model they add no bytes, and ending a message with one only makes it
// wait for a later backward.
//
// Shi et al. (INFOCOM'19) instead walk the layers once and merge layer l into the
// message of layer l-1 when l's communication would start later than l-1's backward
// ends minus one startup time, judged against a timeline in which the layers not yet
// visited are unmerged. That pairwise test is not exact: sync_test.cc keeps a
// profile on which the greedy rule is slower than this programme
// (MgwfbpTest.PublishedGreedyIsNotOptimal).
LayerGroups optimal_merge(const Profile& profile, const MessageTime& message_time) {
  const std::vector<int> v = layers_with_bytes(profile);
  const size_t m = v.size();
  const std::vector<Seconds> bp_end = backward_end_times(profile);

  std::vector<Payload> carried;  // what each layer adds to a message
  for (int l : v) carried.push_back(message_time.carried(whole_layer(profile, l)));

  std::vector<Seconds> finish(m + 1, 0.0);  // f(i) of the Note
  std::vector<size_t> first(m + 1, 0);      // the last message of f(k+1) starts at v[first[k+1]]
  for (size_t k = 0; k < m; ++k) {
    const Seconds ready = bp_end[static_cast<size_t>(v[k])];
    Seconds best = std::numeric_limits<Seconds>::infinity();
    Payload last;  // v_i..v_k
    for (size_t i = k + 1; i-- > 0;) {  // shortest last message first
      last += carried[i];
      const Seconds end = std::max(finish[i], ready) + message_time(last);
      if (end < best) {
        best = end;
        first[k + 1] = i;
      }
    }
    finish[k + 1] = best;
  }

  LayerGroups groups;
  for (size_t k = m; k > 0;) {
    const size_t i = first[k];
    groups.emplace_back(v.begin() + static_cast<std::ptrdiff_t>(i),
                        v.begin() + static_cast<std::ptrdiff_t>(k));
    k = i;
  }
  return {groups.rbegin(), groups.rend()};
}

Seconds merged_finish_time(const Profile& profile, const LayerGroups& groups,
                           const MessageTime& message_time) {
  const std::vector<Seconds> bp_end = backward_end_times(profile);
  Seconds channel_free = 0;
  for (const auto& group : groups) {
    Payload message;
    for (int l : group) message += message_time.carried(whole_layer(profile, l));
    const Seconds ready = bp_end[static_cast<size_t>(group.back())];
    channel_free = std::max(channel_free, ready) + message_time(message);
  }
  return channel_free;
}

Schedule in_order_allreduce(std::string strategy, const Profile& profile,
                            const LayerGroups& groups, std::string options_json) {
  Schedule schedule;
  schedule.strategy = std::move(strategy);
  schedule.period = 1;
  schedule.dispatch.kind = DispatchPolicy::Kind::kInOrder;
  schedule.options_json = std::move(options_json);
  std::vector<CommOp>& ops = schedule.iterations.emplace_back();
  for (const auto& group : groups) {
    CommOp op;
    op.kind = OpKind::kAverageGradients;
    op.priority = static_cast<int>(ops.size());
    op.needed_by = kBarrier;
    op.ready_after = std::numeric_limits<int>::max();
    for (int l : group) {
      op.chunks.push_back({.layer = l, .offset = 0,
                           .length = profile.layers[static_cast<size_t>(l)].bytes()});
      op.ready_after = std::min(op.ready_after, l);
    }
    if (op.chunks.empty()) {
      throw std::logic_error("in_order_allreduce(" + schedule.strategy + "): group " +
                             std::to_string(ops.size()) + " is empty");
    }
    ops.push_back(std::move(op));
  }
  return schedule;
}

std::string groups_json(const LayerGroups& groups) {
  return nlohmann::json{{"groups", groups}}.dump();
}

Schedule make_ssgd(const Profile& profile, const Cluster&, const StrategyOptions&) {
  std::vector<int> all = layers_with_bytes(profile);
  if (all.empty()) return in_order_allreduce("ssgd", profile, {}, "{}");
  Schedule schedule = in_order_allreduce("ssgd", profile, {std::move(all)}, "{}");
  schedule.iterations[0][0].ready_after = 0;  // after the whole backward, by definition
  return schedule;
}

Schedule make_wfbp(const Profile& profile, const Cluster&, const StrategyOptions&) {
  LayerGroups groups;
  for (int l : layers_with_bytes(profile)) groups.push_back({l});
  return in_order_allreduce("wfbp", profile, groups, "{}");
}

Schedule make_ddp(const Profile& profile, const Cluster&, const StrategyOptions&) {
  const LayerGroups buckets = ddp_buckets(profile, kDdpFirstBucketBytes, kDdpBucketBytes);
  const nlohmann::json options = {{"first_bucket_bytes", kDdpFirstBucketBytes},
                                  {"bucket_bytes", kDdpBucketBytes},
                                  {"groups", buckets}};
  return in_order_allreduce("ddp", profile, buckets, options.dump());
}

Schedule make_mgwfbp(const Profile& profile, const Cluster& cluster, const StrategyOptions& options) {
  // Notes [A collective's lateness in plans] (message_time.h) and [Plans price
  // the encoded message].
  const LayerGroups groups = optimal_merge(profile, collective_time(cluster, profile, options.compression, averaging_reach(options)));
  return in_order_allreduce("mgwfbp", profile, groups, groups_json(groups));
}

}  // namespace weft
