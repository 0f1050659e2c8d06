// Running one `weft` subcommand (or the DDP peer) as a supervised child process,
// its output going to a log file.
//
// netem::supervise runs the ranks of one job; the bench needs something narrower
// and one thing more: a single command whose stdout and stderr go to a file, and
// an early stop decided by the caller (accuracy mode stops a run once its target is
// reached). The child is started by netem::spawn (no shell, own process group, dies
// with us), so a terminal's Ctrl-C reaches only the bench, which then ends the
// child's whole process group: SIGTERM, then SIGKILL after `kill_after`. `weft
// netem` and `weft train --nproc` end their own ranks and remove their namespaces
// on SIGTERM.
//
// Thread-safety: call run_child from one thread at a time (it waits for its child
// by pid, so other children of the process are left alone).
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "netem/supervisor.h"
#include "units/units.h"

namespace weft::bench {

struct ChildOptions {
  std::vector<std::string> argv;  // argv[0] is looked up in $PATH
  std::vector<std::string> environment;  // "NAME=value", added to ours
  std::filesystem::path log;      // stdout and stderr, truncated first; REQUIRED
  Seconds timeout = 0;            // 0: none
  Seconds kill_after = 15;        // after SIGTERM, before SIGKILL: `weft netem` needs
                                  // a moment to end its ranks and remove namespaces
  // Polled about every 100 ms while the child runs; returning true ends it (as a
  // timeout does), and the result says so.
  std::function<bool()> stop_early;
};

struct ChildResult {
  int exit_status = 0;       // as a shell reports it: 128 + signal if killed
  bool stopped_early = false;  // stop_early asked for it
  bool timed_out = false;
  int interrupted_by = 0;    // the signal received by the bench, or 0
  Seconds wall = 0;
  std::string command;       // the command line, for messages
  bool succeeded() const { return exit_status == 0 && !timed_out && interrupted_by == 0; }
};

// Runs the command to completion (or until stopped) as described at the top. When
// `signals` records SIGINT/SIGTERM, the child is ended and the result's
// interrupted_by set; on return no process it started is running.
// REQUIRES: !options.argv.empty(), !options.log.empty() (std::logic_error otherwise).
// THROWS UsageError if argv[0] is not an executable in PATH; std::system_error if
// the log cannot be opened or the program cannot be started (then nothing runs).
ChildResult run_child(const ChildOptions& options, const netem::TerminationSignals& signals);

// Runs several commands at once, each as run_child would, and returns their results
// in order. When one fails (or times out, or stops early), the others are ended
// too: the bench runs commands together only when they are useful together.
// REQUIRES and THROWS as run_child, for each; if one cannot be started, those
// already started are ended before the exception leaves.
std::vector<ChildResult> run_children(const std::vector<ChildOptions>& children,
                                      const netem::TerminationSignals& signals);

// The last `lines` lines of a log file, for messages ("" if unreadable).
std::string log_tail(const std::filesystem::path& log, int lines = 12);

}  // namespace weft::bench
