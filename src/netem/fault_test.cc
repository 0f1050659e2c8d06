// Faults injected for real into `weft train --nproc 2 --bandwidth 100Mbit`, whose
// ranks run behind emulated links (docs/failures.md): a worker or a server killed
// or stopped, a worker's link cut, the launcher signalled; and `weft netem`
// interrupted while it builds. Every job also must leave no namespace. Needs root.
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "netem/netns.h"
#include "netem/process.h"
#include "runtime/train/fault_testing.h"

namespace weft::testing_util {
namespace {

using std::chrono::seconds;

#define SKIP_UNLESS_ROOT()                                                                 \
  if (!::weft::netem::has_network_privileges())                                            \
  GTEST_SKIP() << "needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) to create network namespaces; run "  \
                  "`sudo ctest -L root` in the build directory"

class EmulatedFaults : public FaultTest {
 protected:
  // inject(), then: no namespace of the launcher's is left.
  FaultOutcome inject_emulated(std::vector<std::string> extra, int processes, int workers,
                               const std::function<void(pid_t, const std::vector<pid_t>&)>& fault) {
    extra.insert(extra.end(), {"--nproc", "2", "--bandwidth", "100Mbit"});
    const FaultOutcome out = inject(job_args(extra, processes > workers ? "10" : "3"), processes, workers, fault);
    EXPECT_TRUE(netem::namespaces_of(out.launcher).empty()) << "namespaces left behind:\n" << out.err;
    return out;
  }
};

TEST_F(EmulatedFaults, AKilledWorkerIsNamed) {
  SKIP_UNLESS_ROOT();
  const FaultOutcome out =
      inject_emulated({}, 2, 2, [](pid_t, const std::vector<pid_t>& ranks) { signal_rank(ranks, 1, SIGKILL); });
  EXPECT_NE(out.err.find("worker 1 was killed by signal 9"), std::string::npos) << out.err;
}

TEST_F(EmulatedFaults, AStoppedWorkerIsNamed) {
  SKIP_UNLESS_ROOT();
  const FaultOutcome out =
      inject_emulated({}, 2, 2, [](pid_t, const std::vector<pid_t>& ranks) { signal_rank(ranks, 1, SIGSTOP); });
  EXPECT_NE(out.err.find("worker 1 was stopped (SIGSTOP)"), std::string::npos) << out.err;
  // Within the failure timeout (3 s) and a kill grace (5 s), with slack: not timeout + grace + 5 s.
  EXPECT_LT(out.took, seconds(3 + 5 + 2)) << out.err;
}

TEST_F(EmulatedFaults, AKilledServerIsNamed) {
  SKIP_UNLESS_ROOT();
  const FaultOutcome out = inject_emulated({"--strategy", "ps-interleaved", "--servers", "1"}, 3, 2,
                                           [](pid_t, const std::vector<pid_t>& ranks) { signal_rank(ranks, 2, SIGKILL); });
  EXPECT_NE(out.err.find("server 0 (rank 2) was killed by signal 9"), std::string::npos) << out.err;
}

TEST_F(EmulatedFaults, AStoppedServerIsNamed) {
  SKIP_UNLESS_ROOT();
  const FaultOutcome out = inject_emulated({"--strategy", "ps-interleaved", "--servers", "1"}, 3, 2,
                                           [](pid_t, const std::vector<pid_t>& ranks) { signal_rank(ranks, 2, SIGSTOP); });
  EXPECT_NE(out.err.find("server 0 (rank 2) was stopped (SIGSTOP)"), std::string::npos) << out.err;
}

TEST_F(EmulatedFaults, ACutLinkNamesTheUnreachableWorker) {
  SKIP_UNLESS_ROOT();
  const FaultOutcome out = inject_emulated({}, 2, 2, [](pid_t launcher, const std::vector<pid_t>&) {
    netem::run_checked({"ip", "-netns", netem::namespace_prefix(launcher) + "w1", "link", "set", "eth0", "down"});
  });
  EXPECT_NE(out.err.find("worker 1 was unreachable: its link (eth0"), std::string::npos) << out.err;
}

class EmulatedLauncherSignals : public EmulatedFaults, public testing::WithParamInterface<int> {};

TEST_P(EmulatedLauncherSignals, EndTheJobAndRemoveTheNetwork) {
  SKIP_UNLESS_ROOT();
  const int signal = GetParam();
  const FaultOutcome out =
      inject_emulated({}, 2, 2, [signal](pid_t launcher, const std::vector<pid_t>&) { ::kill(launcher, signal); });
  EXPECT_EQ(out.status, 128 + signal) << out.err;
  EXPECT_NE(out.err.find(fmt::format("interrupted by SIG{}", ::sigabbrev_np(signal))), std::string::npos) << out.err;
}

INSTANTIATE_TEST_SUITE_P(IntTermHup, EmulatedLauncherSignals, testing::Values(SIGINT, SIGTERM, SIGHUP),
                         [](const testing::TestParamInfo<int>& info) { return std::string(::sigabbrev_np(info.param)); });

// A large network takes long to build: SIGTERM stops the building, which removes
// what it made, instead of being noticed only once every namespace exists.
TEST_F(EmulatedFaults, NetemStopsBuildingOnSigterm) {
  SKIP_UNLESS_ROOT();
  const fs::path sub = dir_ / "netem";
  fs::create_directories(sub);
  Weft netem({"netem", "--workers", "200", "--bandwidth", "100Mbit", "--", "/bin/true"}, sub);
  const auto deadline = Clock::now() + seconds(60);
  while (netem::namespaces_of(netem.pid()).size() < 3 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GE(netem::namespaces_of(netem.pid()).size(), 3u) << netem.stderr_text();
  ASSERT_EQ(::kill(netem.pid(), SIGTERM), 0);
  const int status = netem.wait(seconds(60));
  const std::string err = netem.stderr_text();
  EXPECT_EQ(status, 128 + SIGTERM) << err;
  EXPECT_NE(err.find("interrupted by SIGTERM while building the emulated network"), std::string::npos) << err;
  EXPECT_TRUE(netem::namespaces_of(netem.pid()).empty()) << err;
}

}  // namespace
}  // namespace weft::testing_util
