// The fixture of the tests that train with the `weft` binary as real processes
// (test-only); what other tests share too is in testing/testing.h.
#pragma once

#include <signal.h>
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

#include "testing/testing.h"

namespace weft::testing_util {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

using test_support::children_of;
using test_support::rank_of;
using test_support::read_text;
using test_support::Weft;

inline std::vector<float> read_floats(const fs::path& file) {
  const std::string bytes = read_text(file);
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
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
  // Returns its stderr ("" if it did not exit).
  std::string kill_mid_run(std::vector<std::string> args, int processes, int workers, int victim,
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
      const std::string lines = read_text(metrics);
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
    const int status = job.wait(std::chrono::seconds(90));
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
    return err;
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
    nlohmann::json profile = nlohmann::json::parse(read_text(measured));
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
    std::istringstream lines(read_text(metrics));
    for (std::string line; std::getline(lines, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j.contains("eval")) accuracy = j["eval"]["accuracy"];
    }
    return accuracy;
  }

  fs::path dir_;
};

}  // namespace weft::testing_util
