// Which cores each process of a job on one machine runs on.
//
// Note [Hosts on cores]
// ---------------------
// `weft netem` and `--nproc` stand one machine in for several hosts, one process
// per worker (and server). Where the machine has a core for each of them, each
// process is pinned to a share of the cores the job may use, as a host has cores
// of its own: with H processes and C >= H cores, process h gets a block of C/H
// cores (the first C mod H blocks one more). Left to the kernel they would
// migrate at every wake-up and run beside one another, which no host does.
//
// Where the processes outnumber the cores no placement is a host's own. Pinned
// (`--cores pinned`), process h goes on core h mod C, so that each core holds as
// many as any other, give or take one; it runs faster, but the kernel's work for
// a rank's traffic lands on its core-mate, which the planner's measurements do
// not follow. So by default (`auto`) such a job shares the cores; `--cores
// shared` shares them always, for a machine the job shares with other work.
//
// Between fork and exec only system calls are safe, so the set is built before
// the fork (CoreSet) and applied there with one sched_setaffinity.
//
// Thread-safety: pure functions, but usable_cores() reads the calling thread's
// affinity.
#pragma once

#include <sched.h>

#include <string_view>
#include <vector>

namespace weft {

// The cores the calling thread may run on (sched_getaffinity), ascending.
// THROWS std::system_error if the kernel does not say.
std::vector<int> usable_cores();

// Where a job's processes run (Note [Hosts on cores]): `--cores auto|pinned|shared`.
enum class CorePlacement { kAuto, kPinned, kShared };

// "auto", "pinned", "shared"; THROWS UsageError naming `flag` and the accepted
// values for anything else.
CorePlacement parse_core_placement(std::string_view text, std::string_view flag = "--cores");
std::string_view to_string(CorePlacement placement);

// The help of --cores, for every command that starts a job's processes.
inline constexpr const char* kCorePlacementHelp =
    "where the job's processes run: auto (each pinned to cores of its own where there is one for each, else "
    "on any core), pinned (each on its share of the cores, in turn where they outnumber them), shared (any "
    "core)";

// The cores process `process` of `processes` runs on pinned, out of `cores` (Note
// [Hosts on cores]), ascending. REQUIRES: !cores.empty(), 0 <= process < processes
// (THROWS std::invalid_argument naming the values otherwise).
std::vector<int> cores_of(const std::vector<int>& cores, int process, int processes);

// An affinity mask ready for sched_setaffinity; empty() means none (no pinning).
struct CoreSet {
  cpu_set_t mask{};
  bool empty() const { return CPU_COUNT(&mask) == 0; }
};

// The mask of `cores`. REQUIRES: every core in [0, CPU_SETSIZE).
CoreSet core_set(const std::vector<int>& cores);

// The mask for process `process` of `processes` on the calling thread's cores
// under `placement`: empty (any core) for kShared, and for kAuto where the
// processes outnumber the cores.
CoreSet pinning_for(int process, int processes, CorePlacement placement);

// Pins the calling process to `set` unless it is empty; returns false (errno set)
// if the kernel refused. Async-signal-safe: one system call, for between fork and
// exec.
bool pin(const CoreSet& set);

}  // namespace weft
