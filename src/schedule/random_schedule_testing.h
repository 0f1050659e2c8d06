// Random valid schedules, for property tests of whatever reads a Schedule (the
// index, the simulator).
//
// Thread-safety: pure functions of their random generator.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "profile/profile.h"
#include "schedule/schedule.h"

namespace weft::test_support {

// A model of 1..max_layers layers of 1..max_params float32 parameters each.
inline Profile random_model(std::mt19937& rng, int max_layers = 8, std::int64_t max_params = 200'000) {
  Profile p;
  p.model = "random";
  const int layers = std::uniform_int_distribution(1, max_layers)(rng);
  for (int l = 0; l < layers; ++l) {
    Layer layer;
    layer.name = "layer" + std::to_string(l);
    layer.params = std::uniform_int_distribution<std::int64_t>(1, max_params)(rng);
    layer.fp = std::uniform_real_distribution(1e-5, 2e-3)(rng);
    layer.bp = std::uniform_real_distribution(1e-5, 4e-3)(rng);
    p.layers.push_back(layer);
  }
  return p;
}

// A random schedule that validate() accepts for `profile` and `workers`: a period
// of 1..3 iterations; either gradients (every layer in every iteration) or
// parameters (each iteration a random set of layers, all of them over the period);
// each layer cut into 1..3 whole-element chunks, the chunks shuffled and fused into
// operations of 1..3; ready_after anywhere from 0 to the smallest layer carried;
// needed_by kBarrier or any layer; random priorities, a random dispatch policy and
// small release offsets (by worker under in-order dispatch).
inline Schedule random_valid_schedule(const Profile& profile, int workers, std::mt19937& rng) {
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const int layers = profile.size();
  Schedule s{.strategy = "random", .period = uniform(1, 3), .options_json = "{}"};
  const bool gradients = uniform(0, 1) == 0;
  switch (uniform(0, 2)) {
    case 0: s.dispatch = {.kind = DispatchPolicy::Kind::kInOrder}; break;
    case 1: s.dispatch = {.kind = DispatchPolicy::Kind::kCredit, .credit = uniform(4, 800'000)}; break;
    default:
      s.dispatch.kind = DispatchPolicy::Kind::kWindows;
      for (int k = uniform(1, 4); k > 0; --k) s.dispatch.windows.push_back(uniform(4, 800'000));
  }
  for (int it = 0; it < s.period; ++it) {
    std::vector<Chunk> chunks;
    for (int l = 0; l < layers; ++l) {
      const bool carried = gradients || it == l % s.period || uniform(0, 2) == 0;
      if (!carried) continue;
      const std::int64_t elements = profile.layers[static_cast<size_t>(l)].params;
      const int pieces = static_cast<int>(std::min<std::int64_t>(uniform(1, 3), elements));
      std::set<std::int64_t> cuts{elements};
      while (static_cast<int>(cuts.size()) < pieces) cuts.insert(uniform(1, static_cast<int>(elements) - 1));
      std::int64_t begin = 0;
      for (std::int64_t end : cuts) {
        chunks.push_back({.layer = l, .offset = begin * 4, .length = (end - begin) * 4});
        begin = end;
      }
    }
    std::ranges::shuffle(chunks, rng);
    auto& ops = s.iterations.emplace_back();
    for (size_t i = 0; i < chunks.size();) {
      CommOp op{.kind = gradients ? OpKind::kAverageGradients : OpKind::kAverageParameters};
      const size_t n = std::min<size_t>(static_cast<size_t>(uniform(1, 3)), chunks.size() - i);
      op.chunks.assign(chunks.begin() + static_cast<std::ptrdiff_t>(i),
                       chunks.begin() + static_cast<std::ptrdiff_t>(i + n));
      i += n;
      const int lowest = std::ranges::min(op.chunks, {}, &Chunk::layer).layer;
      op.ready_after = uniform(0, lowest);
      op.needed_by = uniform(0, 3) == 0 ? kBarrier : uniform(0, layers - 1);
      op.priority = uniform(0, 4);
      if (uniform(0, 3) == 0) {  // by worker only where that decides nothing (validate())
        const Seconds same = uniform(0, 2) * 1e-5;
        for (int w = 0; w < workers; ++w) {
          op.release_offset.push_back(decided_by_timing(s.dispatch) ? same : uniform(0, 2) * 1e-5);
        }
      }
      ops.push_back(std::move(op));
    }
  }
  return s;
}

}  // namespace weft::test_support
