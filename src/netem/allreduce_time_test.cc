// A real Gloo all-reduce between two real processes under `weft netem` takes as
// long as the emulated link allows, and the run leaves nothing behind. This is the
// end-to-end check of the emulation that every `weft bench` figure rests on:
// netem_test.cc times one TCP stream; here the messages are the runtime's own.
//
// Needs root (label `root`) and the runtime (`weft profile --network`); skips
// itself without root. It asserts only that the link holds the all-reduce to its
// rate (a loaded machine can make it slower, never faster); how close it comes is
// printed and recorded, a benchmark's figure.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

#include "testing/testing.h"

namespace weft::netem {
namespace {

namespace fs = std::filesystem;
using namespace weft::test_support;

constexpr int kWorkers = 2;
constexpr double kLinkBitsPerSecond = 10e6;  // the emulated link, "10Mbit"
constexpr long long kMessageBytes = 1 << 20;  // the all-reduce timed: 1 MiB

// TCP payload per byte of Ethernet frame that the link's tbf counts (Note [Token
// bucket parameters], shaping.h): a 1500-byte MTU frame carries 1500 − 20 (IP) −
// 32 (TCP with timestamps) = 1448 bytes of payload in 1500 + 14 (Ethernet) = 1514
// bytes on the link. The ACKs a worker returns share its upload and cost about 2%
// more, which the band absorbs.
constexpr double kPayloadEfficiency = 1448.0 / 1514.0;

// The time the link allows a ring all-reduce of n bytes among P workers (docs/design.md §1.2):
// each worker sends, and receives, 2(P−1)/P·n bytes over its own link, whose two
// directions are shaped apart, so T = 2(P−1)/P · n / B, with B the link's payload
// rate. The α term (a few hundred microseconds on this link) is left out.
double ring_allreduce_seconds(int workers, double bytes, double link_bytes_per_second) {
  return 2.0 * (workers - 1) / workers * bytes / link_bytes_per_second;
}

TEST(EmulatedAllReduce, OneMebibyteAtTenMbitTakesWhatTheLinkAllowsAndLeavesNothing) {
  SKIP_UNLESS_PRIVILEGED();
  const fs::path dir = fs::path(::testing::TempDir()) / ("allreduce_time_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path fit = dir / "net.json";
  // The profiler times each size it measures; 256 KiB is there only because a fit
  // needs two sizes. Single all-reduces take 2–2.5% more than the link allows (they
  // ranged up to +58% before Note [Congestion control of the emulated hosts]).
  const WeftRun run = run_weft({"netem", "--workers", std::to_string(kWorkers), "--bandwidth", "10Mbit",
                                "--port", "29731", "--timeout", "240s", "--",
                                WEFT_BINARY, "profile", "--network", "--min-bytes", "256KiB", "--max-bytes",
                                std::to_string(kMessageBytes), "--repeats", "5", "--out", fit.string()},
                               dir / "netem.log");
  ASSERT_EQ(run.exit_code, 0) << run.output;

  const nlohmann::json measured = nlohmann::json::parse(read_text(fit));
  double seconds = -1;
  for (const auto& point : measured.at("points")) {
    // The ring all-reduce's own time; `seconds` may be an all-gather's (Note [Small
    // all-reduces by all-gather] in runtime/comm/process_group.h).
    if (point.at("bytes").get<long long>() == kMessageBytes) seconds = point.at("allreduce_s").get<double>();
  }
  ASSERT_GT(seconds, 0) << "no 1 MiB point in " << measured.dump();
  const double allowed =
      ring_allreduce_seconds(kWorkers, kMessageBytes, kLinkBitsPerSecond / 8 * kPayloadEfficiency);
  std::printf("all-reduce of 1 MiB, %d workers, 10 Mbit links: %.3f s measured, %.3f s allowed (%.1f%%)\n",
              kWorkers, seconds, allowed, 100 * (seconds / allowed - 1));
  RecordProperty("measured_seconds", std::to_string(seconds));
  RecordProperty("allowed_seconds", std::to_string(allowed));
  EXPECT_GT(seconds, 0.9 * allowed) << "faster than the link: is it shaped?\n" << run.output;

  EXPECT_EQ(listed_namespaces_of(run.pid), std::vector<std::string>{}) << "namespaces left behind";
  EXPECT_EQ(processes_mentioning(dir.string()), std::vector<pid_t>{}) << "ranks left running";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace weft::netem
