// libFuzzer target: a schedule (`weft simulate --schedule`). A schedule that
// parses and fits a small model is simulated for a few iterations, so that a
// schedule that makes the simulator crash or spin is found too.
#include <stdexcept>

#include "fuzz/fuzz_input.h"
#include "schedule/schedule.h"
#include "sim/simulator.h"

namespace {

weft::Profile small_model() {
  weft::Profile p{.model = "fuzz"};
  for (int l = 0; l < 4; ++l) {
    p.layers.push_back({.name = "l" + std::to_string(l), .params = 1000 * (l + 1), .fp = 1e-3, .bp = 2e-3});
  }
  return p;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const weft::Profile profile = small_model();
  return weft::fuzz::refuse_or_read(data, size, [](std::string_view text) {
    const weft::Schedule s = weft::parse_schedule(text, "fuzz.json");
    const bool ps = !s.iterations.empty() && !s.iterations[0].empty() &&
                    s.iterations[0][0].kind == weft::OpKind::kParameterServer;
    weft::Cluster cluster{.workers = 2, .bandwidth = 1e8, .latency = 1e-5};
    if (ps) {
      cluster.arch = weft::Arch::kParameterServer;
      cluster.servers = 2;
    }
    try {
      weft::validate(s, profile, cluster.workers);
    } catch (const std::logic_error&) {
      return;  // `weft simulate` refuses it: a UsageError naming the schedule
    }
    try {
      weft::simulate(s, profile, cluster, {.iterations = 3});
    } catch (const std::logic_error&) {
      // A deadlocking or mismatched schedule is named, not run: what the CLI says.
    }
  });
}
