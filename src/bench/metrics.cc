#include "bench/metrics.h"

#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "units/files.h"
#include "units/json_reader.h"
#include "units/limits.h"

namespace weft::bench {
namespace {

constexpr std::string_view kWhat =
    "a metrics line as `weft train --metrics` writes has rank, iter, time_s and either iteration_s, loss, "
    "strategy or eval";

double non_negative(const JsonReader& r, const std::string& name) {
  const double v = r.number(name);
  if (!(v >= 0)) r.reject(name, "a number >= 0", r.get(name));
  return v;
}

std::int64_t count(const JsonReader& r, const std::string& name) {
  const std::int64_t v = r.integer(name);
  if (v < 0) r.reject(name, "an integer >= 0", r.get(name));
  return v;
}

// `origin` is "FILE:LINE".
void parse_line(std::string_view line, const std::string& origin, Metrics& out) {
  if (line.find_first_not_of(" \t\r") == std::string_view::npos) return;
  const nlohmann::json object = parse_json(line, origin, "one JSON object per line, as `weft train --metrics` writes");
  const JsonReader r(object, "", origin, kWhat);
  const int rank = static_cast<int>(r.integer("rank", 0, limits::kMaxWorkers));
  const std::int64_t iter = count(r, "iter");
  const Seconds time = non_negative(r, "time_s");
  if (r.has("eval")) {
    const JsonReader own = r.child("eval");
    EvalLine line{.rank = rank, .iter = iter, .time = time, .accuracy = non_negative(own, "accuracy"),
                  .loss = own.number("loss")};
    if (r.has("eval_agreed")) {  // the model the workers agree on is what a user keeps
      const JsonReader agreed = r.child("eval_agreed");
      line.own_accuracy = line.accuracy;
      line.accuracy = non_negative(agreed, "accuracy");
      line.loss = agreed.number("loss");
    }
    out.evals.push_back(line);
    return;
  }
  out.iterations.push_back({.rank = rank,
                            .iter = iter,
                            .time = time,
                            .iteration = non_negative(r, "iteration_s"),
                            .compute = r.has("compute_s") ? std::optional(non_negative(r, "compute_s")) : std::nullopt,
                            .loss = r.number("loss"),
                            .strategy = r.string("strategy")});
}

// Parses the complete lines of `text` (those ending in '\n'; a last line without
// one too when `final`), numbering them from first_line. Returns the bytes consumed.
std::size_t parse_lines(std::string_view text, std::string_view origin, int first_line, bool final,
                        Metrics& out, int& lines) {
  std::size_t consumed = 0;
  while (consumed < text.size()) {
    const std::size_t end = text.find('\n', consumed);
    if (end == std::string_view::npos && !final) break;
    const std::size_t stop = end == std::string_view::npos ? text.size() : end;
    parse_line(text.substr(consumed, stop - consumed), fmt::format("{}:{}", origin, first_line + lines), out);
    ++lines;
    consumed = end == std::string_view::npos ? text.size() : end + 1;
  }
  return consumed;
}

}  // namespace

Metrics parse_metrics(std::string_view text, std::string_view origin) {
  Metrics metrics;
  int lines = 0;
  parse_lines(text, origin, 1, /*final=*/true, metrics, lines);
  return metrics;
}

Metrics load_metrics(const std::filesystem::path& file) {
  return parse_metrics(read_input(file, "the metrics file"), file.string());
}

Metrics MetricsTail::poll() {
  Metrics metrics;
  std::ifstream in(file_, std::ios::binary);
  if (!in) return metrics;
  in.seekg(static_cast<std::streamoff>(offset_));
  std::ostringstream text;
  text << in.rdbuf();
  const std::string added = text.str();
  int lines = 0;
  offset_ += parse_lines(added, file_.string(), lines_ + 1, /*final=*/false, metrics, lines);
  lines_ += lines;
  return metrics;
}

}  // namespace weft::bench
