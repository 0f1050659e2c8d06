#include "units/units.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace weft {
namespace {

struct Unit {
  std::string_view suffix;
  double scale;
};

// Splits "12.5MB/s" into 12.5 and "MB/s". Returns false if there is no number.
bool split_number(std::string_view text, double& value, std::string_view& suffix) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.' ||
                             text[i] == 'e' || text[i] == 'E' || text[i] == '-' || text[i] == '+')) {
    // An 'e' followed by a letter is the start of a suffix, not an exponent.
    if ((text[i] == 'e' || text[i] == 'E') &&
        (i + 1 >= text.size() || !(std::isdigit(static_cast<unsigned char>(text[i + 1])) ||
                                   text[i + 1] == '-' || text[i + 1] == '+'))) {
      break;
    }
    ++i;
  }
  if (i == 0) return false;
  const std::string number(text.substr(0, i));
  try {
    size_t used = 0;
    value = std::stod(number, &used);
    if (used != number.size()) return false;
  } catch (const std::exception&) {
    return false;
  }
  suffix = text.substr(i);
  while (!suffix.empty() && suffix.front() == ' ') suffix.remove_prefix(1);
  return std::isfinite(value);
}

double parse_with_units(std::string_view text, std::initializer_list<Unit> units,
                        std::string_view what, std::string_view accepted, bool allow_zero) {
  double value = 0;
  std::string_view suffix;
  if (split_number(text, value, suffix)) {
    for (const Unit& u : units) {
      if (suffix == u.suffix) {
        const double result = value * u.scale;
        if (result > 0 || (allow_zero && result == 0)) return result;
        throw UsageError(fmt::format("{} '{}' must be {}; accepted forms: {}", what, excerpt_text(text),
                                     allow_zero ? ">= 0" : "> 0", accepted));
      }
    }
  }
  throw UsageError(fmt::format("{} '{}' is not understood; accepted forms: {}", what, excerpt_text(text), accepted));
}

// Prints `value` with up to 3 significant decimals and no trailing zeros.
std::string trim(double value) {
  std::string s = fmt::format("{:.3f}", value);
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

}  // namespace

BytesPerSecond parse_bandwidth(std::string_view text) {
  return parse_with_units(
      text,
      {{"", 1}, {"B/s", 1}, {"Bps", 1},
       {"bit", 1.0 / 8}, {"bps", 1.0 / 8}, {"Kbit", 1e3 / 8}, {"Mbit", 1e6 / 8}, {"Gbit", 1e9 / 8},
       {"kbit", 1e3 / 8}, {"mbit", 1e6 / 8}, {"gbit", 1e9 / 8}, {"Tbit", 1e12 / 8}, {"tbit", 1e12 / 8},
       {"KB/s", 1e3}, {"kB/s", 1e3}, {"MB/s", 1e6}, {"GB/s", 1e9},
       {"KiB/s", 1024.0}, {"MiB/s", 1024.0 * 1024}, {"GiB/s", 1024.0 * 1024 * 1024}},
      "bandwidth",
      "a positive number of bytes/s (125000000) or with a unit: 100Mbit, 1Gbit, 10MB/s, 64MiB/s",
      /*allow_zero=*/false);
}

Seconds parse_duration(std::string_view text) {
  return parse_with_units(text, {{"", 1}, {"s", 1}, {"ms", 1e-3}, {"us", 1e-6}, {"ns", 1e-9}},
                          "duration", "a number of seconds (0.002) or with a unit: 1s, 2ms, 50us, 100ns",
                          /*allow_zero=*/true);
}

Bytes parse_bytes(std::string_view text) {
  const double value = parse_with_units(
      text,
      {{"", 1}, {"B", 1}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9},
       {"KiB", 1024.0}, {"MiB", 1024.0 * 1024}, {"GiB", 1024.0 * 1024 * 1024}},
      "size", "a positive number of bytes (4194304) or with a unit: 4MiB, 512KiB, 25MB", false);
  if (value > 0x1p62) {
    throw UsageError(fmt::format("size '{}' is more than 2^62 bytes; accepted forms: 4MiB, 512KiB, 25MB",
                                 excerpt_text(text)));
  }
  return static_cast<Bytes>(std::llround(value));
}

std::string format_bandwidth(BytesPerSecond rate) {
  const double bits = rate * 8;
  if (bits >= 1e9) return trim(bits / 1e9) + "Gbit";
  if (bits >= 1e6) return trim(bits / 1e6) + "Mbit";
  if (bits >= 1e3) return trim(bits / 1e3) + "Kbit";
  return trim(bits) + "bit";
}

std::string format_duration(Seconds t) {
  const double a = std::abs(t);
  if (a >= 1 || a == 0) return trim(t) + "s";
  if (a >= 1e-3) return trim(t * 1e3) + "ms";
  if (a >= 1e-6) return trim(t * 1e6) + "us";
  return trim(t * 1e9) + "ns";
}

std::string format_bytes(Bytes n) {
  const double v = static_cast<double>(n);
  if (n >= (Bytes{1} << 30)) return trim(v / (1 << 30)) + "GiB";
  if (n >= (Bytes{1} << 20)) return trim(v / (1 << 20)) + "MiB";
  if (n >= (Bytes{1} << 10)) return trim(v / (1 << 10)) + "KiB";
  return std::to_string(n) + "B";
}

UsageError::UsageError(const std::string& what) : std::runtime_error(cut_long_words(what)) {}

std::string excerpt_text(std::string_view text, std::size_t keep) {
  if (text.size() <= keep) return std::string(text);
  return fmt::format("{}… ({} characters)", text.substr(0, keep), text.size());
}

std::string cut_long_words(std::string_view message) {
  std::string out;
  while (!message.empty()) {
    const std::size_t space = message.find(' ');
    const std::string_view word = message.substr(0, space);
    out += word.size() > kLongestWord ? excerpt_text(word) : std::string(word);
    if (space == std::string_view::npos) break;
    out += ' ';
    message.remove_prefix(space + 1);
  }
  return out;
}

double median(std::vector<double> values) {
  if (values.empty()) throw std::logic_error("median: no values");
  const std::size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  const double upper = values[mid];
  if (values.size() % 2 == 1) return upper;
  const double lower = *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lower + upper) / 2;
}

}  // namespace weft
