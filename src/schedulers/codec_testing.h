// For the tests of Note [Plans price the encoded message] (message_time.h):
// profiles whose layers carry their tensors' shapes, so that the low-rank codecs
// factorise them, and the float32 plans a codec used to get.
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>
#include <string>

#include "cost/cluster.h"
#include "profile/profile.h"
#include "schedule/schedule.h"

namespace weft {

// 20 layers of a 64×96 matrix and its bias (24.8 KB in float32), on 4 workers at
// 100 Mbit/s with a 1 ms latency (each collective starts up in 6 ms). A float32
// message of one layer, 9 ms, hides behind the next layer's 10 ms backward, so
// float32 plans send a message a layer; powersgd:2 sends 1.4 KB a layer but pays
// two start-ups (12 ms), more than a backward: merging pays.
struct SmallMatricesCase {
  Profile profile;
  Cluster cluster{.workers = 4, .bandwidth = 12.5e6, .latency = 1e-3};
};

inline SmallMatricesCase small_matrices_case() {
  SmallMatricesCase c;
  c.profile.model = "small-matrices";
  for (int l = 0; l < 20; ++l) {
    c.profile.layers.push_back({.name = "fc" + std::to_string(l), .params = 64 * 96 + 64, .fp = 3e-3, .bp = 10e-3,
                                .shapes = {{64, 96}, {64}}});
  }
  return c;
}

// 1 to `max_layers` layers, each a matrix (rows and cols from 1 to 512) and a
// bias, or a norm's two vectors; backward times on the scale of one encoded
// message's start-up, `startup`, so that merging decisions go both ways.
inline Profile random_shaped_profile(std::mt19937& rng, int max_layers, Seconds startup) {
  std::uniform_int_distribution<int> layers(1, max_layers), side(1, 512);
  std::uniform_real_distribution<double> scale(0.05, 3.0);
  std::bernoulli_distribution norm(0.2);
  Profile p{.model = "random-shaped"};
  const int n = layers(rng);
  for (int l = 0; l < n; ++l) {
    Layer layer{.name = "l" + std::to_string(l)};
    const std::int64_t rows = side(rng), cols = side(rng);
    layer.shapes = norm(rng) ? std::vector<std::vector<std::int64_t>>{{rows}, {rows}}
                             : std::vector<std::vector<std::int64_t>>{{rows, cols}, {rows}};
    for (const auto& shape : layer.shapes) {
      std::int64_t k = 1;
      for (std::int64_t d : shape) k *= d;
      layer.params += k;
    }
    layer.bp = startup * scale(rng);
    layer.fp = layer.bp / 2;
    p.layers.push_back(std::move(layer));
  }
  return p;
}

// `schedule` with every operation in `encoding`: a plan made for float32 sent
// compressed, as StrategyInfo::make stamped it before the schedulers priced the
// encoded message.
inline Schedule stamped(Schedule schedule, const Encoding& encoding) {
  for (auto& ops : schedule.iterations) {
    for (CommOp& op : ops) op.encoding = encoding;
  }
  return schedule;
}

}  // namespace weft
