// The launcher with /bin/sh children standing in for workers: what each child is
// told (the torchrun variables), and that failures are reported and leave no
// process behind.
#include "runtime/launch/launcher.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include <fmt/format.h>

#include "runtime/launch/worker_env.h"
#include "testing/testing.h"
#include "units/cores.h"
#include "units/units.h"

namespace weft::runtime {
namespace {

namespace fs = std::filesystem;
using test_support::read_text;

class LauncherTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("weft_launcher_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs `script` in each of `n` children (sh -c), returning launch()'s status and
  // what it printed on stderr.
  std::pair<int, std::string> run(int n, const std::string& script, Seconds failure_timeout = 30,
                                  CorePlacement cores = CorePlacement::kAuto) {
    testing::internal::CaptureStderr();
    const int status = launch({.nproc = n, .executable = "/bin/sh", .argv = {"sh", "-c", script},
                               .failure_timeout = failure_timeout, .kill_grace = 1, .cores = cores});
    return {status, testing::internal::GetCapturedStderr()};
  }

  // The pids the children wrote to dir_/pid.<rank>.
  std::set<pid_t> pids() {
    std::set<pid_t> out;
    for (const auto& entry : fs::directory_iterator(dir_)) {
      if (entry.path().filename().string().starts_with("pid.")) out.insert(std::stoi(read_text(entry.path())));
    }
    return out;
  }

  static bool alive(pid_t pid) { return ::kill(pid, 0) == 0; }

  fs::path dir_;
};

TEST_F(LauncherTest, EachChildGetsItsRankAndTheSameRendezvous) {
  const auto [status, err] =
      run(3, "echo \"$MASTER_ADDR $MASTER_PORT $WORLD_SIZE $LOCAL_RANK $WEFT_LAUNCHED_WORKER\" > " + dir_.string() +
                 "/env.$RANK");
  EXPECT_EQ(status, 0) << err;
  std::set<std::string> rendezvous;
  for (int rank = 0; rank < 3; ++rank) {
    std::istringstream line(read_text(dir_ / ("env." + std::to_string(rank))));
    std::string addr, port, world, local, marker;
    line >> addr >> port >> world >> local >> marker;
    EXPECT_EQ(addr, "127.0.0.1");
    EXPECT_EQ(world, "3");
    EXPECT_EQ(local, std::to_string(rank));
    EXPECT_EQ(marker, "1");
    rendezvous.insert(port);
  }
  EXPECT_EQ(rendezvous.size(), 1u) << "all ranks must meet at one port";
}

// Note [Hosts on cores]: pinned, each child runs on its share of the launcher's
// cores; shared, on all of them; auto, pinned where each has a core of its own.
TEST_F(LauncherTest, EachChildRunsWhereItsPlacementSays) {
  const std::string script = "cat /proc/self/status > " + dir_.string() + "/status.$RANK";
  const std::vector<int> all = usable_cores();
  const int n = 3;
  const bool fits = n <= static_cast<int>(all.size());
  for (const CorePlacement placement : {CorePlacement::kPinned, CorePlacement::kShared, CorePlacement::kAuto}) {
    const auto [status, err] = run(n, script, 30, placement);
    ASSERT_EQ(status, 0) << err;
    for (int rank = 0; rank < n; ++rank) {
      const bool pinned =
          placement == CorePlacement::kPinned || (placement == CorePlacement::kAuto && fits);
      EXPECT_EQ(test_support::parse_core_list(read_text(dir_ / ("status." + std::to_string(rank)))),
                pinned ? cores_of(all, rank, n) : all)
          << "rank " << rank << ", " << to_string(placement);
    }
  }
}

TEST_F(LauncherTest, AFailedRankIsNamedAndTheOthersAreStopped) {
  // Rank 1 fails at once; the others would run for a minute, ignoring SIGTERM.
  const std::string script = "echo $$ > " + dir_.string() +
                             "/pid.$RANK; if [ $RANK = 1 ]; then exit 3; fi; trap '' TERM; exec sleep 60";
  const auto [status, err] = run(3, script, /*failure_timeout=*/0.5);
  EXPECT_NE(status, 0);
  EXPECT_NE(err.find("rank 1 failed (exit status 3)"), std::string::npos) << err;
  EXPECT_EQ(pids().size(), 3u);
  for (pid_t pid : pids()) EXPECT_FALSE(alive(pid)) << "child " << pid << " survived";
}

// Rank 0 refuses its input (2) as rank 1 fails on its leaving, reaped first: the
// job's status is still 2 (bad input), whichever failure was seen first.
TEST_F(LauncherTest, BadInputOnAnyRankIsTheJobsStatus) {
  const auto [status, err] = run(2, "if [ $RANK = 0 ]; then sleep 0.3; exit 2; fi; exit 1", /*failure_timeout=*/5);
  EXPECT_EQ(status, 2) << err;
  EXPECT_NE(err.find("rank 1 failed (exit status 1)"), std::string::npos) << err;
  EXPECT_NE(err.find("rank 0 failed (exit status 2) after rank 1"), std::string::npos) << err;
}

TEST_F(LauncherTest, ARankKilledBySignalIsReportedSo) {
  const auto [status, err] = run(2, "if [ $RANK = 0 ]; then kill -9 $$; fi; exec sleep 60", /*failure_timeout=*/0.5);
  EXPECT_NE(status, 0);
  EXPECT_NE(err.find("rank 0 failed (killed by signal 9)"), std::string::npos) << err;
}

// Note [Ranks' stderr]: four ranks each write 300 lines in two write()s apiece;
// every line arrives whole, prefixed by its rank, none lost.
TEST_F(LauncherTest, LinesOfDifferentRanksAreNeverMixed) {
  const std::string payload(200, 'y');
  const std::string script = "i=0; while [ $i -lt 300 ]; do printf 'r%s-%s-' $RANK $i >&2; printf '" + payload +
                             "%s\\n' $RANK >&2; i=$((i+1)); done";
  const auto [status, err] = run(4, script);
  EXPECT_EQ(status, 0) << err;
  std::map<int, int> next;  // each rank's next line number
  std::istringstream lines(err);
  for (std::string line; std::getline(lines, line);) {
    int rank = -1, i = -1;
    char tail[256] = {};
    ASSERT_EQ(std::sscanf(line.c_str(), "[rank %d] r%*d-%d-%250s", &rank, &i, tail), 3) << line;
    EXPECT_EQ(line, fmt::format("[rank {}] r{}-{}-{}{}", rank, rank, i, payload, rank));
    EXPECT_EQ(i, next[rank]++) << line;
  }
  for (int rank = 0; rank < 4; ++rank) EXPECT_EQ(next[rank], 300) << "rank " << rank;
}

// A rank that dies mid-line: its unfinished line comes out, before the verdict.
TEST_F(LauncherTest, ALineLeftUnfinishedByADeadRankIsNotLost) {
  const auto [status, err] =
      run(2, "if [ $RANK = 1 ]; then printf 'last words' >&2; kill -9 $$; fi; exec sleep 60", /*failure_timeout=*/0.5);
  EXPECT_NE(status, 0);
  const auto words = err.find("[rank 1] last words\n");
  EXPECT_NE(words, std::string::npos) << err;
  EXPECT_LT(words, err.find("rank 1 failed (killed by signal 9)")) << err;
}

// Far more than a pipe holds (64 KiB), from two ranks at once: each is read as it
// writes, so neither blocks, and all of it arrives.
TEST_F(LauncherTest, ARankWritingMoreThanAPipeHoldsIsNotHeldUp) {
  const auto [status, err] = run(2, "head -c 2000000 /dev/zero | tr '\\0' x | fold -w 99 >&2");
  EXPECT_EQ(status, 0);
  std::map<std::string, size_t> bytes_of;  // by prefix
  std::istringstream lines(err);
  for (std::string line; std::getline(lines, line);) {
    const auto end = line.find("] ");
    ASSERT_NE(end, std::string::npos) << line.substr(0, 200);
    const std::string text = line.substr(end + 2);
    ASSERT_EQ(text.find_first_not_of('x'), std::string::npos) << line.substr(0, 200);
    bytes_of[line.substr(0, end + 1)] += text.size();
  }
  EXPECT_EQ(bytes_of["[rank 0]"], 2000000u);
  EXPECT_EQ(bytes_of["[rank 1]"], 2000000u);
}

// A rank's own child that keeps the rank's stderr open does not keep the launcher.
TEST_F(LauncherTest, ARanksChildHoldingItsStderrDoesNotHoldTheLauncher) {
  const auto start = std::chrono::steady_clock::now();
  const auto [status, err] = run(2, "sleep 30 & echo $! > " + dir_.string() + "/pid.$RANK; echo started >&2");
  const auto took = std::chrono::steady_clock::now() - start;
  for (pid_t pid : pids()) ::kill(pid, SIGKILL);
  EXPECT_EQ(status, 0) << err;
  EXPECT_NE(err.find("[rank 1] started\n"), std::string::npos) << err;
  EXPECT_LT(took, std::chrono::seconds(10)) << err;
}

// Note [Signals a worker ends on]: a script's `weft train &` runs with SIGINT
// ignored; the children start with SIGINT, SIGTERM and SIGHUP at their defaults.
TEST_F(LauncherTest, ChildrenStartWithTheForwardedSignalsAtTheirDefaults) {
  struct sigaction ignore {}, previous[3];
  ignore.sa_handler = SIG_IGN;
  const int signals[3] = {SIGINT, SIGTERM, SIGHUP};
  for (int k = 0; k < 3; ++k) ::sigaction(signals[k], &ignore, &previous[k]);
  const auto [status, err] = run(2, "grep SigIgn /proc/self/status > " + dir_.string() + "/ignored.$RANK");
  for (int k = 0; k < 3; ++k) ::sigaction(signals[k], &previous[k], nullptr);
  ASSERT_EQ(status, 0) << err;
  for (int rank = 0; rank < 2; ++rank) {
    const std::string line = read_text(dir_ / ("ignored." + std::to_string(rank)));
    const unsigned long long mask = std::stoull(line.substr(line.find(':') + 1), nullptr, 16);
    for (const int sig : signals) EXPECT_EQ(mask & (1ULL << (sig - 1)), 0u) << ::sigabbrev_np(sig) << ": " << line;
  }
}

// The launcher names the signal a rank ignored: the one it sent.
TEST_F(LauncherTest, ARankThatIgnoresAForwardedSignalIsKilledNamingIt) {
  const auto [status, err] =
      run(2, "trap '' INT; echo ready > " + dir_.string() +
                 "/ready.$RANK; while [ ! -e " + dir_.string() + "/ready.0 ] || [ ! -e " + dir_.string() +
                 "/ready.1 ]; do sleep 0.05; done; if [ $RANK = 0 ]; then kill -INT $PPID; fi; exec sleep 60");
  EXPECT_EQ(status, 128 + SIGINT) << err;
  EXPECT_NE(err.find("interrupted by SIGINT"), std::string::npos) << err;
  EXPECT_NE(err.find("ignored SIGINT for 1s: killing"), std::string::npos) << err;
}

// Binds a fresh TCP socket on `host`:`port`, with SO_REUSEADDR if `reuse`, and
// listens on it; returns 0 or the errno of the bind.
int bind_and_listen(in_addr_t host, int port, bool reuse) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  const int on = reuse ? 1 : 0;
  sockaddr_in address{.sin_family = AF_INET, .sin_port = htons(static_cast<uint16_t>(port)), .sin_addr = {htonl(host)}};
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  const int error = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 && ::listen(fd, 1) == 0
                        ? 0
                        : errno;
  ::close(fd);
  return error;
}

// Note [Reserved ports]: held, the port is no one else's; the store binds it all
// the same, as TCPStore does: on every address, with SO_REUSEADDR.
TEST(ReservedPortTest, OnlyTheStoreCanBindAHeldPort) {
  const ReservedPort port;
  ASSERT_GT(port.number(), 0);
  EXPECT_EQ(bind_and_listen(INADDR_LOOPBACK, port.number(), /*reuse=*/false), EADDRINUSE);
  EXPECT_EQ(bind_and_listen(INADDR_ANY, port.number(), /*reuse=*/true), 0);
  EXPECT_NE(ReservedPort().number(), port.number());
}

TEST_F(LauncherTest, WorkerEnvironmentIsReadBackAndCheckedByName) {
  ::setenv("MASTER_ADDR", "10.0.0.1", 1);
  ::setenv("MASTER_PORT", "29500", 1);
  ::setenv("WORLD_SIZE", "4", 1);
  ::setenv("RANK", "3", 1);
  ::unsetenv("LOCAL_RANK");
  const WorkerEnv env = read_worker_env();
  EXPECT_EQ(env.master_addr, "10.0.0.1");
  EXPECT_EQ(env.master_port, 29500);
  EXPECT_EQ(env.rank, 3);
  EXPECT_EQ(env.world, 4);
  EXPECT_EQ(env.local_rank, 3);

  auto error_of = [] {
    try {
      read_worker_env();
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  ::setenv("RANK", "4", 1);
  EXPECT_NE(error_of().find("RANK=4"), std::string::npos) << error_of();
  ::setenv("RANK", "x", 1);
  EXPECT_NE(error_of().find("RANK='x'"), std::string::npos) << error_of();
  ::setenv("RANK", "0", 1);
  ::setenv("MASTER_PORT", "70000", 1);
  EXPECT_NE(error_of().find("MASTER_PORT='70000'"), std::string::npos) << error_of();
  ::unsetenv("MASTER_ADDR");
  EXPECT_NE(error_of().find("MASTER_ADDR is not set"), std::string::npos) << error_of();
  for (const char* v : {"MASTER_PORT", "WORLD_SIZE", "RANK"}) ::unsetenv(v);
  EXPECT_FALSE(has_worker_env());
}

TEST_F(LauncherTest, LocalWorldSizeIsOptionalAndCheckedByName) {
  ::unsetenv("LOCAL_WORLD_SIZE");
  EXPECT_EQ(local_world_size(), std::nullopt);
  ::setenv("LOCAL_WORLD_SIZE", "4", 1);
  EXPECT_EQ(local_world_size(), 4);
  ::setenv("LOCAL_WORLD_SIZE", "0", 1);
  try {
    local_world_size();
    ADD_FAILURE() << "LOCAL_WORLD_SIZE=0 accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("LOCAL_WORLD_SIZE='0'"), std::string::npos) << e.what();
  }
  ::unsetenv("LOCAL_WORLD_SIZE");
}

}  // namespace
}  // namespace weft::runtime
