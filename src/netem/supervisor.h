// Running the processes of one distributed job and ending them together.
//
// supervise() starts one process per rank, waits for all of them, and makes sure
// none outlives the job: when one fails, the others get `grace` seconds to notice
// (a rank that loses a peer should say so and exit), then SIGTERM, then SIGKILL.
// SIGINT/SIGTERM/SIGHUP to the supervisor, or the job's `timeout`, end every rank
// the same way. Signals go to each rank's process group, so whatever a rank started goes too.
//
// Note [Termination signals]
// A signal handler gets no context, so the flag it sets must be process-wide: it
// lives in supervisor.cc, owned by the one TerminationSignals object that installs
// the handlers. The handler only stores the signal number (an atomic store, which
// is async-signal-safe); the supervision loop, which polls the flag between
// waitpid calls, does the terminating and the cleaning up.
//
// Note [Stopped ranks]
// A rank stopped by a signal (SIGSTOP, SIGTSTP) blocks every collective of the
// job, and cannot exit, so the supervisor watches for stops (waitid WSTOPPED):
// when another rank fails while one is stopped, the stopped one is named as the
// failure and killed at once (a stopped process handles no SIGTERM); a rank stopped for the whole `grace`
// fails the job itself. A rank continued (SIGCONT) in time is a rank like the
// others. Every SIGTERM the supervisor sends is followed by SIGCONT for this reason.
//
// Thread-safety: call supervise() from one thread at a time (it reaps its own
// children by pid, so other children of the process are left alone).
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <string>
#include <vector>

#include "units/cores.h"
#include "units/units.h"

namespace weft::netem {

// While alive, SIGINT, SIGTERM and SIGHUP set a flag instead of ending the process (Note
// [Termination signals]); the previous handlers come back on destruction.
// REQUIRES: at most one alive at a time (THROWS std::logic_error otherwise).
class TerminationSignals {
 public:
  TerminationSignals();
  ~TerminationSignals();
  TerminationSignals(const TerminationSignals&) = delete;
  TerminationSignals& operator=(const TerminationSignals&) = delete;

  // The first signal received since construction, or 0.
  int received() const;

  // Records `signal` as if it had been received (for tests and for callers that
  // learn of a reason to stop some other way).
  void raise_flag(int signal) const;

 private:
  struct sigaction previous_interrupt_ {};
  struct sigaction previous_terminate_ {};
  struct sigaction previous_hangup_ {};
};

// The signal the alive TerminationSignals has received, or 0 (also 0 when none is
// alive): for long steps that want to stop early, such as building a network.
int termination_requested();

// One rank's process.
struct ProcessSpec {
  std::string label;              // names it in messages: "worker 2", "server 0"
  std::vector<std::string> argv;  // argv[0] is looked up in $PATH
  std::vector<std::string> environment;  // "NAME=value", added to the caller's
  std::string netns;  // network namespace to run in (see SpawnRequest); empty: ours
  CoreSet cores;      // the cores it runs on (see SpawnRequest); empty: any
};

struct SuperviseOptions {
  Seconds timeout = 0;     // the whole job's limit; 0: none
  Seconds grace = 10;      // after the first failure, before the others get SIGTERM
  Seconds kill_after = 5;  // after SIGTERM, before SIGKILL
};

struct ProcessExit {
  std::string label;
  pid_t pid = 0;          // 0 if it never started
  int wait_status = 0;    // as from waitpid; meaningful when pid != 0
  Seconds ended_at = 0;   // since the job started
  bool stopped_by_supervisor = false;  // we sent it SIGTERM/SIGKILL first
  int stopped_signal = 0;  // the last signal that stopped it (SIGSTOP...), or 0
  Seconds stopped_at = 0;  // when, since the job started
};

struct RunReport {
  // 0 when every rank exited with status 0. Otherwise: the first failed rank's exit
  // status (128 + signal if a signal killed it, 127 if it could not start); 124 on
  // timeout; 128 + signal when the supervisor was interrupted.
  int exit_status = 0;
  // Empty on success; otherwise one line naming the first failed rank, what
  // happened to it and when, and what became of the others.
  std::string message;
  std::vector<ProcessExit> exits;  // one per spec, in the same order
};

// Starts every spec (in order) and supervises them until all have ended, as
// described at the top. On return no process it started is running.
// REQUIRES: !specs.empty(), each argv non-empty; options' times >= 0.
// THROWS std::logic_error if a REQUIRES fails; a process that cannot be started is
// reported as that rank's failure (exit_status 127), not thrown.
RunReport supervise(const std::vector<ProcessSpec>& specs, const SuperviseOptions& options,
                    const TerminationSignals& signals);

}  // namespace weft::netem
