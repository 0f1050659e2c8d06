// The training loop of one worker (docs/runtime.md §3): rendezvous, the shared schedule
// (runtime/train/worker.h), the model, its data shard, the per-layer optimizer and the communication engine,
// then forward layer by layer (each layer waiting for what the schedule says it
// needs), loss, backward, and the outputs of `weft train`.
//
// --trace: the events of every rank's first --trace-iterations iterations (a
// resumed job's: from its checkpoint on), in one Chrome trace (Note [Measured
// timeline], runtime/train/measured_trace.h).
//
// Metrics: every rank appends one JSON line per iteration, {"rank", "iter",
// "time_s", "iteration_s", "loss", "strategy"}, to the same file (O_APPEND, one
// write per line, so lines never interleave); rank 0 adds {"rank", "iter",
// "time_s", "eval": {"accuracy", "loss"}} after evaluating, and for local SGD on
// several workers "eval_agreed": {"accuracy", "loss"}, the evaluation of the
// workers' mean parameters (for ps-interleaved: of the servers' centre as rank
// 0 last received it, once every layer has been answered; docs/local-sgd.md).
// "iter" counts from 0;
// an evaluation's "iter" is the last iteration trained before it. "time_s" is
// seconds since the start barrier; "iteration_s" is the wall time since the
// previous iteration ended (the first: since the barrier).
//
// Checkpoints (docs/checkpoints.md): a worker's file holds "param/<l>/<i>" (its
// parameters), its optimizers' and engine's state (Note [A worker's state] in
// runtime/train/worker.h) and "rng/torch" (the global generator), with the iteration and
// the data position.
// Metrics of a resumed job are appended to the file the first run wrote; their
// "iter" continues where the checkpoint left off.
//
// Thread-safety: one worker per process.
#pragma once

#include <nlohmann/json.hpp>

#include "runtime/launch/worker_env.h"
#include "runtime/train/train.h"

namespace weft::runtime {

// What makes two runs one job, recorded in its checkpoints: the job's identity
// (runtime/train/job.h) and what weft train alone knows: model, batch, optimizer, lr,
// seed and data.
nlohmann::json job_identity(const TrainOptions& options, int workers);

// Checks the checkpoint options that need no model: --checkpoint-every and
// --resume need --checkpoint, --checkpoint-every is >= 0, the
// directory is one or can be made. THROWS UsageError naming the flag.
void check_checkpoint_options(const TrainOptions& options);

// Trains as rank env.rank of env.world. Returns 0, or 1 after printing why the
// worker failed (a lost peer, a timeout). THROWS UsageError for bad input (a bad
// --profile, a missing dataset, a strategy the runtime cannot run).
int run_worker(const TrainOptions& options, const WorkerEnv& env);

}  // namespace weft::runtime
