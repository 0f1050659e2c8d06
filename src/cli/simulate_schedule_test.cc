// `weft simulate --schedule`: a schedule written by --schedule-out is simulated as
// it is, and one that cannot be is bad input, said as such. Runs the weft binary
// CMake built (WEFT_BINARY).
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
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

// Note [Sites in a schedule]: a hierarchical schedule travels with its reach,
// simulates as it was planned on the same sites, and needs sites to simulate.
TEST_F(SimulateSchedule, AScheduleWithSitesNeedsTheSites) {
  const std::string sites = "--model resnet18 -P 4 --bandwidth 1Gbit --latency 0.05ms --sites 2x2 "
                            "--wan-bandwidth 20Mbit --wan-latency 20ms --json";
  const Ran planned =
      weft("simulate " + sites + " --strategy flsgd --H 4 --hierarchical --site-every 2 --schedule-out " +
           file("h.json"));
  ASSERT_EQ(planned.status, 0) << planned.output;
  std::ifstream in(file("h.json"));
  const nlohmann::json schedule = nlohmann::json::parse(in);
  std::set<std::string> reaches;
  for (const auto& iteration : schedule["iterations"]) {
    for (const auto& op : iteration) reaches.insert(op.value("reach", "all"));
  }
  EXPECT_EQ(reaches, (std::set<std::string>{"by-sites", "site"}));
  const Ran again = weft("simulate " + sites + " --schedule " + file("h.json"));
  ASSERT_EQ(again.status, 0) << again.output;
  EXPECT_EQ(nlohmann::json::parse(again.output), nlohmann::json::parse(planned.output));
  const Ran flat = weft("simulate --model resnet18 -P 4 --schedule " + file("h.json"));
  EXPECT_EQ(flat.status, 2) << flat.output;
  EXPECT_NE(flat.output.find("needs sites"), std::string::npos) << flat.output;
  // The site options are planning options: not with --schedule.
  const Ran both = weft("simulate " + sites + " --schedule " + file("h.json") + " --hierarchical");
  EXPECT_EQ(both.status, 2) << both.output;
}

}  // namespace
}  // namespace weft
