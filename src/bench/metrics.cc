#include "bench/metrics.h"

#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "units/files.h"

namespace weft::bench {
namespace {

using nlohmann::json;

// Where a line came from, for messages.
struct LineRef {
  std::string_view origin;
  int number;  // 1-based
};

const json& field(const json& object, const char* name, const char* parent, LineRef where) {
  const auto it = object.find(name);
  if (it == object.end()) {
    throw UsageError(fmt::format("{}:{}: missing field \"{}{}\" (a metrics line as `weft train --metrics` "
                                 "writes has rank, iter, time_s and either iteration_s, loss, strategy or eval)",
                                 where.origin, where.number, parent, name));
  }
  return *it;
}

double number(const json& object, const char* name, const char* parent, LineRef where, bool non_negative) {
  const json& value = field(object, name, parent, where);
  if (!value.is_number()) {
    throw UsageError(fmt::format("{}:{}: field \"{}{}\" is {}, expected a number", where.origin, where.number,
                                 parent, name, value.dump()));
  }
  const double v = value.get<double>();
  if (non_negative && !(v >= 0)) {
    throw UsageError(fmt::format("{}:{}: field \"{}{}\" is {}, expected a number >= 0", where.origin,
                                 where.number, parent, name, v));
  }
  return v;
}

std::int64_t integer(const json& object, const char* name, LineRef where) {
  const json& value = field(object, name, "", where);
  if (!value.is_number_integer() || value.get<std::int64_t>() < 0) {
    throw UsageError(fmt::format("{}:{}: field \"{}\" is {}, expected an integer >= 0", where.origin,
                                 where.number, name, value.dump()));
  }
  return value.get<std::int64_t>();
}

void parse_line(std::string_view line, LineRef where, Metrics& out) {
  if (line.find_first_not_of(" \t\r") == std::string_view::npos) return;
  json object;
  try {
    object = json::parse(line);
  } catch (const json::parse_error& e) {
    throw UsageError(fmt::format("{}:{}: not a JSON line: {}", where.origin, where.number, e.what()));
  }
  if (!object.is_object()) {
    throw UsageError(fmt::format("{}:{}: expected a JSON object, got {}", where.origin, where.number,
                                 object.dump()));
  }
  const int rank = static_cast<int>(integer(object, "rank", where));
  const std::int64_t iter = integer(object, "iter", where);
  const Seconds time = number(object, "time_s", "", where, true);
  if (const auto eval = object.find("eval"); eval != object.end()) {
    if (!eval->is_object()) {
      throw UsageError(fmt::format("{}:{}: field \"eval\" is {}, expected an object with accuracy and loss",
                                   where.origin, where.number, eval->dump()));
    }
    out.evals.push_back({.rank = rank,
                         .iter = iter,
                         .time = time,
                         .accuracy = number(*eval, "accuracy", "eval.", where, true),
                         .loss = number(*eval, "loss", "eval.", where, false)});
    return;
  }
  const json& strategy = field(object, "strategy", "", where);
  if (!strategy.is_string()) {
    throw UsageError(fmt::format("{}:{}: field \"strategy\" is {}, expected a string", where.origin, where.number,
                                 strategy.dump()));
  }
  out.iterations.push_back({.rank = rank,
                            .iter = iter,
                            .time = time,
                            .iteration = number(object, "iteration_s", "", where, true),
                            .compute = object.contains("compute_s")
                                           ? std::optional(number(object, "compute_s", "", where, true))
                                           : std::nullopt,
                            .loss = number(object, "loss", "", where, false),
                            .strategy = strategy.get<std::string>()});
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
    parse_line(text.substr(consumed, stop - consumed), {origin, first_line + lines}, out);
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
