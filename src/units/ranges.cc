#include "units/ranges.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "units/units.h"

namespace weft::ranges {
namespace {

// A bound in the row's unit, as a person writes it: 1000, 86400, 1KiB, 1PiB,
// 1Kbit, 10Tbit. The bounds of the table are round, so three digits suffice.
std::string bound(Kind kind, double value) {
  struct Step {
    double scale;
    std::string_view name;
  };
  const auto in_steps = [](double v, std::initializer_list<Step> steps) {
    for (auto it = std::rbegin(steps); it != std::rend(steps); ++it) {
      if (v >= it->scale) return fmt::format("{:g}{}", v / it->scale, it->name);
    }
    return fmt::format("{:g}{}", v, steps.begin()->name);
  };
  switch (kind) {
    case Kind::kBytes:
      return in_steps(value, {{1, "B"}, {0x1p10, "KiB"}, {0x1p20, "MiB"}, {0x1p30, "GiB"}, {0x1p40, "TiB"},
                              {0x1p50, "PiB"}});
    case Kind::kRate:
      return in_steps(value / kBit, {{1, "bit"}, {1e3, "Kbit"}, {1e6, "Mbit"}, {1e9, "Gbit"}, {1e12, "Tbit"}});
    default:
      return fmt::format("{:.15g}", value);
  }
}

std::string_view noun(Kind kind) {
  switch (kind) {
    case Kind::kNumber: return "a finite number";
    case Kind::kInteger: return "an integer";
    case Kind::kSeconds: return "a duration";
    case Kind::kBytes: return "a size";
    case Kind::kRate: return "a rate";
  }
  return "";
}

}  // namespace

std::string accepted(const Range& r) {
  return fmt::format("{} in {}{}, {}{}{}", noun(r.kind), r.low_open ? '(' : '[', bound(r.kind, r.low),
                     bound(r.kind, r.high), r.high_open ? ')' : ']', r.kind == Kind::kSeconds ? " s" : "");
}

namespace {
thread_local bool keywords = false;  // Note [One message, two spellings]
}  // namespace

KeywordSpelling::KeywordSpelling() : before_(keywords) { keywords = true; }
KeywordSpelling::~KeywordSpelling() { keywords = before_; }

std::string named(std::string_view flag) {
  if (!keywords) return std::string(flag);
  std::string name(flag.substr(flag.find_first_not_of('-')));
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

std::string given(std::string_view flag, std::string_view value) {
  return keywords ? fmt::format("{}={}", named(flag), value) : fmt::format("{} {}", flag, value);
}

bool contains(const Range& r, double value) {
  if (!std::isfinite(value)) return false;
  if (r.kind == Kind::kInteger && value != std::floor(value)) return false;
  const bool above_low = r.low_open ? value > r.low : value >= r.low;
  const bool below_high = r.high_open ? value < r.high : value <= r.high;
  return above_low && below_high;
}

void check(const Range& r, double value, std::string_view text) {
  if (contains(r, value)) return;
  throw UsageError(fmt::format("{}: expected {}",
                               given(r.flag, text.empty() ? fmt::format("{}", value) : excerpt_text(text)),
                               accepted(r)));
}

double parse(const Range& r, std::string_view text) {
  // A bare number (inf and nan included) is the row's unit; the unit parsers
  // take the rest, and refuse what is neither.
  const std::string s(text);
  char* end = nullptr;
  double value = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size()) {
    try {
      switch (r.kind) {
        case Kind::kSeconds: value = parse_duration(text); break;
        case Kind::kBytes: value = static_cast<double>(parse_bytes(text)); break;
        case Kind::kRate: value = parse_bandwidth(text); break;
        case Kind::kNumber:
        case Kind::kInteger: throw UsageError(fmt::format("'{}' is not a number", excerpt_text(text)));
      }
    } catch (const UsageError& e) {
      throw UsageError(fmt::format("{}: {}", named(r.flag), e.what()));
    }
  }
  check(r, value, text);
  return value;
}

}  // namespace weft::ranges
