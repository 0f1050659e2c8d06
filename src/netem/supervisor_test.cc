// supervise() with real processes (sh, sleep) in the test's own network namespace:
// no root needed. The grace periods are short so the suite stays quick; nothing
// here asserts on how long anything took.
#include "netem/supervisor.h"
#include "testing/testing.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

namespace weft::netem {
namespace {

using test_support::process_alive;

// Orphans (what a rank started and left behind) die asynchronously once signalled.
bool gone_soon(pid_t pid) {
  for (int i = 0; i < 200 && process_alive(pid); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return !process_alive(pid);
}

ProcessSpec sh(std::string label, std::string script) {
  return {.label = std::move(label), .argv = {"sh", "-c", std::move(script)}};
}

pid_t read_pid(const std::string& path) {
  std::ifstream in(path);
  pid_t pid = 0;
  in >> pid;
  return pid;
}

class SupervisorTest : public ::testing::Test {
 protected:
  std::string temp_path(const std::string& name) {
    return ::testing::TempDir() + "/supervisor_test_" + std::to_string(::getpid()) + "_" + name;
  }
  const SuperviseOptions quick{.timeout = 60, .grace = 0.2, .kill_after = 0.5};
};

TEST_F(SupervisorTest, AllRanksSucceeding) {
  TerminationSignals signals;
  const RunReport report = supervise({sh("worker 0", "exit 0"), sh("worker 1", "exit 0")}, quick, signals);
  EXPECT_EQ(report.exit_status, 0);
  EXPECT_EQ(report.message, "");
  ASSERT_EQ(report.exits.size(), 2u);
  for (const ProcessExit& e : report.exits) {
    EXPECT_GT(e.pid, 0);
    EXPECT_FALSE(e.stopped_by_supervisor);
    EXPECT_TRUE(WIFEXITED(e.wait_status) && WEXITSTATUS(e.wait_status) == 0);
  }
}

TEST_F(SupervisorTest, EnvironmentIsAddedToTheCallers) {
  TerminationSignals signals;
  ::setenv("WEFT_SUPERVISOR_TEST_KEPT", "yes", 1);
  ProcessSpec rank = sh("worker 0", R"(test "$FOO" = "b a r" && test "$WEFT_SUPERVISOR_TEST_KEPT" = yes)");
  rank.environment = {"FOO=b a r"};
  EXPECT_EQ(supervise({rank}, quick, signals).exit_status, 0);
}

TEST_F(SupervisorTest, AFailureNamesTheRankAndEndsTheOthersAfterTheGrace) {
  TerminationSignals signals;
  const RunReport report = supervise(
      {sh("worker 0", "exec sleep 100"), sh("worker 1", "exit 3"), sh("worker 2", "exec sleep 100")},
      quick, signals);
  EXPECT_EQ(report.exit_status, 3);
  EXPECT_NE(report.message.find("worker 1 exited with status 3"), std::string::npos) << report.message;
  EXPECT_NE(report.message.find("worker 0, worker 2"), std::string::npos) << report.message;
  for (int r : {0, 2}) {
    const ProcessExit& e = report.exits[r];
    EXPECT_TRUE(e.stopped_by_supervisor);
    EXPECT_TRUE(WIFSIGNALED(e.wait_status) && WTERMSIG(e.wait_status) == SIGTERM);
    EXPECT_FALSE(process_alive(e.pid));
  }
  EXPECT_FALSE(report.exits[1].stopped_by_supervisor);
}

TEST_F(SupervisorTest, RanksThatExitWithinTheGraceAreLeftAlone) {
  TerminationSignals signals;
  const RunReport report =
      supervise({sh("worker 0", "exit 1"), sh("worker 1", "exit 0")}, {.grace = 30}, signals);
  EXPECT_EQ(report.exit_status, 1);
  EXPECT_FALSE(report.exits[1].stopped_by_supervisor);
  EXPECT_NE(report.message.find("ended by themselves"), std::string::npos) << report.message;
}

TEST_F(SupervisorTest, ARankThatIgnoresSigtermIsKilled) {
  TerminationSignals signals;
  const RunReport report = supervise(
      {sh("worker 0", "trap '' TERM; while :; do sleep 0.05; done"), sh("worker 1", "exit 2")},
      quick, signals);
  EXPECT_EQ(report.exit_status, 2);
  const ProcessExit& stubborn = report.exits[0];
  EXPECT_TRUE(WIFSIGNALED(stubborn.wait_status) && WTERMSIG(stubborn.wait_status) == SIGKILL);
}

TEST_F(SupervisorTest, WhatARankStartedDiesWithIt) {
  const std::string failing = temp_path("bg_failing");
  const std::string succeeding = temp_path("bg_succeeding");
  TerminationSignals signals;
  const RunReport report = supervise(
      {sh("worker 0", "sleep 100 & echo $! > " + failing + "; wait"),
       sh("worker 1", "sleep 100 & echo $! > " + succeeding),  // exits 0, leaving a child
       sh("worker 2", "sleep 0.3; exit 1")},
      quick, signals);
  EXPECT_EQ(report.exit_status, 1);
  for (const std::string& path : {failing, succeeding}) {
    const pid_t orphan = read_pid(path);
    ASSERT_GT(orphan, 0) << path;
    EXPECT_TRUE(gone_soon(orphan)) << "pid " << orphan << " from " << path << " survived";
    std::remove(path.c_str());
  }
}

TEST_F(SupervisorTest, SigintToTheSupervisorEndsEveryRank) {
  TerminationSignals signals;
  // The rank interrupts us itself, as Ctrl-C would: a real signal, a real handler.
  const RunReport report = supervise(
      {sh("worker 0", "exec sleep 100"), sh("worker 1", "kill -INT $PPID; exec sleep 100")},
      quick, signals);
  EXPECT_EQ(signals.received(), SIGINT);
  EXPECT_EQ(report.exit_status, 128 + SIGINT);
  EXPECT_NE(report.message.find("interrupted by SIGINT"), std::string::npos) << report.message;
  for (const ProcessExit& e : report.exits) {
    EXPECT_TRUE(e.stopped_by_supervisor);
    EXPECT_FALSE(process_alive(e.pid));
  }
}

TEST_F(SupervisorTest, AFlagRaisedBeforehandStartsNothing) {
  TerminationSignals signals;
  signals.raise_flag(SIGTERM);
  const RunReport report = supervise({sh("worker 0", "exit 0")}, quick, signals);
  EXPECT_EQ(report.exit_status, 128 + SIGTERM);
  EXPECT_EQ(report.exits[0].pid, 0);
}

TEST_F(SupervisorTest, TimeoutEndsEveryRank) {
  TerminationSignals signals;
  const RunReport report =
      supervise({sh("worker 0", "exec sleep 100")}, {.timeout = 0.2, .kill_after = 0.5}, signals);
  EXPECT_EQ(report.exit_status, 124);
  EXPECT_NE(report.message.find("timed out"), std::string::npos) << report.message;
  EXPECT_TRUE(report.exits[0].stopped_by_supervisor);
}

TEST_F(SupervisorTest, AProgramThatCannotStartIsThatRanksFailure) {
  TerminationSignals signals;
  const RunReport report = supervise(
      {sh("worker 0", "exec sleep 100"),
       {.label = "worker 1", .argv = {"/nonexistent/weft-no-such-program"}}},
      quick, signals);
  EXPECT_EQ(report.exit_status, 127);
  EXPECT_NE(report.message.find("worker 1 could not start"), std::string::npos) << report.message;
  EXPECT_NE(report.message.find("/nonexistent/weft-no-such-program`: no such file"), std::string::npos)
      << report.message;
  EXPECT_TRUE(report.exits[0].stopped_by_supervisor);
  EXPECT_FALSE(process_alive(report.exits[0].pid));
}

TEST_F(SupervisorTest, ArgumentsReachTheProgramUninterpreted) {
  TerminationSignals signals;
  // A shell would expand $HOME and split on spaces; exec passes them through.
  const ProcessSpec rank{.label = "worker 0",
                         .argv = {"sh", "-c", R"(test "$1" = '$HOME a;b' && test $# = 1)", "sh",
                                  "$HOME a;b"}};
  EXPECT_EQ(supervise({rank}, quick, signals).exit_status, 0);
}

TEST(TerminationSignals, OnlyOneAtATime) {
  TerminationSignals first;
  EXPECT_THROW(TerminationSignals second, std::logic_error);
}

TEST(TerminationSignals, RestoresThePreviousHandler) {
  struct sigaction before {};
  ::sigaction(SIGINT, nullptr, &before);
  { TerminationSignals signals; }
  struct sigaction after {};
  ::sigaction(SIGINT, nullptr, &after);
  EXPECT_EQ(before.sa_handler, after.sa_handler);
}

}  // namespace
}  // namespace weft::netem
