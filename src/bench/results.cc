#include "bench/results.h"

#include <limits>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

#include "units/files.h"
#include "units/json_reader.h"
#include "units/limits.h"

namespace weft::bench {
namespace {

using nlohmann::json;

json optional_number(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

const char* to_string(Mode mode) { return mode == Mode::kAccuracy ? "accuracy" : "iterations"; }

json to_json(const AccuracyPoint& p) {
  json point{{"iter", p.iter}, {"wall_s", p.wall}, {"training_s", p.training}, {"accuracy", p.accuracy}};
  if (p.own_accuracy) point["own_accuracy"] = *p.own_accuracy;
  return point;
}

json to_json(const RunResult& r) {
  json accuracy = json::array();
  for (const AccuracyPoint& p : r.accuracy) accuracy.push_back(to_json(p));
  return {{"strategy", r.strategy},
          {"kind", r.kind},
          {"link", r.link},
          {"bandwidth_Bps", r.bandwidth},
          {"workers", r.workers},
          {"period", r.period},
          {"measured_iteration_s", r.measured_iteration},
          {"measured_iteration_runs_s", r.measured_iterations},
          {"predicted_iteration_s", optional_number(r.predicted_iteration)},
          {"error_pct", optional_number(r.error_pct())},
          {"measured_compute_s", optional_number(r.measured_compute)},
          {"predicted_compute_s", optional_number(r.predicted_compute)},
          {"predicted_slowed_compute_s", optional_number(r.predicted_slowed_compute)},
          {"predicted_on_own_compute_s", optional_number(r.predicted_on_own_compute)},
          {"retimed_compute_s", optional_number(r.retimed_compute)},
          {"predicted_retimed_s", optional_number(r.predicted_retimed)},
          {"speedup_vs_wfbp", optional_number(r.speedup_vs_wfbp)},
          {"predicted_speedup_vs_wfbp", optional_number(r.predicted_speedup_vs_wfbp)},
          {"steady_iterations", r.steady_iterations},
          {"steps", r.steps},
          {"final_loss", r.final_loss},
          {"options", r.options},
          {"metrics", r.metrics},
          {"accuracy", accuracy},
          {"time_to_accuracy_s", optional_number(r.time_to_accuracy)},
          {"training_time_to_accuracy_s", optional_number(r.training_time_to_accuracy)},
          {"time_to_accuracy_runs_s", [&] {
             json runs = json::array();
             for (const auto& t : r.times_to_accuracy) runs.push_back(optional_number(t));
             return runs;
           }()},
          {"seed", r.seed ? json(*r.seed) : json(nullptr)}};
}

// What a bench.json is, for messages about a missing field.
constexpr std::string_view kWhat = "a `weft bench` results file, schema weft-bench/2";
static_assert(kWhat.ends_with(kResultsSchema));

using Reader = JsonReader;
constexpr std::int64_t kInt = std::numeric_limits<int>::max();
constexpr std::int64_t kInt64 = std::numeric_limits<std::int64_t>::max();

Mode parse_mode(const std::string& text, std::string_view origin) {
  if (text == "iterations") return Mode::kIterations;
  if (text == "accuracy") return Mode::kAccuracy;
  throw UsageError(fmt::format("{}: mode is \"{}\", expected \"iterations\" or \"accuracy\"", origin, text));
}

// `v1`: Note [Bench schema versions], results.h.
RunResult read_run(const Reader& r, bool v1) {
  // A field a version-1 file may lack, which version 2 always holds.
  const auto added_in_v1 = [&](const std::string& name) {
    return v1 ? r.newer_number(name) : r.optional_number(name);
  };
  RunResult run{
      .strategy = r.string("strategy"),
      .kind = r.string("kind"),
      .link = r.string("link"),
      .bandwidth = r.number("bandwidth_Bps"),
      .workers = static_cast<int>(r.integer("workers", 1, limits::kMaxProcesses)),
      .period = static_cast<int>(r.integer("period", 1, limits::kMaxPeriod)),
      .measured_iteration = r.number("measured_iteration_s"),
      .predicted_iteration = r.optional_number("predicted_iteration_s"),
      .measured_compute = added_in_v1("measured_compute_s"),
      .predicted_compute = added_in_v1("predicted_compute_s"),
      .predicted_slowed_compute = added_in_v1("predicted_slowed_compute_s"),
      .predicted_on_own_compute = added_in_v1("predicted_on_own_compute_s"),
      .retimed_compute = added_in_v1("retimed_compute_s"),
      .predicted_retimed = added_in_v1("predicted_retimed_s"),
      .speedup_vs_wfbp = r.optional_number("speedup_vs_wfbp"),
      .predicted_speedup_vs_wfbp = r.optional_number("predicted_speedup_vs_wfbp"),
      .steady_iterations = static_cast<int>(r.integer("steady_iterations", 0, kInt)),
      .steps = r.integer("steps", 0, kInt64),
      .final_loss = r.number("final_loss"),
      .options = r.get("options"),
      .metrics = r.string("metrics"),
      .accuracy = {},
      .time_to_accuracy = r.optional_number("time_to_accuracy_s"),
      .training_time_to_accuracy = r.optional_number("training_time_to_accuracy_s"),
  };
  r.optional_number("error_pct");  // derived; present and typed, not stored
  run.measured_iterations = r.numbers("measured_iteration_runs_s");
  if (r.has("time_to_accuracy_runs_s")) {  // newer fields (results.h)
    const std::size_t n = r.array("time_to_accuracy_runs_s").size();
    for (std::size_t i = 0; i < n; ++i) {
      const json& t = r.array("time_to_accuracy_runs_s")[i];
      if (!t.is_null() && !t.is_number()) {
        throw UsageError(fmt::format("{}: {} is {}, expected a number or null", r.element("time_to_accuracy_runs_s", i),
                                     t.dump().substr(0, 40), t.type_name()));
      }
      run.times_to_accuracy.push_back(t.is_null() ? std::nullopt : std::optional<Seconds>(t.get<double>()));
    }
  }
  if (r.has("seed") && !r.get("seed").is_null()) {
    run.seed = static_cast<std::uint64_t>(r.integer("seed", 0, std::numeric_limits<std::int64_t>::max()));
  }
  r.each("accuracy", [&](const Reader& p) {
    run.accuracy.push_back({.iter = p.integer("iter"),
                            .wall = p.number("wall_s"),
                            .training = p.number("training_s"),
                            .accuracy = p.number("accuracy"),
                            .own_accuracy = p.newer_number("own_accuracy")});
  });
  return run;
}

}  // namespace

namespace {

std::optional<double> error_against(Seconds measured, const std::optional<Seconds>& predicted) {
  if (!predicted || !(*predicted > 0)) return std::nullopt;
  return 100 * (measured - *predicted) / *predicted;
}

}  // namespace

std::optional<double> RunResult::error_pct() const { return error_against(measured_iteration, predicted_iteration); }

std::optional<double> RunResult::own_compute_error_pct() const {
  return error_against(measured_iteration, predicted_on_own_compute);
}

std::optional<double> RunResult::retimed_error_pct() const {
  return error_against(measured_iteration, predicted_retimed);
}

json to_json(const BenchResults& results) {
  json links = json::array();
  for (const LinkResult& l : results.links) {
    links.push_back({{"link", l.link}, {"bandwidth_Bps", l.bandwidth}, {"a_s", l.a}, {"b_s_per_byte", l.b},
                     {"network", l.network}, {"profile", l.profile}});
    if (!l.host.empty()) links.back()["host"] = l.host;
  }
  json runs = json::array();
  for (const RunResult& r : results.runs) runs.push_back(to_json(r));
  json failed = json::array();
  for (const FailedRun& f : results.failed) {
    failed.push_back({{"strategy", f.strategy}, {"link", f.link}, {"message", f.message}, {"log", f.log}});
  }
  json skipped = json::array();
  for (const SkippedStrategy& s : results.skipped) skipped.push_back({{"strategy", s.strategy}, {"reason", s.reason}});
  json traces = nullptr;
  if (results.traces) {
    traces = {{"strategy", results.traces->strategy},
              {"link", results.traces->link},
              {"predicted", results.traces->predicted},
              {"measured", results.traces->measured}};
  }
  return {{"schema", kResultsSchema},
          {"model", results.model},
          {"parameters", results.parameters},
          {"workers", results.workers},
          {"batch", results.batch},
          {"lr", results.lr},
          {"optimizer", results.optimizer},
          {"H", results.H},
          {"outer_optimizer", results.outer},
          {"steps", results.steps},
          {"warmup", results.warmup},
          {"mode", to_string(results.mode)},
          {"target_accuracy", results.mode == Mode::kAccuracy ? json(results.target_accuracy) : json(nullptr)},
          {"emulated", results.emulated},
          {"mtu_B", results.emulated ? json(results.mtu) : json(nullptr)},
          {"cores", to_string(results.cores)},
          {"links", links},
          {"profile", results.profile},
          {"runs", runs},
          {"failed", failed},
          {"skipped", skipped},
          {"traces", traces}};
}

BenchResults results_from_json(const json& document, std::string_view origin) {
  const Reader top(document, "", origin, kWhat);
  const std::string schema = top.string("schema");
  if (schema != kResultsSchema && schema != kResultsSchemaV1) {
    throw UsageError(fmt::format("{}: schema is \"{}\", which this weft does not read; it reads \"{}\" and \"{}\"",
                                 origin, excerpt_text(schema), kResultsSchema, kResultsSchemaV1));
  }
  const bool v1 = schema == kResultsSchemaV1;
  BenchResults results{
      .model = top.string("model"),
      .parameters = top.integer("parameters"),
      .workers = static_cast<int>(top.integer("workers", 1, limits::kMaxProcesses)),
      .batch = static_cast<int>(top.integer("batch", 1, kInt)),
      .lr = top.number("lr"),
      .optimizer = top.string("optimizer"),
      .H = static_cast<int>(top.integer("H", 1, limits::kMaxPeriod)),
      .outer = top.has("outer_optimizer") ? top.string("outer_optimizer") : "",
      .steps = top.integer("steps", 0, kInt64),
      .warmup = static_cast<int>(top.integer("warmup", 0, kInt)),
      .mode = parse_mode(top.string("mode"), origin),
      .target_accuracy = top.optional_number("target_accuracy").value_or(0),
      .emulated = top.boolean("emulated"),
      // Benches before --mtu existed ran 1500-byte frames and did not say so.
      .mtu = top.has("mtu_B") ? static_cast<int>(top.optional_number("mtu_B").value_or(0))
                              : (top.boolean("emulated") ? 1500 : 0),
      .cores = top.has("cores") ? parse_core_placement(top.string("cores"), fmt::format("{}: cores", origin))
                                : CorePlacement::kShared,
      .links = {},
      .profile = top.string("profile"),
  };
  top.each("links", [&](const Reader& l) {
    results.links.push_back({.link = l.string("link"),
                             .bandwidth = l.number("bandwidth_Bps"),
                             .a = l.number("a_s"),
                             .b = l.number("b_s_per_byte"),
                             .network = l.string("network"),
                             .profile = l.string("profile"),
                             .host = l.has("host") ? l.string("host") : ""});
  });
  top.each("runs", [&](const Reader& r) { results.runs.push_back(read_run(r, v1)); });
  top.each("failed", [&](const Reader& f) {
    results.failed.push_back({.strategy = f.string("strategy"),
                              .link = f.string("link"),
                              .message = f.string("message"),
                              .log = f.string("log")});
  });
  top.each("skipped", [&](const Reader& s) {
    results.skipped.push_back({.strategy = s.string("strategy"), .reason = s.string("reason")});
  });
  if (!top.get("traces").is_null()) {
    const Reader t = top.child("traces");
    results.traces = TracePair{.strategy = t.string("strategy"),
                               .link = t.string("link"),
                               .predicted = t.string("predicted"),
                               .measured = t.string("measured")};
  }
  return results;
}

void write_results(const BenchResults& results, const std::filesystem::path& file) {
  write_file_atomically(file, to_json(results).dump(2) + "\n");
}

BenchResults read_results(const std::filesystem::path& file) {
  const std::string text = read_input(file, "the bench.json that `weft bench --out DIR` writes");
  return results_from_json(parse_json(text, file.string(), kWhat), file.string());
}

void compute_speedups(BenchResults& results) {
  std::map<std::string, Seconds> wfbp;  // link -> measured wfbp
  for (const RunResult& r : results.runs) {
    if (r.kind == "weft" && r.strategy == "wfbp") wfbp[r.link] = r.measured_iteration;
  }
  for (RunResult& r : results.runs) {
    const auto it = wfbp.find(r.link);
    r.speedup_vs_wfbp = it != wfbp.end() && r.measured_iteration > 0
                            ? std::optional<double>(it->second / r.measured_iteration)
                            : std::nullopt;
  }
}

}  // namespace weft::bench
