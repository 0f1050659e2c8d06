// The all-reduce cost fit of `weft profile --network` (the measurement itself runs
// in the integration tests).
#include "runtime/measure/network_profile.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>

#include "units/units.h"

namespace weft::runtime {
namespace {

std::vector<NetworkPoint> line(Seconds a, double b, double noise, std::mt19937& rng) {
  std::uniform_real_distribution<double> jitter(1 - noise, 1 + noise);
  std::vector<NetworkPoint> points;
  for (Bytes n = 4 << 10; n <= (64 << 20); n *= 4) {
    points.push_back({.bytes = n, .seconds = (a + b * static_cast<double>(n)) * jitter(rng)});
  }
  return points;
}

TEST(FitLinear, RecoversRandomLinesExactlyWithoutNoiseAndCloselyWithIt) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> log_a(-6, -2), log_b(-11, -7);
  for (int round = 0; round < 50; ++round) {
    const Seconds a = std::pow(10, log_a(rng));
    const double b = std::pow(10, log_b(rng));
    const NetworkFit exact = fit_linear(line(a, b, 0, rng));
    EXPECT_NEAR(exact.a, a, 1e-9 * a + 1e-15);
    EXPECT_NEAR(exact.b, b, 1e-9 * b);
    EXPECT_NEAR(exact.r2, 1, 1e-9);
    EXPECT_LT(exact.max_relative_error, 1e-9);
    const NetworkFit noisy = fit_linear(line(a, b, 0.05, rng));
    EXPECT_NEAR(noisy.b, b, 0.1 * b);
    EXPECT_LT(noisy.max_relative_error, 0.15);
  }
}

TEST(FitLinear, ANegativeInterceptIsClampedToZero) {
  // Points of t = b·n − c: the unconstrained fit would have a < 0.
  std::vector<NetworkPoint> points{{1000, 0.9e-6}, {2000, 1.95e-6}, {4000, 4.0e-6}};
  const NetworkFit fit = fit_linear(points);
  EXPECT_EQ(fit.a, 0);
  EXPECT_GT(fit.b, 0);
}

TEST(FitLinear, NeedsTwoSizesAndPositiveTimes) {
  EXPECT_THROW(fit_linear({{4096, 1e-4}, {4096, 2e-4}}), std::invalid_argument);
  EXPECT_THROW(fit_linear({{4096, 1e-4}, {8192, 0}}), std::invalid_argument);
}

TEST(GatherBelow, IsTheLargestSizeUpToWhichTheAllGatherWonEverySize) {
  const std::vector<SumTimes> timed{{.bytes = 4096, .allreduce = 6e-3, .allgather = 4e-3},
                                    {.bytes = 16384, .allreduce = 7e-3, .allgather = 5e-3},
                                    {.bytes = 65536, .allreduce = 8e-3, .allgather = 16e-3},
                                    {.bytes = 262144, .allreduce = 30e-3}};
  EXPECT_EQ(gather_below(timed), 16384);
  const auto points = points_used(timed);
  ASSERT_EQ(points.size(), 4u);
  EXPECT_EQ(points[0].seconds, 4e-3);
  EXPECT_EQ(points[1].seconds, 5e-3);
  EXPECT_EQ(points[2].seconds, 8e-3);
  EXPECT_EQ(points[3].seconds, 30e-3);
}

TEST(GatherBelow, AnAllGatherWinLaterDoesNotCountAfterALoss) {
  const std::vector<SumTimes> timed{{.bytes = 4096, .allreduce = 4e-3, .allgather = 5e-3},
                                    {.bytes = 16384, .allreduce = 7e-3, .allgather = 5e-3}};
  EXPECT_EQ(gather_below(timed), 0);
  EXPECT_EQ(points_used(timed)[1].seconds, 7e-3);
  EXPECT_EQ(gather_below({{.bytes = 4096, .allreduce = 4e-3}}), 0);  // never timed
}

TEST(StillRacing, KeepsTheSizesTheAllGatherWonAndTheFirstItLostNeverMoreThanBefore) {
  const std::vector<SumTimes> medians{{.bytes = 4096, .allreduce = 6e-3, .allgather = 4e-3},
                                      {.bytes = 16384, .allreduce = 7e-3, .allgather = 5e-3},
                                      {.bytes = 65536, .allreduce = 8e-3, .allgather = 16e-3},
                                      {.bytes = 262144, .allreduce = 30e-3, .allgather = 20e-3}};
  EXPECT_EQ(still_racing(medians, 4), 3u);  // the win at 256 KiB, after a loss, does not count
  EXPECT_EQ(still_racing(medians, 2), 2u);  // 64 KiB was dropped before: it lacks rounds
  const std::vector<SumTimes> lost{{.bytes = 4096, .allreduce = 4e-3, .allgather = 5e-3},
                                   {.bytes = 16384, .allreduce = 7e-3}};
  EXPECT_EQ(still_racing(lost, 2), 1u);  // the smallest still races: its loss may be noise
  EXPECT_EQ(still_racing({{.bytes = 4096, .allreduce = 4e-3, .allgather = 3e-3}}, 1), 1u);
}

TEST(TimesInARound, SmallSumsAreTimedAsOftenAsFitInTheLargestAtMostEightTimes) {
  // 100Mbit-like: 4 KiB .. 1 MiB.
  EXPECT_EQ(times_in_a_round({4e-3, 5e-3, 8e-3, 33e-3, 132e-3}), (std::vector<int>{8, 8, 8, 4, 1}));
  EXPECT_EQ(times_in_a_round({2e-3, 3e-3}), (std::vector<int>{1, 1}));  // 1.5 fits once
  EXPECT_EQ(times_in_a_round({0.0, 1e-3}), (std::vector<int>{1, 1}));  // a time of 0 is no reason to repeat
  EXPECT_EQ(times_in_a_round({}), std::vector<int>{});
}

TEST(NetworkProfileOptions, BadValuesNameTheirOption) {
  EXPECT_THROW(validate(NetworkProfileOptions{.nproc = 1}), UsageError);
  EXPECT_THROW(validate(NetworkProfileOptions{.min_bytes = 8192, .max_bytes = 4096}), UsageError);
  EXPECT_THROW(validate(NetworkProfileOptions{.repeats = 0}), UsageError);
  EXPECT_NO_THROW(validate(NetworkProfileOptions{.nproc = 2}));
}

}  // namespace
}  // namespace weft::runtime
