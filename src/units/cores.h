// Which cores each process of a job on one machine runs on.
//
// Note [Hosts on cores]
// ---------------------
// `weft netem` and `--nproc` stand one machine in for several hosts, one process
// per worker (and server). Left to the kernel, those processes migrate between
// the cores at every wake-up, and a rank that has finished its layers shares the
// cores with all the others, so the ranks reach each collective further apart
// than hosts of their own would. Each process is therefore pinned to a share of
// the cores the job may use, as a host has cores of its own: with H processes and
// C cores, H <= C gives process h a block of C/H cores (the first C mod H blocks
// one more), and H > C puts process h on core h mod C, so that every core holds
// the same number of processes, give or take one. Measured on 2 cores with 4
// workers (BENCHMARKS.md, "Hosts on cores"): cnn's ssgd ran 22.0–24.0 ms an
// iteration pinned against 24.9–28.3 ms unpinned at 1Gbit, mgwfbp 57.9–58.6
// against 60.4–61.9 ms at 100Mbit. `--shared-cores` leaves the placement to the
// kernel, for a machine the job shares with other work.
//
// Between fork and exec only system calls are safe, so the set is built before
// the fork (CoreSet) and applied there with one sched_setaffinity.
//
// Thread-safety: pure functions, but usable_cores() reads the calling thread's
// affinity.
#pragma once

#include <sched.h>

#include <vector>

namespace weft {

// The cores the calling thread may run on (sched_getaffinity), ascending.
// THROWS std::system_error if the kernel does not say.
std::vector<int> usable_cores();

// The cores process `process` of `processes` runs on, out of `cores` (Note [Hosts
// on cores]), ascending. REQUIRES: !cores.empty(), 0 <= process < processes
// (THROWS std::invalid_argument naming the values otherwise).
std::vector<int> cores_of(const std::vector<int>& cores, int process, int processes);

// An affinity mask ready for sched_setaffinity; empty() means none (no pinning).
struct CoreSet {
  cpu_set_t mask{};
  bool pinned = false;
  bool empty() const { return !pinned; }
};

// The mask of `cores`. REQUIRES: every core in [0, CPU_SETSIZE).
CoreSet core_set(const std::vector<int>& cores);

// The mask for process `process` of `processes` on the calling thread's cores;
// an empty one when `shared` (--shared-cores).
CoreSet pinning_for(int process, int processes, bool shared);

// Pins the calling process to `set` unless it is empty; returns false (errno set)
// if the kernel refused. Async-signal-safe: one system call, for between fork and
// exec.
bool pin(const CoreSet& set);

}  // namespace weft
