// `weft run` (docs/launcher.md) with real programs: Debian's Python doing a
// torch.distributed Gloo all-reduce in two processes; a rank killed mid-run; bad
// usage. WEFT_BINARY names the binary under test.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "netem/process.h"

#ifndef WEFT_BINARY
#error "WEFT_BINARY must name the weft executable"
#endif

#include "testing/testing.h"

namespace weft::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kPython = "/usr/bin/python3";  // Debian's, which has torch

using test_support::read_text;

struct Ran {
  int status = -1;  // 128 + signal if a signal ended it
  std::string output;
};

class RunCommandTest : public testing::Test {
 protected:
  void SetUp() override {
    const auto* info = testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / fmt::format("weft_run_test_{}_{}", ::getpid(), info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // Runs `binary args...` to completion with the torchrun variables cleared.
  Ran weft(const std::vector<std::string>& args, const std::string& binary = WEFT_BINARY) {
    std::vector<std::string> argv{binary};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<std::string> environment;
    for (const std::string& entry : netem::environment_with({})) {
      const std::string name = entry.substr(0, entry.find('='));
      if (name != "MASTER_ADDR" && name != "MASTER_PORT" && name != "RANK" && name != "WORLD_SIZE" &&
          name != "WEFT_LAUNCHED_WORKER" && name != "PYTHONPATH") {
        environment.push_back(entry);
      }
    }
    const fs::path log = dir_ / "output";
    std::FILE* out = std::fopen(log.c_str(), "w");
    EXPECT_NE(out, nullptr);
    const pid_t pid = netem::spawn({.executable = binary, .argv = argv, .environment = environment,
                                    .output_fd = ::fileno(out), .own_process_group = false});
    std::fclose(out);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), read_text(log)};
  }

  fs::path script(const std::string& name, const std::string& text) {
    const fs::path file = dir_ / name;
    std::ofstream(file) << text;
    return file;
  }

  fs::path dir_;
};

#define SKIP_WITHOUT_TORCH()                                                                     \
  if (::system("/usr/bin/python3 -c 'import torch.distributed' 2>/dev/null") != 0)                \
  GTEST_SKIP() << "needs Debian's python3-torch (/usr/bin/python3 -c 'import torch.distributed')"

// Each rank checks its variables against the contract, all-reduces its rank + 1
// over Gloo, checks the sum, imports the module found only in the weft binary's
// python/ directory (Note [weft run in a build tree]) and writes "ok".
constexpr const char* kAllReduce = R"(
import os, sys
import torch, torch.distributed as dist
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
assert world == 2, world
assert os.environ["LOCAL_RANK"] == str(rank) and os.environ["LOCAL_WORLD_SIZE"] == "2"
assert os.environ["WEFT_ROLE"] == "worker" and os.environ["WEFT_WORKERS"] == "2" and os.environ["WEFT_SERVERS"] == "0"
dist.init_process_group("gloo")
assert dist.get_rank() == rank and dist.get_world_size() == world
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
assert t.item() == 3.0, t
import weft_run_probe
assert weft_run_probe.WHERE == "beside the binary"
dist.destroy_process_group()
open(sys.argv[1] + "/ok." + str(rank), "w").write("ok")
)";

TEST_F(RunCommandTest, TwoPythonProcessesAllReduceOverGloo) {
  SKIP_WITHOUT_TORCH();
  // A copy of the binary with a python/ directory beside it, as in a build tree.
  const fs::path bin = dir_ / "bin";
  fs::create_directories(bin / "python");
  fs::copy_file(WEFT_BINARY, bin / "weft");
  std::ofstream(bin / "python" / "weft_run_probe.py") << "WHERE = 'beside the binary'\n";
  const fs::path file = script("allreduce.py", kAllReduce);
  const Ran ran = weft({"run", "--nproc", "2", "--", kPython, file.string(), dir_.string()}, (bin / "weft").string());
  EXPECT_EQ(ran.status, 0) << ran.output;
  EXPECT_TRUE(fs::exists(dir_ / "ok.0")) << ran.output;
  EXPECT_TRUE(fs::exists(dir_ / "ok.1")) << ran.output;
}

TEST_F(RunCommandTest, AKilledRankIsNamedAndNothingIsLeft) {
  SKIP_WITHOUT_TORCH();
  // Rank 1 kills itself once both are in the group; rank 0 then waits on it.
  const fs::path file = script("killed.py", R"(
import os, signal, sys, time
import torch, torch.distributed as dist
rank = int(os.environ["RANK"])
open(sys.argv[1] + "/pid." + str(rank), "w").write(str(os.getpid()))
dist.init_process_group("gloo")
dist.barrier()
if rank == 1:
    os.kill(os.getpid(), signal.SIGKILL)
while True:
    dist.all_reduce(torch.ones(1))
    time.sleep(0.01)
)");
  const Ran ran = weft({"run", "--nproc", "2", "--failure-timeout", "5", "--", kPython, file.string(), dir_.string()});
  EXPECT_NE(ran.status, 0) << ran.output;
  EXPECT_NE(ran.output.find("rank 1 failed (killed by signal 9)"), std::string::npos) << ran.output;
  for (const char* rank : {"0", "1"}) {
    const std::string pid = read_text(dir_ / (std::string("pid.") + rank));
    ASSERT_FALSE(pid.empty()) << ran.output;
    EXPECT_FALSE(fs::exists(fs::path("/proc") / pid)) << "rank " << rank << " survived";
  }
}

TEST_F(RunCommandTest, ServersAreTheLastRanksAndSaySo) {
  const fs::path file = script("roles.sh", R"(
test "$WEFT_WORKERS" = 2 && test "$WEFT_SERVERS" = 1 && test "$WORLD_SIZE" = 3 || exit 3
if [ "$RANK" = 2 ]; then test "$WEFT_ROLE" = server && test "$WEFT_SERVER_RANK" = 0 || exit 4
else test "$WEFT_ROLE" = worker || exit 5; fi
)");
  const Ran ran = weft({"run", "--nproc", "2", "--servers", "1", "--", "/bin/sh", file.string()});
  EXPECT_EQ(ran.status, 0) << ran.output;
}

TEST_F(RunCommandTest, TheFailedRanksExitStatusIsReturned) {
  const Ran ran = weft({"run", "--nproc", "2", "--", "/bin/sh", "-c", R"(test "$RANK" = 1 && exit 7; exit 0)"});
  EXPECT_EQ(ran.status, 7) << ran.output;
  EXPECT_NE(ran.output.find("rank 1 failed (exit status 7)"), std::string::npos) << ran.output;
}

TEST_F(RunCommandTest, BadUsageExitsTwoWithAClearMessage) {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{
           {{"run", "--nproc", "2"}, "no command to run"},
           {{"run", "--nproc", "2", "--"}, "no command to run"},
           {{"run", "--nproc", "0", "--", "/bin/true"}, "--nproc 0: expected an integer in [1, 256]"},
           {{"run", "--nproc", "-3", "--", "/bin/true"}, "--nproc -3"},
           {{"run", "--nproc", "100000", "--", "/bin/true"}, "--nproc 100000"},
           {{"run", "--nproc", "2", "--servers", "-1", "--", "/bin/true"}, "--servers -1"},
           {{"run", "--nproc", "2", "--frobnicate", "--", "/bin/true"}, "--frobnicate"},
           {{"run", "--", "/bin/true"}, "--nproc is required"},
           {{"run", "--nproc", "2", "--", "no-such-program-here"}, "`no-such-program-here`: not an executable file in PATH"},
           {{"run", "--nproc", "2", "--failure-timeout", "0", "--", "/bin/true"}, "--failure-timeout 0"},
           {{"run", "--nproc", "2", "--server-bandwidth", "1Gbit", "--", "/bin/true"}, "only with --bandwidth"},
       }) {
    const Ran ran = weft(c.args);
    EXPECT_EQ(ran.status, 2) << netem::join_command(c.args) << "\n" << ran.output;
    EXPECT_NE(ran.output.find(c.says), std::string::npos) << netem::join_command(c.args) << "\n" << ran.output;
  }
}

TEST_F(RunCommandTest, NetemRefusesBadWorkerCountsWithExitTwo) {
  for (const auto& [workers, says] : std::vector<std::pair<std::string, std::string>>{
           {"-1", "--workers -1: expected an integer in [1, 256]"},
           {"5000", "--workers 5000: expected an integer in [1, 256]"}}) {
    const Ran ran = weft({"netem", "--workers", workers, "--bandwidth", "1Gbit", "--", "/bin/true"});
    EXPECT_EQ(ran.status, 2) << ran.output;
    EXPECT_NE(ran.output.find(says), std::string::npos) << ran.output;
  }
}

}  // namespace
}  // namespace weft::cli
