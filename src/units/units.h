// Physical quantities used throughout weft: time, data size and bandwidth.
//
// They are named aliases of arithmetic types, so that `n / B` reads as physics and
// stays cheap. Literals (`_s`, `_ms`, `_us`, `_MiB`, `_Mbit`, `_Gbit`, ...) make
// constants self-describing. Parsing accepts what people write (`100Mbit`, `1Gbit`,
// `10MB/s`, `125000000`, `50us`, `2ms`, `1s`) and reports what it accepts otherwise.
//
// Thread-safety: everything here is a pure function.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace weft {

using Seconds = double;         // wall or simulated time, in seconds
using Bytes = std::int64_t;     // a size or offset, in bytes
using BytesPerSecond = double;  // a link rate

// Bad user input. `what()` names the offending value and what would be accepted;
// the command line prints it and exits with status 2 (see docs/errors.md). Any
// word of the message longer than kLongestWord characters (a value pasted by
// mistake, a file's contents) is cut as excerpt_text cuts it, so that the
// message stays a line whoever built it.
class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& what);
  explicit UsageError(const char* what) : UsageError(std::string(what)) {}
};

// A word longer than this in a message is a value, not a path or a name.
inline constexpr std::size_t kLongestWord = 200;

// `text`, or its first `keep` characters and its length ("abc… (2310512
// characters)") if it is longer, so that an error message quoting it stays one line.
std::string excerpt_text(std::string_view text, std::size_t keep = 60);

// `message` with every word (between spaces) longer than kLongestWord cut by excerpt_text.
std::string cut_long_words(std::string_view message);

// The median of measured values: the middle one, or the mean of the two middle
// ones. REQUIRES !values.empty() (THROWS std::logic_error otherwise).
double median(std::vector<double> values);

namespace literals {
constexpr Seconds operator""_s(long double v) { return static_cast<Seconds>(v); }
constexpr Seconds operator""_s(unsigned long long v) { return static_cast<Seconds>(v); }
constexpr Seconds operator""_ms(long double v) { return static_cast<Seconds>(v) * 1e-3; }
constexpr Seconds operator""_ms(unsigned long long v) { return static_cast<Seconds>(v) * 1e-3; }
constexpr Seconds operator""_us(long double v) { return static_cast<Seconds>(v) * 1e-6; }
constexpr Seconds operator""_us(unsigned long long v) { return static_cast<Seconds>(v) * 1e-6; }
constexpr Bytes operator""_B(unsigned long long v) { return static_cast<Bytes>(v); }
constexpr Bytes operator""_KiB(unsigned long long v) { return static_cast<Bytes>(v) << 10; }
constexpr Bytes operator""_MiB(unsigned long long v) { return static_cast<Bytes>(v) << 20; }
constexpr Bytes operator""_GiB(unsigned long long v) { return static_cast<Bytes>(v) << 30; }
constexpr BytesPerSecond operator""_Mbit(unsigned long long v) { return static_cast<double>(v) * 1e6 / 8; }
constexpr BytesPerSecond operator""_Mbit(long double v) { return static_cast<double>(v) * 1e6 / 8; }
constexpr BytesPerSecond operator""_Gbit(unsigned long long v) { return static_cast<double>(v) * 1e9 / 8; }
constexpr BytesPerSecond operator""_Gbit(long double v) { return static_cast<double>(v) * 1e9 / 8; }
constexpr BytesPerSecond operator""_MBps(unsigned long long v) { return static_cast<double>(v) * 1e6; }
}  // namespace literals

// Parses a rate: a bare number is bytes/s; suffixes `bit`, `Kbit`, `Mbit`, `Gbit`,
// `Tbit` (SI, bits per second), `B/s`, `KB/s`, `MB/s`, `GB/s` (SI, bytes per second),
// `KiB/s`, `MiB/s`, `GiB/s`. REQUIRES nothing; THROWS UsageError naming `text`
// and the accepted forms if it is not one of them or is not > 0.
BytesPerSecond parse_bandwidth(std::string_view text);

// Parses a duration: a bare number is seconds; suffixes `s`, `ms`, `us`, `ns`.
// Accepts 0; THROWS UsageError for negative or malformed values.
Seconds parse_duration(std::string_view text);

// Parses a size: a bare number is bytes; suffixes `B`, `KB`, `MB`, `GB` (SI) and
// `KiB`, `MiB`, `GiB`. THROWS UsageError for malformed or non-positive values, or
// one beyond 2^62 bytes (which no Bytes sum would survive).
Bytes parse_bytes(std::string_view text);

// Human-readable forms, for tables: "1Gbit", "100Mbit", "12.5MB/s"; "2.5ms",
// "50us", "1.2s"; "4MiB", "512KiB", "100B".
std::string format_bandwidth(BytesPerSecond rate);
std::string format_duration(Seconds t);
std::string format_bytes(Bytes n);

}  // namespace weft
