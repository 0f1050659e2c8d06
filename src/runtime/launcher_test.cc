// The launcher with /bin/sh children standing in for workers: what each child is
// told (the torchrun variables), and that failures are reported and leave no
// process behind.
#include "runtime/launcher.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "runtime/worker_env.h"
#include "units/cores.h"
#include "testing/testing.h"
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

TEST_F(LauncherTest, ARankKilledBySignalIsReportedSo) {
  const auto [status, err] = run(2, "if [ $RANK = 0 ]; then kill -9 $$; fi; exec sleep 60", /*failure_timeout=*/0.5);
  EXPECT_NE(status, 0);
  EXPECT_NE(err.find("rank 0 failed (killed by signal 9)"), std::string::npos) << err;
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

}  // namespace
}  // namespace weft::runtime
