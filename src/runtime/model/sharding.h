// Which training examples each worker reads (docs/runtime.md §3): the per-epoch permutation
// and the rank's shard of it. Kept apart from LibTorch so that the rule is plain
// integers and can be tested exhaustively.
//
// Note [Sharding]
// Every rank computes the same permutation of the n training examples for epoch e
// from (seed, e) alone. Rank r of W reads permutation positions r, r+W, r+2W, ...;
// its step s (batch of B) is positions r + W·(s·B + j), j = 0..B-1. Hence step s of
// all W ranks together is exactly positions s·W·B .. (s+1)·W·B − 1, which is step s
// of one process reading with rank 0 of 1 and batch W·B: row i of that combined
// batch is row i / W of rank i % W (the ranks' rows interleaved). Each epoch has
// floor(n / (W·B)) steps for every rank; the last n mod (W·B) positions of the
// permutation are skipped, so every rank takes the same number of steps.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

namespace weft::runtime {

// A uniformly random permutation of 0..n-1, a function of (n, seed, epoch) only,
// identical on every platform (own generator and Fisher–Yates, no std::shuffle).
// REQUIRES: n >= 0.
std::vector<std::int64_t> epoch_permutation(std::int64_t n, std::uint64_t seed, std::int64_t epoch);

struct Shard {
  int rank = 0;
  int world = 1;
  int batch = 1;  // per rank
};

// Steps per epoch for every rank: floor(n / (world·batch)).
std::int64_t steps_per_epoch(std::int64_t n, const Shard& shard);

// The permutation positions (not the example indices) that `shard.rank` reads in
// step `step` of an epoch, in batch-row order. REQUIRES 0 <= step < steps_per_epoch.
std::vector<std::int64_t> shard_positions(const Shard& shard, std::int64_t step);

}  // namespace weft::runtime
