// The local process launcher and supervisor behind `weft train --nproc K` and
// `weft profile --network --nproc K`.
//
// Note [Launcher and workers]
// ---------------------------
// weft is one binary. A command given `--nproc K` becomes a launcher: it re-runs
// its own command line (/proc/self/exe with the same arguments) K times, each
// child with the torchrun variables of one rank (runtime/launch/worker_env.h) on
// 127.0.0.1 and a free port, plus WEFT_LAUNCHED_WORKER=1. A process that sees
// WEFT_LAUNCHED_WORKER is a worker whatever its flags say, so `--nproc` is read
// once, by the launcher. (RANK alone does not mark a worker: a user's shell inside
// a Slurm job may well have it set.) On a cluster there is no launcher: one
// `weft train` per host with the variables set, exactly what a child sees here.
//
// Each child runs on a share of the launcher's cores (Note [Hosts on cores] in
// units/cores.h), set before exec, as LaunchOptions::cores says.
//
// Besides the torchrun variables each child gets LOCAL_WORLD_SIZE (= WORLD_SIZE:
// one host) and the roles `weft netem` gives (netem/netem.h): WEFT_ROLE
// (worker|server), WEFT_WORKERS, WEFT_SERVERS and, on servers, WEFT_SERVER_RANK.
//
// In a job of two or more processes each child's stderr is a pipe to the launcher,
// which forwards it line by line, each line prefixed by its rank ("[rank 1] ...")
// and never mixed with another's (Note [Ranks' stderr], runtime/launch/rank_output.h).
//
// Supervision. The children form their own process group, so a terminal's Ctrl-C
// reaches only the launcher, which forwards SIGINT/SIGTERM/SIGHUP to every child; a
// second signal, or a child that ignores the first for `kill_grace`, gets SIGKILL
// (the message names the signal it ignored). Each child starts with the three at
// their default action, whatever the launcher inherited (a script's `weft train &`
// runs with SIGINT ignored, and exec keeps "ignored"), so a forwarded signal ends a
// worker at once (Note [Signals a worker ends on], launcher.cc).
// Each child asks the kernel (PR_SET_PDEATHSIG) for SIGKILL when the launcher
// dies, so no worker outlives a launcher killed with SIGKILL either. Signals from
// the launcher go to the children's whole process group. When a child
// exits non-zero or by a signal, the launcher prints which rank and how
// (`rank 2 failed (killed by signal 9)`); the others normally notice the lost peer
// at their next collective and exit by themselves; those still running
// `failure_timeout` later are sent SIGTERM, then SIGKILL after `kill_grace`.
// launch() returns only when every child has been reaped.
//
// Note [Stopped workers]
// A child stopped by a signal (SIGSTOP, SIGTSTP) blocks every collective and
// cannot exit, so the launcher watches for stops (WUNTRACED) and names the rank at
// once. When another rank fails while it is stopped, the failure is reported as
// happening "while rank N is stopped" and the stopped rank is killed at once (it
// handles no SIGTERM); still stopped after `failure_timeout`, it fails the job
// itself. A rank continued in time is a rank like the others. Every other signal
// the launcher sends is followed by SIGCONT, so that a stopped child receives it.
//
// Thread-safety: launch() blocks SIGINT, SIGTERM, SIGHUP and SIGCHLD in the calling thread
// while it runs (it reads them from a signalfd); call it from the main thread,
// before other threads exist, once at a time.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "units/cores.h"
#include "units/units.h"

namespace weft::runtime {

// The variable that marks a launched worker.
inline constexpr const char* kLaunchedWorkerVariable = "WEFT_LAUNCHED_WORKER";
// Set to 1 in each rank's environment where the launcher's stderr is a terminal:
// a rank's stderr is then a pipe to it (Note [Ranks' stderr]), which redraws a
// line ended by '\r' in place, so the rank may draw its progress as on a terminal.
inline constexpr const char* kTerminalVariable = "WEFT_STDERR_TERMINAL";

struct LaunchOptions {
  int nproc = 1;
  // Parameter servers started beside the workers: ranks nproc..nproc+servers-1 of
  // a world of nproc + servers (runtime/comm/parameter_server.h). Only the names in
  // messages ("server 0 (rank 4)") depend on it.
  int servers = 0;
  // The program each child runs, with its arguments (argv[0] included). Empty =
  // this process's own command line and executable.
  std::filesystem::path executable;
  std::vector<std::string> argv;
  // "NAME=value" entries added to every child's environment; the variables above
  // (torchrun's, WEFT_*) win over them.
  std::vector<std::string> environment;
  Seconds failure_timeout = 60;  // after a failure, how long the others may take to exit
  Seconds kill_grace = 5;        // between SIGTERM and SIGKILL
  // Where the children run: pinned each to its own share of this process's cores,
  // or on any (Note [Hosts on cores], units/cores.h).
  CorePlacement cores = CorePlacement::kAuto;
};

// True inside a child started by launch().
bool is_launched_worker();

// This process's argv, as /proc/self/cmdline holds it.
std::vector<std::string> current_command_line();

// Note [Reserved ports]
// A rendezvous port chosen as "free a moment ago" is free for anyone: between the
// choice and rank 0's store binding it, another job's Gloo listener can bind it,
// or a worker's own connect can take it as its source port and connect to itself,
// and a worker then speaks the store's protocol to a stranger (a CI run failed
// so: "Stop_waiting response is expected", and the other job's pair refused).
// ReservedPort holds the port bound, with SO_REUSEADDR and not listening, for as
// long as it lives: the kernel gives a held port to no bind(0) and to no connect,
// while the store, which binds with SO_REUSEADDR too, still can.
class ReservedPort {
 public:
  // THROWS std::system_error if no socket can be bound on 127.0.0.1.
  ReservedPort();
  ~ReservedPort();
  ReservedPort(const ReservedPort&) = delete;
  ReservedPort& operator=(const ReservedPort&) = delete;

  int number() const { return number_; }

 private:
  int fd_ = -1;
  int number_ = 0;
};

// Spawns and supervises the children as described in the note. Returns 0 when all
// exited 0; 130/143/129 after forwarding SIGINT/SIGTERM/SIGHUP; after a failure, the exit
// status of the first child that failed (1 if a signal killed it).
// Prints one line per failed child on stderr. REQUIRES nproc >= 1.
// THROWS std::system_error if a child cannot be created (the ones already started
// are killed and reaped first).
int launch(const LaunchOptions& options);

}  // namespace weft::runtime
