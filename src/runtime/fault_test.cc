// Faults injected for real into `weft train --nproc` over loopback
// (docs/failures.md): a worker or a server stopped, the launcher signalled, rank 0
// stalled at start-up. (A killed worker or server: train_integration_test.cc and
// ps_train_test.cc.) Each job fails within seconds: --failure-timeout 3.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>

#include "runtime/fault_testing.h"

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
      inject(job_args({"--nproc", "2", "--strategy", "ps-interleaved", "--servers", "1"}), 3, 2,
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

INSTANTIATE_TEST_SUITE_P(IntTermHup, LauncherSignals, testing::Values(SIGINT, SIGTERM, SIGHUP),
                         [](const testing::TestParamInfo<int>& info) { return std::string(::sigabbrev_np(info.param)); });

// Rank 0 accepted the connection (the kernel did: a listening socket never
// accepted) and never answers: rank 1's rendezvous times out in LibTorch, whose
// message carries a stack trace. The user sees one line.
TEST_F(LoopbackFaults, ARendezvousThatTimesOutIsOneLineWithoutAStackTrace) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(::listen(listener, 8), 0);
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const fs::path sub = dir_ / "rank1";
  fs::create_directories(sub);
  Weft rank1({"train", "--model", "mlp", "--synthetic", "--steps", "1", "--no-progress", "--failure-timeout", "2"}, sub,
             {{"MASTER_ADDR", "127.0.0.1"},
              {"MASTER_PORT", std::to_string(ntohs(address.sin_port))},
              {"RANK", "1"},
              {"WORLD_SIZE", "2"}});
  const int status = rank1.wait(seconds(60));
  ::close(listener);
  const std::string err = rank1.stderr_text();
  EXPECT_EQ(status, 1) << err;
  EXPECT_NE(err.find("weft: rank 1: rendezvous at MASTER_ADDR:MASTER_PORT"), std::string::npos) << err;
  EXPECT_EQ(err.find("frame #"), std::string::npos) << err;
  EXPECT_EQ(err.find("Exception raised from"), std::string::npos) << err;
}

}  // namespace
}  // namespace weft::testing_util
