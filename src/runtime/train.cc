#include "runtime/train.h"

#include <algorithm>

#include <fmt/format.h>

#include "runtime/launcher.h"
#include "runtime/model.h"
#include "runtime/optimizer.h"
#include "runtime/outer_optimizer.h"
#include "runtime/trainer.h"
#include "runtime/worker_env.h"
#include "units/files.h"
#include "units/limits.h"

namespace weft::runtime {

void validate(const TrainOptions& o) {
  const auto names = model_names();
  if (std::find(names.begin(), names.end(), o.model) == names.end()) {
    throw UsageError(fmt::format("--model {}: not a runtime model; accepted: {}", o.model, fmt::join(names, ", ")));
  }
  const StrategyInfo& info = find_strategy(o.strategy);
  if (info.arch == Arch::kParameterServer && o.servers < 1) {
    throw UsageError(fmt::format("--strategy {}: a parameter-server strategy needs --servers S >= 1", o.strategy));
  }
  if (info.arch == Arch::kAllReduce && o.servers != 0) {
    throw UsageError(fmt::format("--servers {}: only parameter-server strategies (ps, ps-interleaved) use servers; "
                                 "--strategy {} is all-reduce",
                                 o.servers, o.strategy));
  }
  if (o.nproc && (*o.nproc < 1 || *o.nproc > limits::kMaxProcesses - std::max(o.servers, 0))) {
    throw UsageError(fmt::format("--nproc {}: expected 1 to {} worker processes on this machine, with --servers {} "
                                 "beside them (docs/limits.md)",
                                 *o.nproc, limits::kMaxProcesses - std::max(o.servers, 0), o.servers));
  }
  if (o.steps && *o.steps < 1) throw UsageError(fmt::format("--steps {}: expected an integer >= 1", *o.steps));
  if (o.steps && o.epochs) throw UsageError("--steps and --epochs: give one of them");
  if (o.epochs && !(*o.epochs > 0)) throw UsageError(fmt::format("--epochs {}: expected a number > 0", *o.epochs));
  if (o.batch < 1) throw UsageError(fmt::format("--batch {}: expected an integer >= 1", o.batch));
  if (!(o.lr > 0)) throw UsageError(fmt::format("--lr {}: expected a number > 0", o.lr));
  validate(OptimizerOptions{.kind = o.optimizer, .lr = o.lr});
  if (o.eval_every < 0) throw UsageError(fmt::format("--eval-every {}: expected an integer >= 0", o.eval_every));
  if (o.trace_iterations < 0) {
    throw UsageError(fmt::format("--trace-iterations {}: expected an integer >= 0", o.trace_iterations));
  }
  if (!(o.failure_timeout > 0)) {
    throw UsageError(fmt::format("--failure-timeout {}: expected a number of seconds > 0", o.failure_timeout));
  }
  const OuterOptions outer{.kind = o.outer_optimizer, .lr = o.outer_lr, .momentum = o.outer_momentum};
  validate(outer);
  check_outer_step(outer, o.strategy);
  check_checkpoint_options(o);
  for (const auto& [flag, file] : {std::pair{"--metrics", o.metrics}, std::pair{"--trace", o.trace},
                                   std::pair{"--save-params", o.save_params}}) {
    if (!file.empty()) check_output(flag, file);
  }
}

int run_train(const TrainOptions& options) {
  validate(options);
  if (is_launched_worker()) return run_worker(options, read_worker_env());
  if (options.nproc) {
    // A job that cannot resume is refused before any worker starts.
    if (options.resume) check_resumable(options, *options.nproc);
    return launch({.nproc = *options.nproc,
                   .servers = options.servers,
                   .failure_timeout = options.failure_timeout,
                   .cores = options.cores});
  }
  if (has_worker_env()) return run_worker(options, read_worker_env());
  // Neither a launcher nor part of a job: train alone, through the same path.
  return launch({.nproc = 1, .servers = options.servers, .failure_timeout = options.failure_timeout});
}

}  // namespace weft::runtime
