#include "bench/outputs.h"

#include <fmt/format.h>

#include "units/json_reader.h"
#include "units/limits.h"

namespace weft::bench {

using nlohmann::json;

std::map<std::string, Prediction> parse_plan(std::string_view text, std::string_view origin) {
  constexpr std::string_view kWhat = "the output of `weft plan --json` (docs/formats.md §6)";
  const json plan = parse_json(text, origin, kWhat);
  std::map<std::string, Prediction> predictions;
  JsonReader(plan, "", origin, kWhat).each("strategies", [&](const JsonReader& s) {
    std::string name = s.string("name");
    const bool hierarchical = s.has("hierarchical") && s.get("hierarchical").is_boolean() &&
                              s.get("hierarchical").get<bool>();
    const std::int64_t site_every = s.has("site_every") ? s.integer("site_every") : 0;
    if (hierarchical || site_every > 0) {
      name += "@";
      if (hierarchical) name += site_every > 0 ? "hierarchical+" : "hierarchical";
      if (site_every > 0) name += fmt::format("site-every:{}", site_every);
    }
    predictions[name] = {
        .iteration = s.number("iteration_s"),
        .compute = s.number("compute_s"),
        .slowed_compute = s.has("slowed_compute_s") ? std::optional(s.number("slowed_compute_s")) : std::nullopt,
        .period = static_cast<int>(s.integer("period")),
        .speedup_vs_wfbp = s.number("speedup_vs_wfbp"),
        .options = s.has("options") ? s.get("options") : json::object(),
    };
  });
  return predictions;
}

Seconds parse_simulated_iteration(std::string_view text, std::string_view origin) {
  constexpr std::string_view kWhat = "the output of `weft simulate --json`";
  return JsonReader(parse_json(text, origin, kWhat), "", origin, kWhat).number("iteration_s");
}

NetworkFit parse_network_fit(std::string_view text, std::string_view origin) {
  constexpr std::string_view kWhat = "an all-reduce fit from `weft profile --network --out`";
  const json fit = parse_json(text, origin, kWhat);
  const JsonReader reader(fit, "", origin, kWhat);
  const NetworkFit out{.a = reader.number("a_s"), .b = reader.number("b_s_per_byte")};
  if (!(out.a >= 0 && out.a <= limits::kMaxSeconds)) {
    reader.reject("a_s", fmt::format("seconds in [0, {}]", limits::kMaxSeconds), reader.get("a_s"));
  }
  if (!(out.b > 0 && out.b <= limits::kMaxSeconds)) {
    reader.reject("b_s_per_byte", "seconds per byte > 0", reader.get("b_s_per_byte"));
  }
  return out;
}

}  // namespace weft::bench
