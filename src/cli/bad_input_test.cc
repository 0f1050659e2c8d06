// Hostile and mistaken input to the `weft` binary (docs/limits.md): each is a
// one-line error and exit 2, promptly, never a crash, a hang, gigabytes of
// memory or megabytes of error text. Runs the weft binary CMake built
// (WEFT_BINARY), each run under `timeout` so that a hang fails the test at once.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "testing/testing.h"

namespace weft {
namespace {

namespace fs = std::filesystem;

// A run that takes longer than this is a hang (exit 124); every case here is
// refused in well under a second.
constexpr int kPatience = 60;

using Ran = test_support::ShellRun;
Ran weft(const std::string& args) { return test_support::weft_shell(args, kPatience); }

class BadInput : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("weft_bad_input_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) const {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }

  // Runs `weft args` and expects exit 2 with one short line that says `says`.
  void expect_refused(const std::string& args, const std::string& says) const {
    const Ran r = weft(args);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.output.substr(0, 2000);
    EXPECT_NE(r.output.find(says), std::string::npos) << args << "\n" << r.output.substr(0, 2000);
    EXPECT_LT(r.output.size(), 600u) << args << "\n" << r.output.substr(0, 2000);
    EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "not one line: " << r.output.substr(0, 2000);
  }

  // A profile of two layers, the second's forward time `fp`.
  std::string profile(const std::string& name, const std::string& fp) const {
    return write(name, R"({"model": "m", "layers": [{"name": "a", "params": 1000, "fp_s": 0.001, "bp_s": 0.002},
                          {"name": "b", "params": 2000, "fp_s": )" +
                           fp + R"(, "bp_s": 0.002}]})");
  }

  fs::path dir_;
};

TEST_F(BadInput, DeepNestingIsRefusedNotACrash) {
  const std::string deep = write("deep.json", std::string(100'000, '[') + std::string(100'000, ']'));
  expect_refused("simulate --model resnet18 -P 2 --schedule " + deep, "deeper than 64 levels");
  expect_refused("plan --model resnet18 -P 2 --network " + deep, "deeper than 64 levels");
  expect_refused("plan --profile " + deep + " -P 2", "deeper than 64 levels");
  // An object nested as deep.
  std::string objects;
  for (int i = 0; i < 100'000; ++i) objects += R"({"a":)";
  objects += "1" + std::string(100'000, '}');
  expect_refused("plan --profile " + write("objects.json", objects) + " -P 2", "deeper than 64 levels");
}

TEST_F(BadInput, ANumberBeyondADoubleNamesTheFileAndField) {
  const std::string file = profile("overflow.json", "1e400");
  expect_refused("plan --profile " + file + " -P 2", file + ": layers[1].fp_s is 1e400, beyond the range");
}

TEST_F(BadInput, ADuplicatedKeyIsRefused) {
  const std::string file = write("twice.json", R"({"layers": [{"name": "a", "params": 1, "fp_s": 1, "fp_s": 2,
                                                    "bp_s": 1}]})");
  expect_refused("plan --profile " + file + " -P 2", R"(layers[0] has the key "fp_s" twice)");
}

TEST_F(BadInput, AHugeValueIsQuotedInAFewDozenCharacters) {
  std::string numbers = "[0";
  for (int i = 0; i < 300'000; ++i) numbers += ",1";
  numbers += "]";
  const std::string file = write("huge.json", R"({"a_s": )" + numbers + R"(, "b_s_per_byte": 1e-9})");
  expect_refused("plan --model resnet18 -P 2 --network " + file, "a_s is [0,1,1,1");
}

TEST_F(BadInput, TimesNearTheLargestDoubleAreRefusedNotAHang) {
  expect_refused("plan --profile " + profile("fp.json", "1e308") + " -P 2", "fp_s\" is 1e+308");
  expect_refused("simulate --profile " + profile("fp2.json", "1e307") + " -P 2", "fp_s\" is 1e+307");
  expect_refused("plan --profile " + profile("day.json", "90000") + " -P 2", "expected a number >= 0 (seconds), at most 86400");
}

TEST_F(BadInput, AReleaseOffsetNearTheLargestDoubleIsRefusedNotAHang) {
  const std::string saved = (dir_ / "s.json").string();
  ASSERT_EQ(weft("simulate --model resnet18 -P 2 --arch ps --strategy ps --schedule-out " + saved).status, 0);
  nlohmann::json s = nlohmann::json::parse(std::ifstream(saved));
  s["iterations"][0][0]["release_offset_s"] = {0.0, 1e308};
  expect_refused("simulate --model resnet18 -P 2 --arch ps --schedule " + write("far.json", s.dump()),
                 "release offset 1e+308 s outside [0, 86400] s");
}

TEST_F(BadInput, ScheduleFieldsOutOfRangeAreRefused) {
  const std::string saved = (dir_ / "s.json").string();
  ASSERT_EQ(weft("simulate --model resnet18 -P 2 --arch ps --servers 2 --strategy ps --schedule-out " + saved).status,
            0);
  nlohmann::json s = nlohmann::json::parse(std::ifstream(saved));
  nlohmann::json credit = s;
  credit["dispatch"]["credit_B"] = -1;
  expect_refused("simulate --model resnet18 -P 2 --arch ps --servers 2 --schedule " + write("c.json", credit.dump()),
                 "dispatch.credit_B is -1, expected an integer in [0, ");
  nlohmann::json server = s;
  server["iterations"][0][0]["server"] = 2;
  expect_refused("simulate --model resnet18 -P 2 --arch ps --servers 2 --schedule " + write("v.json", server.dump()),
                 "iterations[0][0].server is 2; expected a server of --servers 2 (0 to 1)");
  nlohmann::json alpha = s;
  alpha["easgd"]["alpha"] = -1;
  expect_refused("simulate --model resnet18 -P 2 --arch ps --servers 2 --schedule " + write("a.json", alpha.dump()),
                 "easgd alpha -1");
}

TEST_F(BadInput, CountsAboveTheirMaximumAreRefusedBeforeAnyAllocation) {
  expect_refused("plan --model resnet18 --workers 100000000", "--workers 100000000: expected an integer in [1, 65536]");
  expect_refused("simulate --model resnet18 -P 2 -n 1000000000", "--iterations 1000000000: expected an integer in");
  expect_refused("simulate --model resnet18 -P 2 --arch ps --servers 1000000",
                 "--servers 1000000: expected an integer in [1, 65536]");
  expect_refused("plan --model resnet18 -P 2 --H 1000000", "--H 1000000: expected an integer in [1, 10000]");
}

TEST_F(BadInput, QuestionableValuesAreRefused) {
  expect_refused("plan --model resnet18 -P 2 --arch ps --easgd-alpha -1", "--easgd-alpha -1: expected a finite number in [0, 1]");
  const std::string fit = write("fit.json", R"({"points": [{"bytes": 1000, "seconds": -0.5},
                                                           {"bytes": 2000, "seconds": 0.1}]})");
  expect_refused("plan --model resnet18 -P 2 --network " + fit, "points[0].seconds = -0.5");
  expect_refused("plan --model resnet18 -P 2 --network " + write("a.json", R"({"a_s": -1, "b_s_per_byte": 1e-9})"),
                 "a_s is -1");
}


// docs/limits.md, "Numeric flags": each refused as it is parsed, naming the flag,
// the value as given and the range (src/units/ranges.h).
TEST_F(BadInput, NumericFlagsOutsideTheirRangeAreRefusedNamingTheRange) {
  expect_refused("plan --model resnet18 -P 2 --bandwidth 1e-300Gbit",
                 "--bandwidth 1e-300Gbit: expected a rate in [1Kbit, 10Tbit]");
  expect_refused("plan --model resnet18 -P 2 --bandwidth 100Tbit", "--bandwidth 100Tbit: expected a rate in");
  expect_refused("plan --model resnet18 -P 2 --latency 1e300", "--latency 1e300: expected a duration in [0, 86400] s");
  expect_refused("simulate --model gpt2 -P 16 --strategy dcredit --partition 16",
                 "--partition 16: expected a size in [1KiB, 1PiB]");
  expect_refused("simulate --model resnet18 -P 16 --strategy bytescheduler --partition 1",
                 "--partition 1: expected a size in [1KiB, 1PiB]");
  expect_refused("plan --model resnet18 -P 2 --credit 1e300", "--credit 1e300: expected a size in [1KiB, 1PiB]");
  expect_refused("plan --model resnet18 -P 2 --easgd-beta nan", "--easgd-beta nan: expected a finite number in (0, 1]");
  expect_refused("simulate --model resnet18 -P 2 --trace-iterations 1e9", "--trace-iterations 1e9");
  expect_refused("simulate --model resnet18 -P 2 --trace t.json --trace-iterations 0",
                 "--trace-iterations 0: expected an integer in [1, 100000]");
  expect_refused("netem -P 2 -B 1Gbit --grace 1e300 -- true", "--grace 1e300: expected a duration in (0, 86400] s");
  expect_refused("netem -P 2 -B 1Gbit --timeout 1e300 -- true", "--timeout 1e300: expected a duration in [0, 604800] s");
  expect_refused("netem -P 2 -B 1e-300Gbit -- true", "--bandwidth 1e-300Gbit: expected a rate");
}

// A partition at least the floor can still cut a huge model too finely: the
// count of messages is bounded too, before any is made.
TEST_F(BadInput, APartitionThatMakesTooManyMessagesIsRefusedNamingTheCount) {
  const std::string big = write("big.json", R"({"model": "big", "layers": [{"name": "a", "params": 1099511627776,
                                               "fp_s": 0.001, "bp_s": 0.002}]})");
  expect_refused("simulate --profile " + big + " -P 2 --strategy bytescheduler --partition 1KiB",
                 "--partition 1KiB: big in blocks of 1KiB is 4294967296 messages an iteration, more than the 1048576");
}

// Each bound alone allows a run of days; their product is bounded as well.
TEST_F(BadInput, ASimulationOfTooManyEventsIsRefusedBeforeItStarts) {
  std::string layers;
  for (int l = 0; l < 20'000; ++l) {
    layers += std::string(l == 0 ? "" : ",") + R"({"name": "l", "params": 1000, "fp_s": 0.0001, "bp_s": 0.0002})";
  }
  const std::string deep = write("deep.json", R"({"model": "deep", "layers": [)" + layers + "]}");
  expect_refused("simulate --profile " + deep + " -P 10000 -n 100000 --no-tune", "events to simulate, more than");
}

TEST_F(BadInput, NetemRefusesAProgramItCannotStart) {
  expect_refused("netem -P 1 -B 1Gbit -- /nonexistent/prog", "command `/nonexistent/prog`: no such file");
  expect_refused("netem -P 1 -B 1Gbit -- " + write("script", "echo hi\n"), "not an executable file");
}

// A value pasted by mistake is quoted in a few dozen characters with its length,
// whoever reports it: weft's checks and CLI11's conversions alike. (One argument
// may hold at most 128 KiB on Linux.)
TEST_F(BadInput, AHugeFlagValueIsQuotedInAFewDozenCharacters) {
  const std::string huge(100'000, '9');
  expect_refused("plan --model resnet18 -P 2 --bandwidth " + huge + "x", "(100001 characters)");
  expect_refused("plan --model resnet18 -P 2 --latency " + huge, "(100000 characters)");
  expect_refused("plan --model " + huge + " -P 2", "(100000 characters)");
  const Ran cli11 = weft("plan --model resnet18 -P " + std::string(100'000, 'x'));
  EXPECT_EQ(cli11.status, 2);
  EXPECT_LT(cli11.output.size(), 600u) << cli11.output.substr(0, 2000);
  EXPECT_NE(cli11.output.find("(100000 characters)"), std::string::npos) << cli11.output.substr(0, 2000);
}

#ifdef WEFT_HAVE_RUNTIME
TEST_F(BadInput, BenchReportRefusesResultsWithImpossibleCounts) {
  const fs::path committed = fs::path("fuzz") / "corpus" / "bench_results" / "v2.json";
  nlohmann::json bench = nlohmann::json::parse(std::ifstream(committed));
  ASSERT_EQ(weft("bench --report " + committed.string()).status, 0);
  // A weft-bench/1 file from before runs recorded their compute still loads.
  const Ran v1 = weft("bench --report fuzz/corpus/bench_results/v1-before-compute.json");
  EXPECT_EQ(v1.status, 0) << v1.output;
  bench["workers"] = -1;
  expect_refused("bench --report " + write("bench.json", bench.dump()), "workers is -1, expected an integer in [1, ");
  bench["schema"] = "weft-bench/9";
  expect_refused("bench --report " + write("bench9.json", bench.dump()),
                 R"(schema is "weft-bench/9", which this weft does not read)");
}

TEST_F(BadInput, TrainBoundsTheProcessesItStarts) {
  expect_refused("train --model mlp --synthetic --steps 1 --nproc 100000", "--nproc 100000: expected an integer in [1, 256]");
  expect_refused("train --model mlp --synthetic --steps 1 --nproc 0", "--nproc 0: expected an integer in [1, 256]");
}

TEST_F(BadInput, TrainRefusesRatesTimesAndLengthsOutsideTheirRanges) {
  expect_refused("train --model mlp --synthetic --steps 1 --lr 1e308", "--lr 1e308: expected a finite number in (0, 1000]");
  expect_refused("train --model mlp --synthetic --epochs inf", "--epochs inf: expected a finite number in (0, 1000000]");
  expect_refused("train --model mlp --synthetic --steps 1.5", "--steps");
  expect_refused("train --model mlp --synthetic --steps 1 --failure-timeout inf",
                 "--failure-timeout inf: expected a duration in (0, 86400] s");
  expect_refused("train --model mlp --synthetic --steps 1 --failure-timeout 1e308", "--failure-timeout 1e308");
  expect_refused("train --model mlp --synthetic --steps 1 --strategy flsgd --outer-optimizer nesterov --outer-lr 1e308",
                 "--outer-lr 1e308: expected a finite number in (0, 1000]");
  expect_refused("bench --loopback --target-accuracy 2 --out " + (dir_ / "o").string(),
                 "--target-accuracy 2: expected a finite number in (0, 1]");
}

// A program that cannot be started is the user's to fix: exit 2 naming it and
// why, before any process starts (it was 127, "cannot execute the worker program").
TEST_F(BadInput, RunRefusesAProgramItCannotStart) {
  expect_refused("run --nproc 1 -- /nonexistent/prog", "command `/nonexistent/prog`: no such file");
  expect_refused("run --nproc 2 -- " + write("script", "echo hi\n"), "not an executable file");
  expect_refused("run --nproc 2 -- " + dir_.string(), "a directory, not a program");
  expect_refused("run --nproc 2 -- no-such-program-anywhere", "not an executable file in PATH");
}

TEST_F(BadInput, BenchChecksItsFlagsBeforeAnyWork) {
  expect_refused("bench --loopback --model nope --out " + (dir_ / "o").string(), "--model nope");
  expect_refused("bench --loopback --port 0 --out " + (dir_ / "o").string(), "--port 0");
  expect_refused("bench --loopback --port 65500 --out " + (dir_ / "o").string(), "--port 65500");
  expect_refused("bench --loopback --workers 100000 --out " + (dir_ / "o").string(), "--workers 100000");
  expect_refused("bench --loopback --out " + (dir_ / "no" / "such" / "o").string(), "does not exist");
  EXPECT_FALSE(fs::exists(dir_ / "no"));
  expect_refused("bench --loopback --compression none,zip --out " + (dir_ / "o").string(),
                 "--compression zip: not an encoding; accepted: none, fp16");
  expect_refused("bench --loopback --peers ddp,powersgd --out " + (dir_ / "o").string(),
                 "--peers powersgd: not a peer; accepted: ddp, fp16, powersgd:R, postlocalsgd:H");
  // --no-ddp runs no peer: with peers asked for, one of the two is a mistake
  // (CLI11's message, with its usage hint on a second line).
  const Ran both = weft("bench --loopback --peers powersgd:2 --no-ddp --out " + (dir_ / "o").string());
  EXPECT_EQ(both.status, 2);
  EXPECT_NE(both.output.find("--peers excludes --no-ddp"), std::string::npos) << both.output;
  EXPECT_FALSE(fs::exists(dir_ / "o"));
}
#endif

}  // namespace
}  // namespace weft
