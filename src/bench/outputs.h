// Reading what the other weft commands write, as far as the bench needs it: the
// plan (`weft plan --json`, docs/formats.md §6), one simulation's summary (`weft simulate
// --json`) and the all-reduce fit (`weft profile --network --out`,
// runtime/measure/network_profile.h).
//
// Thread-safety: pure functions.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "units/units.h"

namespace weft::bench {

// One strategy of a plan.
struct Prediction {
  Seconds iteration = 0;   // iteration_s
  Seconds compute = 0;     // compute_s: the profile's forward + backward
  std::optional<Seconds> slowed_compute;  // slowed_compute_s: as simulated, with interference
  int period = 1;
  double speedup_vs_wfbp = 0;
  nlohmann::json options = nlohmann::json::object();
};

// Strategy name → its prediction. A row averaging by sites (its "hierarchical"
// and "site_every" fields, as a plan with sites writes them) is named as the
// bench names its runs: "flsgd@hierarchical", "flsgd@site-every:1",
// "flsgd@hierarchical+site-every:1", so that it never takes the place of the
// flat row of the same strategy. THROWS UsageError naming `origin` and the field
// when the text is not a plan object with strategies[].name/period/iteration_s/
// compute_s/speedup_vs_wfbp.
std::map<std::string, Prediction> parse_plan(std::string_view text, std::string_view origin);

// The simulated iteration time of `weft simulate --json` (iteration_s). THROWS
// UsageError naming `origin` unless the text is an object with that number.
Seconds parse_simulated_iteration(std::string_view text, std::string_view origin);

struct NetworkFit {
  Seconds a = 0;  // a_s
  double b = 0;   // b_s_per_byte
};

// THROWS UsageError naming `origin` unless the text is an object with numbers a_s
// and b_s_per_byte.
NetworkFit parse_network_fit(std::string_view text, std::string_view origin);

}  // namespace weft::bench
