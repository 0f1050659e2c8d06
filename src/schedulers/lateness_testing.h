// For the tests of Note [A collective's lateness in plans] (message_time.h):
// four layers whose backward (5 ms) about hides each one's all-reduce (4.8 ms on
// 4 workers at 10 Gbit/s, no start-up), once with every collective 6 ms late
// (skew 6 ms, the same after a queue) and once prompt.
#pragma once

#include <string>

#include "cost/cluster.h"
#include "profile/profile.h"

namespace weft {

struct LatenessCase {
  Profile profile;
  Cluster late{.workers = 4, .bandwidth = 1.25e9, .latency = 0};
  Cluster prompt;  // `late` without its lateness
};

inline LatenessCase lateness_case() {
  LatenessCase c;
  c.profile.model = "late";
  for (int l = 0; l < 4; ++l) {
    c.profile.layers.push_back({.name = "l" + std::to_string(l), .params = 1'000'000, .fp = 2e-3, .bp = 5e-3});
  }
  c.prompt = c.late;
  c.late.host.skew = c.late.host.back_to_back_skew = 6e-3;
  return c;
}

}  // namespace weft
