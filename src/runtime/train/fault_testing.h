// Faults injected for real into a running `weft train` job (test-only): a rank
// killed or stopped, the launcher signalled, a link cut. A FaultTest starts the
// job, waits until every rank trains, injects the fault and checks what every fault
// must end with (docs/failures.md): the job exits non-zero within its limit, names
// the rank and why, prints no LibTorch stack trace, and leaves no process and no
// half-written metrics line. Used by runtime/train/fault_test.cc (loopback) and
// netem/fault_test.cc (emulated links, root).
#pragma once

#include <signal.h>

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/train/train_test_util.h"

namespace weft::testing_util {

// How a faulted job ended.
struct FaultOutcome {
  int status = -1;        // weft's exit status; -1 if it did not exit in time
  std::string err;        // its stderr
  pid_t launcher = 0;     // the `weft train` process
  Clock::duration took{};  // from the fault to its exit
};

class FaultTest : public TrainTest {
 protected:
  // The long-running training job every fault test injects into: `extra` added.
  // A job with servers starts slowly on a loaded machine: give it a longer timeout.
  static std::vector<std::string> job_args(std::vector<std::string> extra, const std::string& failure_timeout = "3") {
    std::vector<std::string> args{"train", "--model", "mlp", "--synthetic", "--steps", "1000000", "--no-progress",
                                  "--failure-timeout", failure_timeout};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  // Starts weft with `args` (plus --metrics), waits until `processes` ranks run and
  // each of ranks 0..workers-1 has written a metrics line, calls `inject` with the
  // launcher's pid and its children, and waits up to `limit` for weft to exit.
  // Then checks what every fault must end with (top of file).
  FaultOutcome inject(std::vector<std::string> args, int processes, int workers,
                      const std::function<void(pid_t launcher, const std::vector<pid_t>& ranks)>& fault,
                      std::chrono::seconds limit = std::chrono::seconds(60)) {
    const fs::path sub = dir_ / "job";
    fs::create_directories(sub);
    const fs::path metrics = dir_ / "metrics.jsonl";
    args.insert(args.end(), {"--metrics", metrics.string()});
    Weft job(args, sub);
    FaultOutcome outcome{.launcher = job.pid()};
    std::vector<pid_t> ranks;
    for (const auto deadline = Clock::now() + std::chrono::seconds(120);;) {
      if (Clock::now() > deadline) {
        ADD_FAILURE() << "the job did not start training: " << job.stderr_text();
        return outcome;
      }
      ranks.clear();
      for (pid_t pid : children_of(job.pid())) {
        if (rank_of(pid) >= 0) ranks.push_back(pid);
      }
      const std::string lines = read_text(metrics);
      bool all = static_cast<int>(ranks.size()) == processes;
      for (int r = 0; r < workers; ++r) all = all && lines.find(fmt::format("\"rank\":{}", r)) != std::string::npos;
      if (all) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    const auto injected = Clock::now();
    fault(job.pid(), ranks);
    outcome.status = job.wait(limit);  // kills it (and so, by PDEATHSIG, its ranks) if not
    outcome.took = Clock::now() - injected;
    outcome.err = job.stderr_text();
    EXPECT_NE(outcome.status, -1) << "the job did not exit within " << limit.count() << " s:\n" << outcome.err;
    EXPECT_NE(outcome.status, 0) << outcome.err;
    // No LibTorch stack trace ("Exception raised from ...", "frame #3: ...").
    EXPECT_EQ(outcome.err.find("frame #"), std::string::npos) << outcome.err;
    EXPECT_EQ(outcome.err.find("Exception raised from"), std::string::npos) << outcome.err;
    for (pid_t pid : ranks) {
      // A zombie would be the launcher's to reap: gone means gone from /proc.
      EXPECT_FALSE(fs::exists(fs::path("/proc") / std::to_string(pid))) << "rank process " << pid << " survived";
    }
    std::istringstream lines(read_text(metrics));
    for (std::string line; std::getline(lines, line);) {
      EXPECT_TRUE(nlohmann::json::accept(line)) << "half-written metrics line: " << line;
    }
    return outcome;
  }

  // The rank process started as RANK=`rank`.
  static pid_t rank_process(const std::vector<pid_t>& ranks, int rank) {
    for (pid_t pid : ranks) {
      if (rank_of(pid) == rank) return pid;
    }
    ADD_FAILURE() << "no process runs as rank " << rank;
    return -1;
  }

  static void signal_rank(const std::vector<pid_t>& ranks, int rank, int signal) {
    const pid_t pid = rank_process(ranks, rank);
    if (pid > 0) {
      EXPECT_EQ(::kill(pid, signal), 0);
    }
  }
};

}  // namespace weft::testing_util
