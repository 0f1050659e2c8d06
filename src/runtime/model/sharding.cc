#include "runtime/model/sharding.h"

#include <numeric>
#include <stdexcept>
#include <string>

namespace weft::runtime {
namespace {

// SplitMix64 (Steele, Lea & Flood 2014): a fully specified 64-bit generator, so
// the permutation does not depend on the standard library's distributions.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t state) : state_(state) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound) by Lemire's multiply-shift (bias < bound / 2^64,
  // negligible for datasets of any size we read).
  std::uint64_t below(std::uint64_t bound) {
    return static_cast<std::uint64_t>((static_cast<unsigned __int128>(next()) * bound) >> 64);
  }

 private:
  std::uint64_t state_;
};

}  // namespace

std::vector<std::int64_t> epoch_permutation(std::int64_t n, std::uint64_t seed, std::int64_t epoch) {
  if (n < 0) throw std::logic_error("epoch_permutation: n = " + std::to_string(n) + " < 0");
  std::vector<std::int64_t> perm(static_cast<std::size_t>(n));
  std::iota(perm.begin(), perm.end(), std::int64_t{0});
  // Seed and epoch are mixed through one generator step each, so that (seed, e)
  // and (seed + 1, e - 1) do not share a stream.
  SplitMix64 mixer(seed);
  SplitMix64 rng(mixer.next() ^ SplitMix64(static_cast<std::uint64_t>(epoch)).next());
  for (std::int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(i) + 1));
    std::swap(perm[i], perm[j]);
  }
  return perm;
}

std::int64_t steps_per_epoch(std::int64_t n, const Shard& shard) {
  return n / (static_cast<std::int64_t>(shard.world) * shard.batch);
}

std::vector<std::int64_t> shard_positions(const Shard& shard, std::int64_t step) {
  std::vector<std::int64_t> positions(static_cast<std::size_t>(shard.batch));
  const std::int64_t world = shard.world;
  for (std::int64_t j = 0; j < shard.batch; ++j) {
    positions[j] = shard.rank + world * (step * shard.batch + j);
  }
  return positions;
}

}  // namespace weft::runtime
