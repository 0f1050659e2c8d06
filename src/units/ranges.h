// The accepted range of every numeric flag, in one table (docs/limits.md,
// "Numeric flags", lists the same rows; ranges_test.cc reads that page and
// fails if the two differ). The command line checks a flag against its row as
// it parses it (cli/cluster_flags.h's in_range); the functions that turn flags
// into options (make_cluster, make_strategy_options, runtime::validate) check
// the same rows again, so that the Python package, which calls them with its
// keyword arguments, refuses what the command line refuses, with the same words.
//
// Each bound is far above real use and far below what breaks weft: a time or
// a rate near the largest double overflows the sums built from it, a partition
// of a few bytes makes millions of messages, `--epochs inf` has no end.
//
// Thread-safety: constants and pure functions.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "units/limits.h"

namespace weft::ranges {

enum class Kind {
  kNumber,   // a finite real number
  kInteger,  // a whole number
  kSeconds,  // a duration: 50us, 2ms, 10 (seconds)
  kBytes,    // a size: 4MiB, 512KiB, 4096 (bytes)
  kRate,     // a link rate: 1Gbit, 10MB/s, 125000000 (bytes/s)
};

struct Range {
  std::string_view flag;      // as the command line spells it; Python's keyword drops the dashes
  std::string_view commands;  // the `weft` commands that take it with this range
  Kind kind = Kind::kNumber;
  double low = 0;             // in seconds, bytes or bytes/s for those kinds
  double high = 0;
  bool low_open = false;      // (low, ... rather than [low, ...
  bool high_open = false;     // ..., high) rather than ..., high]
};

inline constexpr double kDay = limits::kMaxSeconds;
inline constexpr double kWeek = 7 * kDay;
// A bit/s in bytes/s.
inline constexpr double kBit = 1.0 / 8;
// Iterations one run may train (--steps, and what --epochs come to).
inline constexpr double kMaxSteps = 100'000'000;

// Times.
inline constexpr Range kLatency{"--latency", "plan, simulate, train, netem, run, bench", Kind::kSeconds, 0, kDay};
inline constexpr Range kWanLatency{"--wan-latency", "plan, simulate, train, netem, run", Kind::kSeconds, 0, kDay};
inline constexpr Range kFailureTimeout{"--failure-timeout", "train, run, profile", Kind::kSeconds, 0, kDay, true};
inline constexpr Range kGrace{"--grace", "netem", Kind::kSeconds, 0, kDay, true};
inline constexpr Range kJobTimeout{"--timeout", "netem", Kind::kSeconds, 0, kWeek};  // 0: no limit
inline constexpr Range kRunTimeout{"--run-timeout", "bench", Kind::kSeconds, 0, kWeek, true};
// Rates and fractions.
inline constexpr Range kLr{"--lr", "train, bench", Kind::kNumber, 0, 1e3, true};
inline constexpr Range kOuterLr{"--outer-lr", "train, bench", Kind::kNumber, 0, 1e3, true};
inline constexpr Range kOuterMomentum{"--outer-momentum", "train, bench", Kind::kNumber, 0, 1, false, true};
inline constexpr Range kEasgdAlpha{"--easgd-alpha", "plan, simulate, train", Kind::kNumber, 0, 1};
inline constexpr Range kEasgdBeta{"--easgd-beta", "plan, simulate, train", Kind::kNumber, 0, 1, true};
inline constexpr Range kTargetAccuracy{"--target-accuracy", "bench", Kind::kNumber, 0, 1, true};
// Lengths of a run.
inline constexpr Range kSteps{"--steps", "train, bench", Kind::kInteger, 1, kMaxSteps};
inline constexpr Range kEpochs{"--epochs", "train", Kind::kNumber, 0, 1e6, true};
inline constexpr Range kIterations{"--iterations", "simulate", Kind::kInteger, 0, limits::kMaxIterations};
inline constexpr Range kTraceIterations{"--trace-iterations", "simulate, train", Kind::kInteger, 1,
                                        limits::kMaxIterations};
inline constexpr Range kProfileIterations{"--iterations", "profile", Kind::kInteger, 1, limits::kMaxIterations};
inline constexpr Range kWarmup{"--warmup", "profile, bench", Kind::kInteger, 0, limits::kMaxIterations};
inline constexpr Range kRepeats{"--repeats", "profile, bench", Kind::kInteger, 1, 10'000};
inline constexpr Range kEvalEvery{"--eval-every", "train, bench", Kind::kInteger, 0, kMaxSteps};
inline constexpr Range kCheckpointEvery{"--checkpoint-every", "train", Kind::kInteger, 0, kMaxSteps};
inline constexpr Range kH{"--H", "plan, simulate, train, bench", Kind::kInteger, 1, limits::kMaxPeriod};
inline constexpr Range kT{"--T", "plan, simulate, train", Kind::kInteger, 1, limits::kMaxPeriod};
inline constexpr Range kSiteEvery{"--site-every", "plan, simulate, train", Kind::kInteger, 0, limits::kMaxPeriod};
// Sizes of a model and a cluster.
inline constexpr Range kBatch{"--batch", "plan, simulate, train, profile, bench", Kind::kInteger, 1, 65'536};
inline constexpr Range kSequence{"--seq", "plan, simulate", Kind::kInteger, 0, 1 << 20};
inline constexpr Range kWorkers{"--workers", "plan, simulate", Kind::kInteger, 1, limits::kMaxWorkers};
inline constexpr Range kServers{"--servers", "plan, simulate", Kind::kInteger, 1, limits::kMaxServers};
inline constexpr Range kProcesses{"--nproc", "train, run, profile", Kind::kInteger, 1, limits::kMaxProcesses};
inline constexpr Range kLocalWorkers{"--workers", "netem, bench", Kind::kInteger, 1, limits::kMaxProcesses};
inline constexpr Range kLocalServers{"--servers", "train, run, netem, bench", Kind::kInteger, 0,
                                     limits::kMaxProcesses - 1};
inline constexpr Range kThreads{"--threads", "profile", Kind::kInteger, 1, 1024};
inline constexpr Range kPort{"--port", "netem, bench", Kind::kInteger, 1, 65'535};
inline constexpr Range kMtu{"--mtu", "netem, bench", Kind::kInteger, 68, 65'535};
// Messages: a floor that keeps a model's messages per iteration bounded
// (limits::kMaxMessages) and a ceiling where sums of sizes stay exact.
inline constexpr Range kPartition{"--partition", "plan, simulate, train", Kind::kBytes, 1 << 10,
                                  static_cast<double>(limits::kMaxBytes)};
inline constexpr Range kCredit{"--credit", "plan, simulate, train", Kind::kBytes, 1 << 10,
                               static_cast<double>(limits::kMaxBytes)};
inline constexpr Range kMinBytes{"--min-bytes", "profile", Kind::kBytes, 4, 1 << 30};
inline constexpr Range kMaxBytes{"--max-bytes", "profile", Kind::kBytes, 4, 1 << 30};
// Links: a kbit/s is a modem's; 10 Tbit/s is beyond any one link.
inline constexpr Range kBandwidth{"--bandwidth", "plan, simulate, train, run, netem", Kind::kRate, 1e3 * kBit,
                                  1e13 * kBit};
inline constexpr Range kServerBandwidth{"--server-bandwidth", "plan, simulate, train, run, netem", Kind::kRate,
                                        1e3 * kBit, 1e13 * kBit};
inline constexpr Range kWanBandwidth{"--wan-bandwidth", "plan, simulate, train, netem, run", Kind::kRate, 1e3 * kBit, 1e13 * kBit};
inline constexpr Range kBandwidths{"--bandwidths", "bench", Kind::kRate, 1e3 * kBit, 1e13 * kBit};

// Every row, in the order docs/limits.md lists them.
inline constexpr std::array kAll{
    &kLatency,    &kWanLatency,      &kFailureTimeout,  &kGrace,          &kJobTimeout,     &kRunTimeout,    &kLr,
    &kOuterLr,    &kOuterMomentum,   &kEasgdAlpha,     &kEasgdBeta,      &kTargetAccuracy, &kSteps,
    &kEpochs,     &kIterations,      &kTraceIterations, &kProfileIterations, &kWarmup,    &kRepeats,
    &kEvalEvery,  &kCheckpointEvery, &kH,              &kT,              &kSiteEvery,     &kBatch,         &kSequence,
    &kWorkers,    &kServers,         &kProcesses,      &kLocalWorkers,   &kLocalServers,  &kThreads,
    &kPort,       &kMtu,             &kPartition,      &kCredit,         &kMinBytes,      &kMaxBytes,
    &kBandwidth,  &kServerBandwidth, &kWanBandwidth,  &kBandwidths};

// What the row accepts, as messages and docs/limits.md say it: "a finite number
// in (0, 1000]", "an integer in [1, 10000]", "a duration in (0, 86400] s",
// "a size in [1KiB, 1PiB]", "a rate in [1Kbit, 10Tbit]".
std::string accepted(const Range& range);

// Whether `value` lies in the range (finite, whole for kInteger).
bool contains(const Range& range, double value);

// REQUIRES nothing. THROWS UsageError "FLAG VALUE: expected ACCEPTED" unless
// contains(range, value); VALUE is `text` (cut to a few dozen characters) when
// given, else the number.
void check(const Range& range, double value, std::string_view text = {});

// Note [One message, two spellings]
// -----------------------------------
// Every message about a bad option is written once, here in C++, naming the
// option as the command line spells it ("--failure-timeout 0: expected ...").
// The Python package takes the same options as keyword arguments and calls the
// same checks; while a KeywordSpelling lives on the calling thread, the same
// messages name them as keywords ("failure_timeout=0: expected ..."), so a user
// reads the name they typed and the two front ends cannot drift apart.

// "--flag VALUE", or "flag=VALUE" under KeywordSpelling.
std::string given(std::string_view flag, std::string_view value);
// "--flag", or "flag" under KeywordSpelling.
std::string named(std::string_view flag);

// Messages on this thread name options as Python keywords while one lives.
class KeywordSpelling {
 public:
  KeywordSpelling();
  ~KeywordSpelling();
  KeywordSpelling(const KeywordSpelling&) = delete;
  KeywordSpelling& operator=(const KeywordSpelling&) = delete;

 private:
  bool before_;
};

// Parses `text` as the row's kind (parse_duration, parse_bytes, parse_bandwidth,
// or a plain number) and checks it. THROWS UsageError naming the flag.
double parse(const Range& range, std::string_view text);

}  // namespace weft::ranges
