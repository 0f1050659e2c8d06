// Starting programs without a shell: fork/exec with an explicit argument vector, an
// explicit environment and, optionally, a network namespace to run in.
//
// No argument is ever interpreted by a shell, so user-supplied arguments reach the
// program byte for byte. Between fork and exec the child makes only system calls
// (everything it needs is prepared in the parent), which keeps spawning safe even
// from a multi-threaded parent.
//
// Thread-safety: the functions are reentrant; they share no state.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "units/cores.h"

namespace weft::netem {

// What to start. `executable` is a path (see find_executable); `argv[0]` is what
// the program sees as its name.
struct SpawnRequest {
  std::string executable;
  std::vector<std::string> argv;
  std::vector<std::string> environment;  // complete, "NAME=value" entries
  // A network namespace to enter before exec: the name of a file under /run/netns
  // (as `ip netns add` makes). Empty: stay in the caller's namespace.
  std::string netns;
  // The cores to run on (Note [Hosts on cores], units/cores.h), set before exec so
  // that every thread the program starts inherits them. Empty: the caller's.
  CoreSet cores;
  // When >= 0, the child's stdout and stderr go to this descriptor.
  int output_fd = -1;
  // Start a new process group led by the child, so that signals for the group reach
  // everything the program starts, and a terminal's Ctrl-C (which goes to the
  // foreground group) reaches only the parent, which then decides what to do.
  bool own_process_group = true;
  // The child gets SIGKILL if the parent dies, so a SIGKILLed supervisor leaves no
  // running children behind (their namespaces are swept by the next run). Linux
  // ties this to the thread that called spawn(): call it from a thread that lives
  // as long as the child should.
  bool die_with_parent = true;
};

// Starts the program and returns its pid once exec has succeeded.
// REQUIRES: !request.argv.empty().
// THROWS std::system_error naming the executable and the step that failed (opening
// the namespace, entering it, pinning it to its cores, exec) when the program
// could not be started; no child is left running in that case.
pid_t spawn(const SpawnRequest& request);

// The path execvp would run for `name`: `name` itself if it contains a '/', else the
// first executable file called `name` in the directories of $PATH. Empty if none,
// or if `name` with a '/' is not an executable file (missing, a directory, no x bit).
std::string find_executable(std::string_view name);

// find_executable(name), for a program the user named. THROWS UsageError "command
// `NAME` (WHERE) ...: WHY; give ..." if there is none, saying whether it is missing,
// a directory or not executable. `where` names whose program it is ("rank 2"), or "".
std::string require_executable(std::string_view name, std::string_view where = "");

// The calling process's environment with `overrides` ("NAME=value") replacing or
// adding the variables they name.
std::vector<std::string> environment_with(const std::vector<std::string>& overrides);

// The outcome of a short helper program (ip, tc).
struct CommandResult {
  int wait_status = 0;  // as returned by waitpid
  std::string output;   // stdout and stderr together
  bool succeeded() const;
};

// Runs `argv` (argv[0] looked up in $PATH) to completion in the caller's namespace,
// capturing its output. THROWS std::system_error if it cannot be started.
CommandResult run_command(const std::vector<std::string>& argv);

// Like run_command, but THROWS std::runtime_error quoting the command line, how it
// ended and its output unless it exited with status 0.
void run_checked(const std::vector<std::string>& argv);

// "exited with status 3", "was killed by signal 9 (Killed)".
std::string describe_wait_status(int wait_status);

// The argument vector as one line, for messages (arguments with spaces quoted).
std::string join_command(const std::vector<std::string>& argv);

}  // namespace weft::netem
