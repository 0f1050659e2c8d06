// What a benchmark reports from a run's metrics: the steady-state iteration time and
// the time to reach a test accuracy.
//
// Note [Steady-state iteration time]
// The planner's `iteration_s` is the mean time of one iteration over whole periods
// in steady state (docs/formats.md §6). The measured counterpart must mean the same thing, and
// be robust to the odd slow iteration of a shared machine:
//  1. per iteration, the mean of the ranks' `iteration_s` (the ranks are coupled
//     by their collectives, so they agree up to noise);
//  2. the first `warmup` iterations are dropped (allocator, connections, caches);
//  3. the rest is cut into windows of `period` consecutive iterations aligned to the
//     schedule (window k holds iterations k·period .. k·period + period − 1), so that
//     each window holds every phase of a local-SGD period exactly once, and each
//     window's mean is one sample of "mean time over a whole period"; a trailing
//     partial window is dropped;
//  4. windows touched by an evaluation are dropped: rank 0 evaluates the test set
//     between iterations, and the iteration lines after it (on every rank, which
//     wait for rank 0 at their next collective, up to a period later) include that
//     pause. Iterations it+1 .. it+period+1 after an evaluation at `it` are touched;
//  5. the result is the median of the window means.
// For period 1 this is the median of the per-iteration times after warm-up. The
// ranks' `compute_s`, where every line has it, is reduced the same way: what the
// run computed per iteration, to set beside the profile's forward + backward.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "bench/metrics.h"
#include "units/units.h"

namespace weft::bench {

struct SteadyStateOptions {
  int warmup = 5;  // iterations dropped at the start; >= 0
  int period = 1;  // the schedule's period (H for local SGD); >= 1
};

struct SteadyState {
  Seconds iteration = 0;  // median of the window means
  std::optional<Seconds> compute;  // the same over compute_s; none unless every line has it
  int windows = 0;        // windows the median is taken over
  int iterations = 0;     // iterations inside those windows
};

// Note [Steady-state iteration time].
// THROWS UsageError when no complete window is left (saying how many iterations the
// run had, and that --steps must exceed the warm-up by a period); std::logic_error
// if warmup < 0 or period < 1.
SteadyState steady_iteration_time(const Metrics& metrics, const SteadyStateOptions& options);

// Rank 0's wall-clock since the start at its evaluations, two ways.
struct AccuracyPoint {
  std::int64_t iter = 0;
  Seconds wall = 0;      // time_s of the evaluation line
  Seconds training = 0;  // wall minus the evaluations so far (each evaluation's
                         // pause: its time_s minus rank 0's time_s of iteration iter)
  double accuracy = 0;                 // of the model the workers agree on (EvalLine)
  std::optional<double> own_accuracy;  // rank 0's own model's, where that differs
};

// Rank 0's evaluations in order, with both clocks.
std::vector<AccuracyPoint> accuracy_curve(const Metrics& metrics);

// The first point of `curve` whose accuracy is >= target, or none.
std::optional<AccuracyPoint> first_reaching(const std::vector<AccuracyPoint>& curve, double target);

// How many iterations the run did: one past the last `iter` of any rank.
std::int64_t iterations_done(const Metrics& metrics);

// The training loss a run ended at: the mean over every rank's last
// kFinalLossIterations iterations (all of them in a shorter run), since one
// rank's single step is too noisy to compare two runs' losses by; 0 without
// iterations.
inline constexpr std::int64_t kFinalLossIterations = 20;
double final_loss(const Metrics& metrics);

}  // namespace weft::bench
