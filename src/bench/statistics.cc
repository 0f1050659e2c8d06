#include "bench/statistics.h"

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

namespace weft::bench {

SteadyState steady_iteration_time(const Metrics& metrics, const SteadyStateOptions& options) {
  if (options.warmup < 0 || options.period < 1) {
    throw std::logic_error(fmt::format("steady_iteration_time: warmup {} must be >= 0 and period {} >= 1",
                                       options.warmup, options.period));
  }
  // Step 1: per-iteration mean over the ranks.
  struct Sums {
    double iteration = 0;
    double compute = 0;
    int ranks = 0;
    int computed = 0;  // ranks whose line has compute_s
  };
  std::map<std::int64_t, Sums> sums;
  for (const IterationLine& line : metrics.iterations) {
    Sums& s = sums[line.iter];
    s.iteration += line.iteration;
    ++s.ranks;
    if (line.compute) {
      s.compute += *line.compute;
      ++s.computed;
    }
  }
  // Step 4: iterations whose lines include an evaluation's pause.
  std::set<std::int64_t> touched;
  for (const EvalLine& eval : metrics.evals) {
    for (std::int64_t i = eval.iter + 1; i <= eval.iter + options.period + 1; ++i) touched.insert(i);
  }
  // Steps 2 and 3: whole windows after the warm-up, aligned to the period.
  const std::int64_t period = options.period;
  const std::int64_t first_window = (options.warmup + period - 1) / period;
  const std::int64_t last_iter = sums.empty() ? -1 : sums.rbegin()->first;
  std::vector<double> window_means, compute_means;
  bool every_compute = true;  // every rank's line in every window has compute_s
  SteadyState result;
  for (std::int64_t w = first_window; (w + 1) * period - 1 <= last_iter; ++w) {
    double sum = 0, compute = 0;
    bool usable = true;
    for (std::int64_t i = w * period; i < (w + 1) * period; ++i) {
      const auto it = sums.find(i);
      usable = it != sums.end() && !touched.contains(i);
      if (!usable) break;
      const Sums& s = it->second;
      sum += s.iteration / s.ranks;
      compute += s.compute / s.ranks;
      every_compute = every_compute && s.computed == s.ranks;
    }
    if (!usable) continue;
    window_means.push_back(sum / static_cast<double>(period));
    compute_means.push_back(compute / static_cast<double>(period));
    result.iterations += static_cast<int>(period);
  }
  if (window_means.empty()) {
    throw UsageError(fmt::format(
        "the run has {} iteration{} (up to iter {}), which leaves no complete, evaluation-free period of {} "
        "after the {}-iteration warm-up; give --steps larger than the warm-up by at least one period",
        sums.size(), sums.size() == 1 ? "" : "s", last_iter, period, options.warmup));
  }
  result.windows = static_cast<int>(window_means.size());
  result.iteration = median(std::move(window_means));  // step 5
  if (every_compute) result.compute = median(std::move(compute_means));
  return result;
}

std::vector<AccuracyPoint> accuracy_curve(const Metrics& metrics) {
  std::map<std::int64_t, Seconds> rank0_end;  // iter -> rank 0's time_s at the end of it
  for (const IterationLine& line : metrics.iterations) {
    if (line.rank == 0) rank0_end[line.iter] = line.time;
  }
  std::vector<AccuracyPoint> curve;
  Seconds paused = 0;
  for (const EvalLine& eval : metrics.evals) {
    if (eval.rank != 0) continue;
    const auto it = rank0_end.find(eval.iter);
    if (it != rank0_end.end()) paused += std::max(0.0, eval.time - it->second);
    curve.push_back({.iter = eval.iter,
                     .wall = eval.time,
                     .training = eval.time - paused,
                     .accuracy = eval.accuracy,
                     .own_accuracy = eval.own_accuracy});
  }
  return curve;
}

std::int64_t iterations_done(const Metrics& metrics) {
  std::int64_t done = 0;
  for (const IterationLine& line : metrics.iterations) done = std::max(done, line.iter + 1);
  return done;
}

double final_loss(const Metrics& metrics) {
  const std::int64_t done = iterations_done(metrics);
  double sum = 0;
  int n = 0;
  for (const IterationLine& line : metrics.iterations) {
    if (line.iter < done - kFinalLossIterations) continue;
    sum += line.loss;
    ++n;
  }
  return n > 0 ? sum / n : 0;
}

std::optional<AccuracyPoint> first_reaching(const std::vector<AccuracyPoint>& curve, double target) {
  const auto it = std::find_if(curve.begin(), curve.end(),
                               [target](const AccuracyPoint& p) { return p.accuracy >= target; });
  if (it == curve.end()) return std::nullopt;
  return *it;
}

}  // namespace weft::bench
