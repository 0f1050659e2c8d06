// `weft simulate --schedule`: a schedule written by --schedule-out is simulated as
// it is, and one that cannot be is bad input, said as such. Runs the weft binary
// CMake built (WEFT_BINARY).
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "testing/testing.h"

namespace weft {
namespace {

namespace fs = std::filesystem;

using Ran = test_support::ShellRun;
Ran weft(const std::string& args) { return test_support::weft_shell(args); }

class SimulateSchedule : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("weft_simulate_schedule_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

TEST_F(SimulateSchedule, ASavedScheduleSimulatesAsItWasPlanned) {
  const std::string cluster = "--model resnet18 -P 4 --bandwidth 1Gbit --json";
  const Ran planned = weft("simulate " + cluster + " --strategy mgwfbp --schedule-out " + file("s.json"));
  ASSERT_EQ(planned.status, 0) << planned.output;
  const Ran again = weft("simulate " + cluster + " --schedule " + file("s.json"));
  ASSERT_EQ(again.status, 0) << again.output;
  EXPECT_EQ(nlohmann::json::parse(again.output), nlohmann::json::parse(planned.output));
}

TEST_F(SimulateSchedule, AScheduleThatCannotBeSimulatedIsBadInput) {
  ASSERT_EQ(weft("simulate --model resnet18 -P 4 --strategy dcredit --schedule-out " + file("s.json")).status, 0);
  const auto expect_usage_error = [&](const std::string& args, const std::string& says) {
    const Ran r = weft("simulate " + args);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(says), std::string::npos) << args << "\n" << r.output;
  };
  expect_usage_error("--model resnet18 -P 4 --schedule " + file("s.json") + " --strategy wfbp", "excludes");
  expect_usage_error("--model resnet18 -P 4 --schedule " + file("s.json") + " --H 3", "excludes");
  expect_usage_error("--model gpt2 -P 4 --schedule " + file("s.json"), "does not fit the model and workers given");
  expect_usage_error("--model resnet18 -P 4 --arch ps --schedule " + file("s.json"), "give --arch allreduce");
  std::ofstream(file("broken.json")) << R"({"strategy": "dcredit", "period": )";
  expect_usage_error("--model resnet18 -P 4 --schedule " + file("broken.json"), "not valid JSON");
  expect_usage_error("--model resnet18 -P 4 --schedule " + file("missing.json"), "cannot read the schedule");
}

}  // namespace
}  // namespace weft
