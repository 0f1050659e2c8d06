#include "runtime/train/divergence.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "units/ranges.h"

namespace weft::runtime {
namespace {

// Feeds `windows` window means (each held for the window's iterations); the warning, if any.
std::optional<std::string> feed(DivergenceWatch& watch, int window, const std::vector<double>& windows) {
  std::optional<std::string> said;
  for (const double mean : windows) {
    for (int i = 0; i < window; ++i) {
      // Noise that averages out inside a window.
      if (auto w = watch.add(mean + (i % 2 == 0 ? 0.05 : -0.05))) said = w;
    }
  }
  return said;
}

TEST(DivergenceWatch, ThreeRisesInARowOfTenPercentAreSaidOnceWithTheAdvice) {
  DivergenceWatch watch(4, "try X");
  const auto said = feed(watch, 4, {2.0, 1.5, 1.2, 1.3, 1.45, 1.7});
  ASSERT_TRUE(said.has_value());
  EXPECT_NE(said->find("rose over the last 3 windows of 4 iterations (1.2 -> 1.7)"), std::string::npos) << *said;
  EXPECT_NE(said->find("try X"), std::string::npos);
  EXPECT_FALSE(feed(watch, 4, {2.0, 3.0, 4.0, 5.0}).has_value());  // said once
}

TEST(DivergenceWatch, APlateauOrAFallingLossIsNotDiverging) {
  DivergenceWatch plateau(4, "");
  EXPECT_FALSE(feed(plateau, 4, {1.00, 1.01, 1.02, 1.03, 1.00, 1.01, 1.02, 1.03}).has_value());  // rises, but < 10%
  DivergenceWatch learning(4, "");
  EXPECT_FALSE(feed(learning, 4, {2.0, 1.8, 1.9, 1.7, 1.75, 1.6, 1.5}).has_value());
}

TEST(DivergenceWatch, ANonFiniteLossIsSaidAtOnce) {
  DivergenceWatch watch(100, "try X");
  EXPECT_FALSE(watch.add(1.0).has_value());
  const auto said = watch.add(std::numeric_limits<double>::quiet_NaN());
  ASSERT_TRUE(said.has_value());
  EXPECT_NE(said->find("the loss is nan"), std::string::npos) << *said;
}

// Note [A diverging run]: windows of 16 iterations said "diverging" of runs that converged.
TEST(DivergenceWatch, AJobsWindowsAreWholePeriodsOfAtLeastFiftyIterations) {
  JobOptions local{.strategy = "flsgd"};
  local.strategy_options.H = 16;
  DivergenceWatch periods(local);
  const auto said = feed(periods, 64, {1.0, 1.2, 1.4, 1.6});
  ASSERT_TRUE(said.has_value());
  EXPECT_NE(said->find("windows of 64 iterations"), std::string::npos) << *said;
  DivergenceWatch synchronous(JobOptions{.strategy = "wfbp"});
  EXPECT_FALSE(feed(synchronous, 16, {1.0, 1.2, 1.4, 1.6}).has_value());  // 64 iterations: one window
}

TEST(DivergenceWatch, TheAdviceNamesTheOuterOptimizersSettings) {
  JobOptions job{.strategy = "flsgd", .outer = {.kind = "nesterov", .lr = 0.7, .momentum = 0.9}};
  EXPECT_NE(divergence_advice(job).find("--outer-momentum 0.45"), std::string::npos) << divergence_advice(job);
  EXPECT_NE(divergence_advice(job).find("--outer-optimizer none"), std::string::npos);
  {
    ranges::KeywordSpelling python;
    EXPECT_NE(divergence_advice(job).find("outer_lr=0.35"), std::string::npos) << divergence_advice(job);
  }
  EXPECT_EQ(divergence_advice(JobOptions{.strategy = "wfbp"}), "try a lower learning rate");
}

}  // namespace
}  // namespace weft::runtime
