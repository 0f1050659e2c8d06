#include "runtime/train/train.h"

#include <algorithm>

#include <fmt/format.h>

#include "runtime/launch/launcher.h"
#include "runtime/launch/worker_env.h"
#include "runtime/model/model.h"
#include "runtime/model/optimizer.h"
#include "runtime/model/outer_optimizer.h"
#include "runtime/train/trainer.h"
#include "units/files.h"
#include "units/limits.h"
#include "units/ranges.h"

namespace weft::runtime {

void validate(const TrainOptions& o) {
  const auto names = model_names();
  if (std::find(names.begin(), names.end(), o.model) == names.end()) {
    throw UsageError(fmt::format("--model {}: not a runtime model; accepted: {}", o.model, fmt::join(names, ", ")));
  }
  validate(o.job);
  const int servers = o.job.servers;
  if (o.nproc) ranges::check(ranges::kProcesses, *o.nproc);
  ranges::check(ranges::kLocalServers, servers);
  if (o.nproc && *o.nproc + servers > limits::kMaxProcesses) {
    throw UsageError(fmt::format("--nproc {}: expected 1 to {} worker processes on this machine, with --servers {} "
                                 "beside them (docs/limits.md)",
                                 *o.nproc, limits::kMaxProcesses - servers, servers));
  }
  if (o.job.steps && o.epochs) throw UsageError("--steps and --epochs: give one of them");
  if (o.epochs) ranges::check(ranges::kEpochs, *o.epochs);
  ranges::check(ranges::kBatch, o.batch);
  ranges::check(ranges::kLr, o.lr);
  validate(OptimizerOptions{.kind = o.optimizer, .lr = o.lr});
  ranges::check(ranges::kEvalEvery, o.eval_every);
  ranges::check(ranges::kTraceIterations, o.trace_iterations);
  ranges::check(ranges::kCheckpointEvery, static_cast<double>(o.checkpoint_every));
  check_checkpoint_options(o);
  for (const auto& [flag, file] : {std::pair{"--metrics", o.metrics}, std::pair{"--trace", o.trace}}) {
    if (!file.empty()) check_output(flag, file);
  }
  // Each rank writes FILE.rank<r> beside the others: FILE itself may be anything.
  if (!o.save_params.empty()) check_output("--save-params", o.save_params.string() + ".rank0");
}

int run_train(const TrainOptions& options) {
  validate(options);
  if (is_launched_worker()) return run_worker(options, read_worker_env());
  if (options.nproc) {
    // A job that cannot resume is refused before any worker starts.
    if (options.resume) check_resumable(options, *options.nproc);
    return launch({.nproc = *options.nproc,
                   .servers = options.job.servers,
                   .failure_timeout = options.job.failure_timeout,
                   .cores = options.cores});
  }
  if (has_worker_env()) return run_worker(options, read_worker_env());
  // Neither a launcher nor part of a job: train alone, through the same path.
  if (options.resume) check_resumable(options, 1);
  return launch({.nproc = 1, .servers = options.job.servers, .failure_timeout = options.job.failure_timeout});
}

}  // namespace weft::runtime
