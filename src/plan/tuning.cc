#include "plan/tuning.h"

#include <algorithm>
#include <map>
#include <utility>
#include <string_view>

#include "schedulers/blocks.h"
#include "sim/simulator.h"

namespace weft {
namespace {

// Search bounds; see Note [Tuning by grid].
constexpr Bytes kSmallestPartition = Bytes{64} << 10;
constexpr Bytes kMostBlocks = 1024;
constexpr int kMostRounds = 8;  // of the alternating search of S_p and C

// A relative improvement smaller than this is a tie (float noise, not a better
// schedule), and ties keep the earlier candidate.
constexpr double kTieMargin = 1e-9;

// Which options a strategy reads. Strategies not listed have nothing to tune.
struct Tunables {
  std::string_view strategy;
  bool partition;
  bool credit;
};
constexpr Tunables kTunables[] = {
    {"bytescheduler", true, true},
    {"dcredit", true, false},
};

Bytes block_count(const Profile& profile, Bytes partition) {
  Bytes count = 0;
  for (const Layer& layer : profile.layers) count += (layer.bytes() + partition - 1) / partition;
  return count;
}

Bytes largest_layer(const Profile& profile) {
  Bytes largest = 0;
  for (const Layer& layer : profile.layers) largest = std::max(largest, layer.bytes());
  return largest;
}

}  // namespace

std::vector<Bytes> partition_candidates(const Profile& profile) {
  const Bytes largest = largest_layer(profile);
  std::vector<Bytes> out;
  for (Bytes sp = kSmallestPartition;; sp *= 2) {
    if (block_count(profile, sp) <= kMostBlocks || sp == kDefaultPartition) out.push_back(sp);
    if (sp >= largest && sp >= kDefaultPartition) break;
  }
  return out;
}

std::vector<Bytes> credit_candidates(const Profile& profile, Bytes partition) {
  const Bytes total = profile.total_bytes();
  std::vector<Bytes> out;
  for (Bytes credit = partition;; credit *= 2) {
    out.push_back(credit);
    if (credit >= total) break;
  }
  return out;
}

// Note [Tuning by grid]
// ---------------------
// The iteration time of bytescheduler and dcredit as a function of S_p (and C) is
// piecewise constant-and-smooth with jumps wherever a layer gains a block or a
// window boundary moves past an arrival, and it is not unimodal: a golden-section
// search would stop in whichever dip it brackets first. The useful range is small
// in orders of magnitude, so we simulate a grid of powers of two and take the best:
// S_p from 64 KiB (below that the per-message startup dominates on every network we
// model) to the first power of two that holds the largest layer in one block (every
// larger S_p gives the same blocks, i.e. no partitioning), skipping sizes that cut
// the model into more than kMostBlocks blocks, which only add startups and make
// each simulation slower; C from one block in flight to the whole model in flight.
// For bytescheduler the best C depends on S_p and the other way round, so we
// alternate: the best C for the current S_p, then the best S_p for that C, until
// neither moves (at most kMostRounds rounds). That costs about a third of the
// simulations of the full product grid, and on the zoo models at 100 Mbit/s to
// 10 Gbit/s it finds the grid's optimum or comes within 1% of it (0.7% for
// resnet50 at 10 Gbit/s and 8 workers). The search
// starts from the defaults and only a strictly faster candidate replaces the
// current one, so tuning never returns something slower than the defaults in the
// model.
StrategyOptions tune(const StrategyInfo& strategy, const Profile& profile, const Cluster& cluster,
                     StrategyOptions base) {
  const auto row = std::find_if(std::begin(kTunables), std::end(kTunables),
                                [&](const Tunables& t) { return t.strategy == strategy.name; });
  if (row == std::end(kTunables)) return base;
  const bool free_partition = row->partition && !base.partition;
  const bool free_credit = row->credit && !base.credit;

  StrategyOptions best = base;
  if (row->partition) best.partition = base.partition.value_or(kDefaultPartition);
  if (row->credit) best.credit = base.credit.value_or(kDefaultCredit);
  // Each candidate is simulated once: the alternating search meets the same
  // (S_p, C) again in every round, and a simulation of a large model is the
  // whole cost of tuning.
  std::map<std::pair<Bytes, Bytes>, Seconds> simulated;
  auto time_of = [&](const StrategyOptions& options) {
    const std::pair key{options.partition.value_or(0), options.credit.value_or(0)};
    const auto [it, fresh] = simulated.try_emplace(key, 0);
    if (fresh) it->second = simulate(strategy.make(profile, cluster, options), profile, cluster).summary.iteration;
    return it->second;
  };
  Seconds best_time = time_of(best);
  // Replaces `best` by the fastest of `candidates` if it is faster (not a tie).
  auto try_all = [&](const std::vector<StrategyOptions>& candidates) {
    bool improved = false;
    for (const StrategyOptions& candidate : candidates) {
      const Seconds time = time_of(candidate);
      if (time < best_time * (1 - kTieMargin)) {
        best = candidate;
        best_time = time;
        improved = true;
      }
    }
    return improved;
  };
  auto with_partitions = [&] {
    std::vector<StrategyOptions> out;
    for (Bytes sp : partition_candidates(profile)) {
      out.push_back(best);
      out.back().partition = sp;
    }
    return out;
  };
  auto with_credits = [&] {
    std::vector<StrategyOptions> out;
    for (Bytes credit : credit_candidates(profile, *best.partition)) {
      out.push_back(best);
      out.back().credit = credit;
    }
    return out;
  };

  if (free_partition && free_credit) {
    // Alternate: the best C depends on S_p and the best S_p on C.
    for (int round = 0; round < kMostRounds; ++round) {
      const bool credit_moved = try_all(with_credits());
      const bool partition_moved = try_all(with_partitions());
      if (!credit_moved && !partition_moved) break;
    }
  } else if (free_partition) {
    try_all(with_partitions());
  } else if (free_credit) {
    try_all(with_credits());
  }
  return best;
}

}  // namespace weft
