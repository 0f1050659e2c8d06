// run_child and run_children on real processes (/bin/sh); no timed assertions: a
// child that should have been ended is checked to be gone, not how fast.
#include "bench/child.h"
#include "testing/testing.h"

#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace weft::bench {
namespace {

class ChildTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("weft_child_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path file(const std::string& name) const { return dir_ / name; }
  std::string read(const std::string& name) const {
    std::ifstream in(file(name));
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  // The pid the child wrote to `name` (it does so first thing).
  pid_t pid_in(const std::string& name) const { return static_cast<pid_t>(std::stol(read(name))); }

  std::filesystem::path dir_;
  netem::TerminationSignals signals_;
};

bool alive(pid_t pid) { return weft::test_support::process_alive(pid); }

TEST_F(ChildTest, OutputGoesToTheLogAndTheStatusIsReported) {
  const ChildResult r = run_child({.argv = {"sh", "-c", "echo out; echo err >&2; exit 3"},
                                   .environment = {"WEFT_CHILD_TEST=seen"},
                                   .log = file("a.log")},
                                  signals_);
  EXPECT_EQ(r.exit_status, 3);
  EXPECT_FALSE(r.succeeded());
  EXPECT_FALSE(r.stopped_early);
  EXPECT_NE(r.command.find("exit 3"), std::string::npos);
  EXPECT_EQ(read("a.log"), "out\nerr\n");
  EXPECT_TRUE(run_child({.argv = {"sh", "-c", "test \"$WEFT_CHILD_TEST\" = seen"},
                         .environment = {"WEFT_CHILD_TEST=seen"},
                         .log = file("b.log")},
                        signals_)
                  .succeeded());
}

TEST_F(ChildTest, StopEarlyEndsTheChildAndWhatItStarted) {
  const std::string script = "echo $$ > " + file("pid").string() + "; sleep 600 & echo $! > " +
                             file("grandchild").string() + "; wait";
  int polls = 0;
  const ChildResult r =
      run_child({.argv = {"sh", "-c", script},
                 .log = file("c.log"),
                 .stop_early = [&] { return ++polls > 3 && std::filesystem::exists(file("grandchild")); }},
                signals_);
  EXPECT_TRUE(r.stopped_early);
  EXPECT_FALSE(alive(pid_in("pid")));
  EXPECT_FALSE(alive(pid_in("grandchild")));  // the whole process group went
}

TEST_F(ChildTest, ASignalToTheBenchEndsTheChild) {
  signals_.raise_flag(SIGINT);
  const ChildResult r = run_child({.argv = {"sh", "-c", "echo $$ > " + file("pid").string() + "; exec sleep 600"},
                                   .log = file("d.log")},
                                  signals_);
  EXPECT_EQ(r.interrupted_by, SIGINT);
  EXPECT_FALSE(r.succeeded());
}

TEST_F(ChildTest, WhenOneOfSeveralFailsTheOthersAreEnded) {
  const std::vector<ChildResult> rs = run_children(
      {{.argv = {"sh", "-c", "echo $$ > " + file("pid").string() + "; exec sleep 600"}, .log = file("e.log")},
       {.argv = {"sh", "-c", "while [ ! -s " + file("pid").string() + " ]; do sleep 0.01; done; exit 4"},
        .log = file("f.log")}},
      signals_);
  ASSERT_EQ(rs.size(), 2u);
  EXPECT_EQ(rs[1].exit_status, 4);
  EXPECT_EQ(rs[0].exit_status, 128 + SIGTERM);
  EXPECT_FALSE(alive(pid_in("pid")));
}

TEST_F(ChildTest, AProgramNotInPathIsAUsageError) {
  EXPECT_THROW(run_child({.argv = {"weft-no-such-program"}, .log = file("g.log")}, signals_), UsageError);
  EXPECT_THROW(run_child({.argv = {}, .log = file("g.log")}, signals_), std::logic_error);
  EXPECT_THROW(run_child({.argv = {"true"}}, signals_), std::logic_error);
}

TEST_F(ChildTest, LogTailKeepsTheLastLinesAsLastDrawn) {
  std::ofstream(file("h.log")) << "one\ntwo\rthree\nfour\n";
  EXPECT_EQ(log_tail(file("h.log"), 2), "  | three\n  | four\n");
  EXPECT_EQ(log_tail(file("missing.log")), "");
}

}  // namespace
}  // namespace weft::bench
