#include "bench/outputs.h"

#include <fmt/format.h>

namespace weft::bench {
namespace {

using nlohmann::json;

json parse_object(std::string_view text, std::string_view origin, std::string_view what) {
  try {
    json j = json::parse(text);
    if (!j.is_object()) throw UsageError(fmt::format("{}: expected {} as a JSON object", origin, what));
    return j;
  } catch (const json::parse_error& e) {
    throw UsageError(fmt::format("{}: expected {} as a JSON object: {}", origin, what, e.what()));
  }
}

}  // namespace

std::map<std::string, Prediction> parse_plan(std::string_view text, std::string_view origin) {
  const json plan = parse_object(text, origin, "the output of `weft plan --json`");
  std::map<std::string, Prediction> predictions;
  try {
    for (const json& s : plan.at("strategies")) {
      predictions[s.at("name").get<std::string>()] = {
          .iteration = s.at("iteration_s").get<double>(),
          .compute = s.at("compute_s").get<double>(),
          .slowed_compute = s.contains("slowed_compute_s") ? std::optional(s.at("slowed_compute_s").get<double>())
                                                           : std::nullopt,
          .period = s.at("period").get<int>(),
          .speedup_vs_wfbp = s.at("speedup_vs_wfbp").get<double>(),
          .options = s.contains("options") ? s.at("options") : json::object(),
      };
    }
  } catch (const json::exception& e) {
    throw UsageError(fmt::format("{}: not a plan (SPEC §6: strategies[] with name, period, iteration_s, "
                                 "compute_s, speedup_vs_wfbp): {}",
                                 origin, e.what()));
  }
  return predictions;
}

Seconds parse_simulated_iteration(std::string_view text, std::string_view origin) {
  const json summary = parse_object(text, origin, "the output of `weft simulate --json`");
  try {
    return summary.at("iteration_s").get<double>();
  } catch (const json::exception& e) {
    throw UsageError(fmt::format("{}: expected a number iteration_s: {}", origin, e.what()));
  }
}

NetworkFit parse_network_fit(std::string_view text, std::string_view origin) {
  const json fit = parse_object(text, origin, "an all-reduce fit from `weft profile --network --out`");
  try {
    return {.a = fit.at("a_s").get<double>(), .b = fit.at("b_s_per_byte").get<double>()};
  } catch (const json::exception& e) {
    throw UsageError(fmt::format("{}: expected numbers a_s and b_s_per_byte: {}", origin, e.what()));
  }
}

}  // namespace weft::bench
