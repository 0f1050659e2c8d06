// `weft train`: real data-parallel training over Gloo, executing a strategy's
// Schedule (docs/runtime.md §3, docs/cli.md §5). This header is the command line's whole view of the
// runtime: it includes no LibTorch header, so the CLI compiles without them.
//
// One call, two roles (Note [Launcher and workers] in runtime/launch/launcher.h):
// - launcher: with `nproc` set and not inside a launched worker, run_train spawns
//   `nproc` copies of this very command line as workers on 127.0.0.1, supervises
//   them and returns their combined exit status;
// - worker: otherwise it reads the torchrun environment (MASTER_ADDR, MASTER_PORT,
//   RANK, WORLD_SIZE; runtime/launch/worker_env.h) and trains as that rank. With neither
//   `nproc` nor any of those variables it trains alone (world 1), as if nproc = 1.
//
// Outputs (all optional; docs/formats.md §6): metrics JSON lines from every rank appended to
// one file; one Chrome trace holding every rank's measured timeline (rank 0 gathers
// them, Note [Measured timeline] in runtime/train/measured_trace.h); the final parameters of
// each rank as raw float32 (`<save_params>.rank<r>`, layers in order, each tensor
// flattened), which is what the equivalence tests compare.
//
// Thread-safety: run_train runs one training; call it once per process.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "runtime/train/job.h"
#include "units/cores.h"
#include "units/units.h"

namespace weft::runtime {

// Defaults, with the reason for each value.
struct TrainDefaults {
  // Iterations recorded in --trace: enough to see the steady state without making
  // the file (and rank 0's gather) large on long runs.
  static constexpr int kTraceIterations = 50;
  // Forward/backward passes timed by rank 0 to give the planner layer times when no
  // --profile file is given; the first is discarded (allocator warm-up).
  static constexpr int kProfileIterations = 4;
};

struct TrainOptions {
  // The strategy, its options, servers, steps, outer optimizer and failure
  // timeout, as the Python package gives them too. The launcher spawns the
  // servers beside the `nproc` workers. Length of the run: job.steps or
  // `epochs`; neither = 100 steps.
  JobOptions job;
  std::string model = "mlp";     // runtime::model_names()
  std::optional<int> nproc;      // spawn this many local workers (launcher role)
  CorePlacement cores = CorePlacement::kAuto;  // launcher: where the workers run (LaunchOptions)
  std::optional<double> epochs;  // of this rank's shard
  int batch = 32;                // samples per worker per iteration
  std::string optimizer = "sgd"; // "sgd" | "momentum" | "adam"
  double lr = 0.05;
  std::uint64_t seed = 0;        // model initialisation and data order
  bool synthetic = false;        // random data of the right shapes, no dataset files
  int eval_every = 0;            // rank 0 evaluates every N iterations and at the end; 0 = never

  // Checkpoints (docs/checkpoints.md): with `checkpoint` set, every worker writes
  // its state there after every `checkpoint_every` iterations (0 = only after the
  // last); `resume` continues the job from the last complete one there.
  std::filesystem::path checkpoint;
  std::int64_t checkpoint_every = 0;
  bool resume = false;

  std::filesystem::path profile;  // layer times (docs/formats.md §6); empty = measured by rank 0

  std::filesystem::path metrics;      // JSON lines; empty = none
  std::filesystem::path trace;        // Chrome trace of the measured timeline; empty = none
  int trace_iterations = TrainDefaults::kTraceIterations;
  std::filesystem::path save_params;  // final parameters, one file per rank; empty = none
  bool progress = true;               // rank 0's progress line on stderr
};

// Checks options that do not need the model or the network. THROWS UsageError
// naming the option (as its command-line flag), the value and what is accepted.
void validate(const TrainOptions& options);

// That options.checkpoint holds a whole checkpoint of this job with `workers`
// workers (and options.servers servers): the manifest, and every rank's file of
// the iteration it names read and checked (header, size, CRC-32) as a worker
// would load it. The launcher calls it before any worker starts, so that a bad
// checkpoint is one message naming the file whatever the timing.
// THROWS UsageError "--resume FILE: WHY" (runtime/train/checkpoint.h).
void check_resumable(const TrainOptions& options, int workers);

// Runs the training in the role described above. Returns the process exit status
// (0 success; non-zero after a worker failed, with the reason printed on stderr).
// THROWS UsageError for bad options or a bad/missing environment variable (named),
// or a missing dataset (naming the package to install).
int run_train(const TrainOptions& options);

}  // namespace weft::runtime
