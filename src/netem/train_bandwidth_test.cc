// `weft train --nproc K --bandwidth Q` trains behind emulated links (Note [Training
// on emulated links], cli/emulated_training.h), leaves nothing behind, and without
// root refuses, saying what to do.
//
// Needs root (label `root`) and the runtime; skips itself without root. The timed
// check is a lower bound only: no iteration can move the model over the link
// faster than the link's rate, which on loopback it would by a factor of hundreds.
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <sstream>
#include <string>

#include "testing/testing.h"

namespace weft::netem {
namespace {

namespace fs = std::filesystem;
using namespace weft::test_support;

// The `mlp` runtime model, 784 → 256 → 128 → 10 with biases, in float32.
constexpr double kMlpBytes = 4.0 * (784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
constexpr double kLinkBytesPerSecond = 10e6 / 8;  // "10Mbit", counted on frames
constexpr int kSteps = 4;

class TrainBandwidth : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("train_bandwidth_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<std::string> train_args() const {
    return {"train", "--model", "mlp", "--synthetic", "--strategy", "ssgd", "--nproc", "2",
            "--bandwidth", "10Mbit", "--steps", std::to_string(kSteps), "--batch", "8", "--no-progress",
            "--metrics", (dir_ / "metrics.jsonl").string()};
  }

  fs::path dir_;
};

// ssgd all-reduces the whole model after each backward, and the next forward waits
// for it: every iteration but the first (whose iteration_s ends before its
// all-reduce starts) holds a whole all-reduce, 2(P−1)/P·n = n bytes each way over
// each worker's link for P = 2 (docs/design.md §1.2).
TEST_F(TrainBandwidth, TrainsBehindTheLinkAndLeavesNothing) {
  SKIP_UNLESS_PRIVILEGED();
  const WeftRun run = run_weft(train_args(), dir_ / "train.log");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("2 workers on emulated 10Mbit links"), std::string::npos) << run.output;
  // The ranks plan for TCP's payload over 1500-byte frames (netem::payload_rate).
  EXPECT_NE(run.output.find("planned for the 9.564Mbit TCP delivers over them"), std::string::npos) << run.output;

  std::map<int, double> training_seconds;  // per rank, the sum of its iterations after the first
  std::map<int, int> iterations;
  std::istringstream lines(read_text(dir_ / "metrics.jsonl"));
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (!j.contains("iteration_s")) continue;
    const int rank = j.at("rank").get<int>();
    if (j.at("iter").get<int>() > 0) training_seconds[rank] += j.at("iteration_s").get<double>();
    ++iterations[rank];
  }
  ASSERT_EQ(iterations, (std::map<int, int>{{0, kSteps}, {1, kSteps}}));
  // The tbf may start a transfer with its 1 ms bucket of tokens at line rate (Note
  // [Token bucket parameters]); 5% covers that many times over.
  const double lower_bound = (kSteps - 1) * kMlpBytes / kLinkBytesPerSecond * 0.95;
  for (const auto& [rank, seconds] : training_seconds) {
    std::printf("rank %d: iterations 1..%d in %.3f s; the link allows no less than %.3f s\n", rank, kSteps - 1,
                seconds, lower_bound);
    EXPECT_GE(seconds, lower_bound) << "rank " << rank << " trained faster than the link: not emulated?";
  }
  EXPECT_EQ(listed_namespaces_of(run.pid), std::vector<std::string>{}) << "namespaces left behind";
  EXPECT_EQ(processes_mentioning(dir_.string()), std::vector<pid_t>{}) << "ranks left running";
}

TEST_F(TrainBandwidth, WithoutRootItSaysWhatToDoAndExitsTwo) {
  SKIP_UNLESS_PRIVILEGED();  // to become unprivileged, a test must start privileged
  // The user the child becomes may write the metrics file, so that what it is
  // refused for is the network alone.
  fs::permissions(dir_, fs::perms::all);
  int output[2];
  ASSERT_EQ(::pipe(output), 0);
  std::vector<std::string> args{WEFT_BINARY};
  for (const std::string& a : train_args()) args.push_back(a);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t child = ::fork();
  if (child == 0) {
    ::dup2(output[1], STDOUT_FILENO);
    ::dup2(output[1], STDERR_FILENO);
    // Leaving uid 0 for good clears every capability.
    if (::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0) ::_exit(100);
    ::execv(argv[0], argv.data());
    ::_exit(101);
  }
  ::close(output[1]);
  std::string text;
  char buffer[4096];
  for (ssize_t n; (n = ::read(output[0], buffer, sizeof buffer)) > 0;) text.append(buffer, n);
  ::close(output[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << text;
  EXPECT_EQ(WEXITSTATUS(status), 2) << text;
  for (const char* expected : {"--bandwidth 10Mbit", "needs root", "sudo", "leave out --bandwidth"}) {
    EXPECT_NE(text.find(expected), std::string::npos) << expected << " not in: " << text;
  }
  EXPECT_EQ(listed_namespaces_of(child), std::vector<std::string>{});
}

}  // namespace
}  // namespace weft::netem
