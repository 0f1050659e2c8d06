// Faults injected for real into `weft train --nproc` over loopback
// (docs/failures.md): a worker or a server stopped, the launcher signalled, rank 0
// stalled at start-up. (A killed worker or server: train_integration_test.cc and
// ps_train_test.cc.) Each job fails within seconds: --failure-timeout 3.
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>

#include "runtime/train/fault_testing.h"

namespace weft::testing_util {
namespace {

using std::chrono::seconds;

class LoopbackFaults : public FaultTest {};

TEST_F(LoopbackFaults, AStoppedWorkerIsNamedAndEndsTheJob) {
  const FaultOutcome out = inject(job_args({"--nproc", "2"}), 2, 2, [](pid_t, const std::vector<pid_t>& ranks) {
    signal_rank(ranks, 1, SIGSTOP);
  });
  EXPECT_NE(out.err.find("rank 1 was stopped (SIGSTOP)"), std::string::npos) << out.err;
  // Within the failure timeout and the kill grace, plus start-up slack: not timeout + grace + 5 s.
  EXPECT_LT(out.took, seconds(3 + 5 + 2)) << out.err;
}

TEST_F(LoopbackFaults, AStoppedServerIsNamedAndEndsTheJob) {
  const FaultOutcome out =
      inject(job_args({"--nproc", "2", "--strategy", "ps-interleaved", "--servers", "1"}, "10"), 3, 2,
             [](pid_t, const std::vector<pid_t>& ranks) { signal_rank(ranks, 2, SIGSTOP); });
  EXPECT_NE(out.err.find("server 0 (rank 2) was stopped (SIGSTOP)"), std::string::npos) << out.err;
}

class LauncherSignals : public FaultTest, public testing::WithParamInterface<int> {};

TEST_P(LauncherSignals, EndTheJobWithTheShellsStatus) {
  const int signal = GetParam();
  const FaultOutcome out = inject(job_args({"--nproc", "2"}), 2, 2,
                                  [signal](pid_t launcher, const std::vector<pid_t>&) { ::kill(launcher, signal); });
  EXPECT_EQ(out.status, 128 + signal) << out.err;
  EXPECT_NE(out.err.find(fmt::format("interrupted by SIG{}", ::sigabbrev_np(signal))), std::string::npos) << out.err;
}

// Note [Signals a worker ends on]: started as a script's `weft train &` (SIGINT
// ignored) or under nohup (SIGHUP ignored), the job still ends at once on the
// signal: the workers do not inherit "ignored". Without that they waited for the
// launcher's SIGKILL, 5 s later. (Within a second on an idle machine; the bound
// leaves room for a loaded one.)
TEST_P(LauncherSignals, EndTheJobAtOnceEvenWhenTheLauncherInheritedThemIgnored) {
  const int signal = GetParam();
  struct sigaction ignore {}, previous {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(signal, &ignore, &previous);
  const FaultOutcome out = inject(job_args({"--nproc", "2"}), 2, 2,
                                  [signal](pid_t launcher, const std::vector<pid_t>&) { ::kill(launcher, signal); });
  ::sigaction(signal, &previous, nullptr);
  EXPECT_EQ(out.status, 128 + signal) << out.err;
  EXPECT_LT(out.took, seconds(3)) << out.err;
  EXPECT_EQ(out.err.find("killing"), std::string::npos) << out.err;
}

INSTANTIATE_TEST_SUITE_P(IntTermHup, LauncherSignals, testing::Values(SIGINT, SIGTERM, SIGHUP),
                         [](const testing::TestParamInfo<int>& info) { return std::string(::sigabbrev_np(info.param)); });

// Nobody listens at MASTER_PORT: rank 1's rendezvous times out in LibTorch,
// whose message carries a stack trace. The user sees one line.
TEST_F(LoopbackFaults, ARendezvousThatTimesOutIsOneLineWithoutAStackTrace) {
  const fs::path sub = dir_ / "rank1";
  fs::create_directories(sub);
  Weft rank1({"train", "--model", "mlp", "--synthetic", "--steps", "1", "--no-progress", "--failure-timeout", "2"}, sub,
             {{"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "1"}, {"RANK", "1"}, {"WORLD_SIZE", "2"}});
  const int status = rank1.wait(seconds(90));
  const std::string err = rank1.stderr_text();
  EXPECT_EQ(status, 1) << err;
  EXPECT_NE(err.find("weft: rank 1: rendezvous at MASTER_ADDR:MASTER_PORT = 127.0.0.1:1 failed"), std::string::npos)
      << err;
  EXPECT_EQ(err.find("frame #"), std::string::npos) << err;
  EXPECT_EQ(err.find("Exception raised from"), std::string::npos) << err;
}

}  // namespace
}  // namespace weft::testing_util
