#include "bench/statistics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

namespace weft::bench {
namespace {

// A run of `ranks` ranks whose iteration t takes times[t] on every rank, plus
// `rank_noise` alternating around it (so the ranks' mean is times[t]).
Metrics run_of(const std::vector<double>& times, int ranks = 1, double rank_noise = 0) {
  Metrics m;
  for (int r = 0; r < ranks; ++r) {
    double clock = 0;
    for (std::size_t t = 0; t < times.size(); ++t) {
      const double noise = ranks % 2 == 0 ? (r % 2 == 0 ? rank_noise : -rank_noise) : 0;
      clock += times[t] + noise;
      m.iterations.push_back({.rank = r, .iter = static_cast<std::int64_t>(t), .time = clock,
                              .iteration = times[t] + noise, .loss = 1, .strategy = "s"});
    }
  }
  return m;
}

double sorted_median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

TEST(SteadyState, PeriodOneIsTheMedianAfterWarmUp) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(0.01, 1);
  for (int trial = 0; trial < 100; ++trial) {
    const int warmup = static_cast<int>(rng() % 8);
    std::vector<double> times(warmup + 1 + rng() % 30);
    for (double& t : times) t = u(rng);
    const SteadyState s = steady_iteration_time(run_of(times, 1 + static_cast<int>(rng() % 4), 0.003),
                                                {.warmup = warmup, .period = 1});
    const std::vector<double> steady(times.begin() + warmup, times.end());
    EXPECT_NEAR(s.iteration, sorted_median(steady), 1e-12);
    EXPECT_EQ(s.iterations, static_cast<int>(steady.size()));
  }
}

TEST(SteadyState, WarmUpIterationsDoNotCount) {
  std::vector<double> times(30, 0.1);
  for (int t = 0; t < 5; ++t) times[t] = 100;  // connection set-up, allocator
  EXPECT_DOUBLE_EQ(steady_iteration_time(run_of(times), {.warmup = 5}).iteration, 0.1);
}

// A local-SGD run (period H: H−1 fast iterations and one slow one, repeating) has
// the planner's mean over whole periods, whatever the warm-up's alignment: the
// windows follow the schedule's phases.
TEST(SteadyState, WholePeriodsGiveThePeriodMean) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<double> u(0.01, 1);
  for (int trial = 0; trial < 100; ++trial) {
    const int H = 1 + static_cast<int>(rng() % 6);
    std::vector<double> pattern(H);
    for (double& p : pattern) p = u(rng);
    const int warmup = static_cast<int>(rng() % 12);
    const int steps = warmup + H * (2 + static_cast<int>(rng() % 6)) + static_cast<int>(rng() % H);
    std::vector<double> times(steps);
    for (int t = 0; t < steps; ++t) times[t] = pattern[t % H];
    const double mean = std::accumulate(pattern.begin(), pattern.end(), 0.0) / H;
    const SteadyState s = steady_iteration_time(run_of(times), {.warmup = warmup, .period = H});
    EXPECT_NEAR(s.iteration, mean, 1e-12) << "H=" << H << " warmup=" << warmup << " steps=" << steps;
    EXPECT_EQ(s.iterations % H, 0);
  }
}

// Rank 0's evaluation pauses every rank at its next iterations; those do not count.
TEST(SteadyState, IterationsAfterAnEvaluationDoNotCount) {
  for (int H : {1, 3}) {
    std::vector<double> times(40, 0.2);
    Metrics m = run_of(times);
    const std::int64_t eval_at = 17;
    m.evals.push_back({.rank = 0, .iter = eval_at, .time = 5, .accuracy = 0.5, .loss = 1});
    for (IterationLine& l : m.iterations) {
      if (l.iter > eval_at && l.iter <= eval_at + H + 1) l.iteration = 50;  // the pause
    }
    const SteadyState s = steady_iteration_time(m, {.warmup = 2, .period = H});
    EXPECT_DOUBLE_EQ(s.iteration, 0.2) << "H=" << H;
  }
}

// compute_s goes the same way as iteration_s: the ranks' mean per iteration,
// whole-period windows, their median; a run whose lines lack it has none.
TEST(SteadyState, ComputeIsReducedAsTheIterationTimeIs) {
  for (int H : {1, 3}) {
    std::vector<double> times(40);
    for (std::size_t t = 0; t < times.size(); ++t) times[t] = 0.1 + 0.01 * static_cast<double>(t % 3);
    Metrics m = run_of(times, 2);
    EXPECT_FALSE(steady_iteration_time(m, {.warmup = 2, .period = H}).compute);
    for (IterationLine& l : m.iterations) l.compute = l.iteration / 2 + (l.rank == 0 ? 0.001 : -0.001);
    const SteadyState s = steady_iteration_time(m, {.warmup = 2, .period = H});
    ASSERT_TRUE(s.compute) << "H=" << H;
    EXPECT_NEAR(*s.compute, s.iteration / 2, 1e-12) << "H=" << H;
    m.iterations.at(m.iterations.size() - 30).compute.reset();  // one steady line without it
    EXPECT_FALSE(steady_iteration_time(m, {.warmup = 2, .period = H}).compute) << "H=" << H;
  }
}

TEST(SteadyState, TooShortARunSaysWhatToChange) {
  try {
    steady_iteration_time(run_of(std::vector<double>(6, 0.1)), {.warmup = 5, .period = 3});
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--steps"), std::string::npos) << e.what();
  }
  EXPECT_THROW(steady_iteration_time(Metrics{}, {}), UsageError);
  EXPECT_THROW(steady_iteration_time(run_of({1, 1}), {.warmup = -1}), std::logic_error);
  EXPECT_THROW(steady_iteration_time(run_of({1, 1}), {.period = 0}), std::logic_error);
}

TEST(AccuracyCurve, TrainingTimeLeavesOutEveryEvaluationSoFar) {
  Metrics m = run_of(std::vector<double>(10, 1.0), 2);  // rank 0 ends iteration t at t+1 s
  // Evaluations after iterations 3 and 7, taking 0.5 s and 0.25 s; rank 0's clock
  // after the first runs 0.5 s late.
  for (IterationLine& l : m.iterations) {
    if (l.rank == 0 && l.iter > 3) l.time += 0.5;
  }
  m.evals.push_back({.rank = 0, .iter = 3, .time = 4.5, .accuracy = 0.6, .loss = 1});
  m.evals.push_back({.rank = 0, .iter = 7, .time = 8.5 + 0.25, .accuracy = 0.8, .loss = 1});
  const std::vector<AccuracyPoint> curve = accuracy_curve(m);
  ASSERT_EQ(curve.size(), 2u);
  EXPECT_DOUBLE_EQ(curve[0].wall, 4.5);
  EXPECT_DOUBLE_EQ(curve[0].training, 4.0);
  EXPECT_DOUBLE_EQ(curve[1].wall, 8.75);
  EXPECT_DOUBLE_EQ(curve[1].training, 8.0);
  EXPECT_EQ(first_reaching(curve, 0.7)->iter, 7);
  EXPECT_EQ(first_reaching(curve, 0.6)->iter, 3);
  EXPECT_FALSE(first_reaching(curve, 0.9).has_value());
}

// The final loss is every rank's mean over the last kFinalLossIterations iterations,
// not rank 0's last step; a shorter run's is over all of it.
TEST(FinalLoss, EveryRanksMeanOverTheLastIterations) {
  Metrics m = run_of(std::vector<double>(kFinalLossIterations + 5, 1.0), 2);
  for (IterationLine& l : m.iterations) {
    l.loss = l.iter < 5 ? 100 : (l.rank == 0 ? 1 : 3);
  }
  EXPECT_EQ(iterations_done(m), kFinalLossIterations + 5);
  EXPECT_DOUBLE_EQ(final_loss(m), 2);
  Metrics short_run = run_of({1, 1, 1}, 2);
  short_run.iterations[0].loss = 7;
  EXPECT_DOUBLE_EQ(final_loss(short_run), (7 + 5.0) / 6);
  EXPECT_EQ(final_loss(Metrics{}), 0);
}

}  // namespace
}  // namespace weft::bench
