#include "plan/tuning.h"

#include <algorithm>
#include <string_view>

#include "schedulers/blocks.h"
#include "sim/simulator.h"

namespace weft {
namespace {

// Search bounds; see Note [Tuning by grid].
constexpr Bytes kSmallestPartition = Bytes{64} << 10;
constexpr Bytes kMostBlocks = 1024;

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
// bytescheduler's grid is the product of both (the best C depends on S_p): about a
// hundred simulations of one model, each a few milliseconds. The defaults are
// always candidates and are tried first, so tuning never returns something slower
// than the defaults in the model.
StrategyOptions tune(const StrategyInfo& strategy, const Profile& profile, const Cluster& cluster,
                     StrategyOptions base) {
  const auto row = std::find_if(std::begin(kTunables), std::end(kTunables),
                                [&](const Tunables& t) { return t.strategy == strategy.name; });
  if (row == std::end(kTunables)) return base;

  std::vector<Bytes> partitions;
  if (row->partition && !base.partition) {
    partitions = partition_candidates(profile);
    std::stable_partition(partitions.begin(), partitions.end(),
                          [](Bytes sp) { return sp == kDefaultPartition; });
  } else {
    partitions = {base.partition.value_or(kDefaultPartition)};
  }

  StrategyOptions best = base;
  Seconds best_time = 0;
  bool have_best = false;
  for (Bytes sp : partitions) {
    std::vector<Bytes> credits = {0};  // unused by strategies without a credit
    if (row->credit && !base.credit) {
      credits = credit_candidates(profile, sp);
      if (sp == kDefaultPartition) {
        credits.insert(credits.begin(), kDefaultCredit);  // defaults first
      }
    } else if (row->credit) {
      credits = {*base.credit};
    }
    for (Bytes credit : credits) {
      StrategyOptions candidate = base;
      if (row->partition) candidate.partition = sp;
      if (row->credit) candidate.credit = credit;
      const Seconds time =
          simulate(strategy.make(profile, cluster, candidate), profile, cluster).summary.iteration;
      if (!have_best || time < best_time * (1 - kTieMargin)) {
        best = candidate;
        best_time = time;
        have_best = true;
      }
    }
  }
  return best;
}

}  // namespace weft
