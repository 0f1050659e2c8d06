// The torchrun environment contract (docs/runtime.md §3): how a worker learns its place in the
// job. Whoever starts the workers — `weft train --nproc K`, Slurm, mpirun or a
// person — sets, in every worker:
//   MASTER_ADDR  host of rank 0, where the TCPStore rendezvous server listens
//   MASTER_PORT  its TCP port (1..65535)
//   RANK         0..WORLD_SIZE-1, unique
//   WORLD_SIZE   number of workers, >= 1
//   LOCAL_RANK   rank on this host (optional; informative here, CPU only)
//   LOCAL_WORLD_SIZE  workers on this host (optional; weft's launcher sets it)
//
// Thread-safety: reads the process environment; call before starting threads that
// change it (none of weft's do).
#pragma once

#include <optional>
#include <string>

namespace weft::runtime {

struct WorkerEnv {
  std::string master_addr;
  int master_port = 0;
  int rank = 0;
  int world = 1;
  int local_rank = 0;
};

// True when any of MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE is set.
bool has_worker_env();

// Reads the variables above. THROWS UsageError naming the variable, its value and
// what is accepted when one is missing or invalid (RANK >= WORLD_SIZE names both).
WorkerEnv read_worker_env();

// LOCAL_WORLD_SIZE, or nullopt where it is not set. THROWS UsageError naming its
// value where it is not an integer >= 1.
std::optional<int> local_world_size();

// The variables for rank `rank` of `world` on a single host (the launcher's view).
WorkerEnv local_worker_env(int port, int rank, int world);

}  // namespace weft::runtime
