// Helpers of the tests that run the `weft` binary as real processes (test-only).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#ifndef WEFT_BINARY
#error "WEFT_BINARY must name the weft executable"
#endif

namespace weft::testing_util {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

inline std::string read(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline std::vector<float> read_floats(const fs::path& file) {
  const std::string bytes = read(file);
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

// A `weft` process with stdout and stderr sent to files.
class Weft {
 public:
  // `env`: variables set in the child, after the job's own are cleared.
  Weft(const std::vector<std::string>& args, const fs::path& dir,
       const std::vector<std::pair<std::string, std::string>>& env = {})
      : err_(dir / "stderr") {
    std::vector<std::string> argv{WEFT_BINARY};
    argv.insert(argv.end(), args.begin(), args.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      std::vector<char*> p;
      for (auto& a : argv) p.push_back(a.data());
      p.push_back(nullptr);
      const int out = ::open((dir / "stdout").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int err = ::open(err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(out, 1);
      ::dup2(err, 2);
      for (const char* v : {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "WEFT_LAUNCHED_WORKER"}) {
        ::unsetenv(v);
      }
      for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
      ::execv(p[0], p.data());
      ::_exit(127);
    }
  }
  ~Weft() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }

  // The exit status, or -1 if it did not exit within `limit` (then it is killed).
  int wait(std::chrono::seconds limit) {
    const auto deadline = Clock::now() + limit;
    int status = 0;
    while (Clock::now() < deadline) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return -1;
  }
  std::string stderr_text() const { return read(err_); }

 private:
  fs::path err_;
  pid_t pid_ = -1;
  bool exited_ = false;
};

// The children of `parent` (from /proc/<pid>/stat's ppid field).
inline std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::istringstream stat(read(entry.path() / "stat"));
    std::string pid, comm, state;
    pid_t ppid = 0;
    // comm may hold spaces but is parenthesised; ours ("weft") does not.
    stat >> pid >> comm >> state >> ppid;
    if (ppid == parent) out.push_back(std::stoi(name));
  }
  return out;
}

// The RANK `pid` was started with (from its environment), or -1.
inline int rank_of(pid_t pid) {
  const std::string env = read(fs::path("/proc") / std::to_string(pid) / "environ");
  const auto at = env.find(std::string("\0RANK=", 6));
  return at == std::string::npos ? -1 : std::stoi(env.substr(at + 6));
}

class TrainTest : public testing::Test {
 protected:
  void SetUp() override {
    const auto* info = testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / fmt::format("weft_train_test_{}_{}", ::getpid(), info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // Runs weft to completion in its own subdirectory; returns (status, stderr).
  std::pair<int, std::string> weft(const std::string& name, const std::vector<std::string>& args,
                                   std::chrono::seconds limit = std::chrono::seconds(300)) {
    const fs::path sub = dir_ / name;
    fs::create_directories(sub);
    Weft process(args, sub);
    const int status = process.wait(limit);
    return {status, process.stderr_text()};
  }

  // Starts the long-running `weft train <args> --metrics M`, waits until it has
  // `processes` children and ranks 0..workers-1 have each written a metrics line,
  // SIGKILLs the child started as rank `victim`, and checks that the job exits
  // non-zero within 90 s, says `expected` on stderr and leaves no child alive.
  // Returns how long the job took to exit after the kill (0 if it did not).
  Clock::duration kill_mid_run(std::vector<std::string> args, int processes, int workers, int victim,
                               const std::string& expected) {
    const fs::path sub = dir_ / "job";
    fs::create_directories(sub);
    const fs::path metrics = dir_ / "metrics.jsonl";
    args.insert(args.begin(), "train");
    args.insert(args.end(), {"--metrics", metrics.string()});
    Weft job(args, sub);
    const auto deadline = Clock::now() + std::chrono::seconds(120);
    std::vector<pid_t> children;
    for (;;) {
      if (Clock::now() > deadline) {
        ADD_FAILURE() << "the job did not start training: " << job.stderr_text();
        return {};
      }
      children = children_of(job.pid());
      const std::string lines = read(metrics);
      bool all = static_cast<int>(children.size()) == processes;
      for (int r = 0; r < workers; ++r) all = all && lines.find(fmt::format("\"rank\":{}", r)) != std::string::npos;
      if (all) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    pid_t target = -1;
    for (pid_t pid : children) {
      if (rank_of(pid) == victim) target = pid;
    }
    if (target <= 0 || ::kill(target, SIGKILL) != 0) {
      ADD_FAILURE() << "no child of the job runs as rank " << victim;
      return {};
    }
    const auto killed = Clock::now();
    const int status = job.wait(std::chrono::seconds(90));
    const auto exit_after = Clock::now() - killed;
    if (status == -1) {
      ADD_FAILURE() << "the job did not exit";
      return {};
    }
    EXPECT_NE(status, 0);
    const std::string err = job.stderr_text();
    EXPECT_NE(err.find(expected), std::string::npos) << err;
    for (pid_t pid : children) {
      EXPECT_FALSE(fs::exists(fs::path("/proc") / std::to_string(pid))) << "process " << pid << " survived";
    }
    return exit_after;
  }

  // A profile of `model` with its real layer sizes (measured by `weft profile`)
  // and fixed layer times, written under dir_: what the planner makes of it is
  // the same on every run, unlike a profile measured on a loaded machine.
  fs::path fixed_time_profile(const std::string& model, int batch, double fp_s, double bp_s) {
    const fs::path measured = dir_ / "measured-profile.json";
    const auto [status, err] = weft("profile", {"profile", "--model", model, "--batch", std::to_string(batch),
                                                "--iterations", "1", "--warmup", "0", "--out", measured.string()});
    EXPECT_EQ(status, 0) << err;
    if (status != 0) return {};
    nlohmann::json profile = nlohmann::json::parse(read(measured));
    for (nlohmann::json& layer : profile["layers"]) {
      layer["fp_s"] = fp_s;
      layer["bp_s"] = bp_s;
    }
    const fs::path fixed = dir_ / "profile.json";
    std::ofstream(fixed) << profile.dump();
    return fixed;
  }

  // The accuracy of the last evaluation in a --metrics file, or -1 if none.
  static double final_accuracy(const fs::path& metrics) {
    double accuracy = -1;
    std::istringstream lines(read(metrics));
    for (std::string line; std::getline(lines, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j.contains("eval")) accuracy = j["eval"]["accuracy"];
    }
    return accuracy;
  }

  fs::path dir_;
};

}  // namespace weft::testing_util
