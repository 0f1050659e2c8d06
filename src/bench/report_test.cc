#include "bench/report.h"

#include <algorithm>

#include <gtest/gtest.h>

namespace weft::bench {
namespace {

TEST(Report, EveryRunFailureAndSkipHasALine) {
  BenchResults r{.model = "cnn", .parameters = 91642, .workers = 2, .batch = 32, .optimizer = "sgd", .H = 5,
                 .steps = 20, .warmup = 5, .mode = Mode::kAccuracy, .target_accuracy = 0.85, .emulated = true};
  r.links = {{.link = "100Mbit"}, {.link = "1Gbit"}};
  r.runs = {{.strategy = "wfbp", .link = "100Mbit", .measured_iteration = 0.08, .predicted_iteration = 0.05,
             .speedup_vs_wfbp = 1.0, .time_to_accuracy = 40},
            {.strategy = kDdpPeerStrategy, .kind = kDdpPeerStrategy, .link = "100Mbit", .measured_iteration = 0.1},
            {.strategy = "mgwfbp", .link = "1Gbit", .measured_iteration = 0.04, .predicted_iteration = 0.05,
             .predicted_on_own_compute = 0.032, .predicted_retimed = 0.0425}};
  r.failed = {{.strategy = "dcredit", .link = "100Mbit", .message = "exited with status 134", .log = "logs/x.log"}};
  r.skipped = {{.strategy = "ps", .reason = "--strategy ps: parameter-server strategies cannot be trained yet"}};
  const std::string table = format_table(r);
  EXPECT_NE(table.find("+60.0%"), std::string::npos) << table;   // wfbp's error
  EXPECT_NE(table.find("-20.0%"), std::string::npos) << table;   // mgwfbp's
  EXPECT_NE(table.find("+25.0%"), std::string::npos) << table;   // mgwfbp's on its own compute
  EXPECT_NE(table.find("-5.9%"), std::string::npos) << table;    // mgwfbp's re-timed before its run
  EXPECT_NE(table.find("0 of 1 predictions within 10% (median |error| 20.0%), 1 of 1 re-timed before their runs "
                       "(5.9%), 0 of 1 on their own compute (25.0%)"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("pytorch-ddp"), std::string::npos) << table;
  EXPECT_NE(table.find("to 85%"), std::string::npos) << table;
  EXPECT_NE(table.find("40s"), std::string::npos) << table;
  EXPECT_NE(table.find("failed: dcredit on 100Mbit: exited with status 134 (log: logs/x.log)"), std::string::npos);
  EXPECT_NE(table.find("skipped: ps: --strategy ps"), std::string::npos);
  int mentions = 0;  // the link is named once for its group of runs, once by the failure, once by the agreement
  for (auto at = table.find("100Mbit"); at != std::string::npos; at = table.find("100Mbit", at + 1)) ++mentions;
  EXPECT_EQ(mentions, 3) << table;
}

RunResult run(std::string strategy, Seconds predicted, std::vector<Seconds> measured) {
  RunResult r{.strategy = std::move(strategy), .link = "100Mbit", .measured_iteration = measured[measured.size() / 2],
              .measured_iterations = measured, .predicted_iteration = predicted};
  return r;
}

TEST(Agreement, CountsPredictionsWithinTheToleranceAndTheirMedianError) {
  BenchResults r;
  r.links = {{.link = "100Mbit"}, {.link = "1Gbit"}};
  r.runs = {run("ssgd", 0.100, {0.105}), run("wfbp", 0.100, {0.088}), run("dcredit", 0.100, {0.110})};
  RunResult peer = run(kDdpPeerStrategy, 0.100, {0.150});  // the peer is not weft's prediction
  peer.kind = kDdpPeerStrategy;
  r.runs.push_back(peer);
  RunResult unpredicted = run("ps", 0, {0.3});
  unpredicted.predicted_iteration.reset();
  r.runs.push_back(unpredicted);

  const std::vector<Agreement> all = agreement(r);
  ASSERT_EQ(all.size(), 1u);  // 1Gbit has no runs
  EXPECT_EQ(all[0].link, "100Mbit");
  EXPECT_EQ(all[0].predicted.runs, 3);
  EXPECT_EQ(all[0].predicted.within_tolerance, 2);  // +5% and +10%, not −12%
  EXPECT_NEAR(all[0].predicted.median_abs_error_pct, 10, 1e-9);
  EXPECT_EQ(all[0].ordered_pairs, 0);  // equal predictions order nothing
  EXPECT_EQ(all[0].on_own_compute.runs, 0);
  EXPECT_EQ(all[0].retimed.runs, 0);

  r.runs[1].predicted_on_own_compute = 0.090;  // wfbp: −2.2% on its own compute
  r.runs[2].predicted_on_own_compute = 0.095;  // dcredit: +15.8%
  r.runs[0].predicted_retimed = 0.120;         // ssgd: −12.5% re-timed
  const Agreement again = agreement(r).at(0);
  EXPECT_EQ(again.on_own_compute.runs, 2);
  EXPECT_EQ(again.on_own_compute.within_tolerance, 1);
  EXPECT_NEAR(again.on_own_compute.median_abs_error_pct, (100.0 * 2 / 90 + 100.0 * 15 / 95) / 2, 1e-9);
  EXPECT_EQ(again.retimed.runs, 1);
  EXPECT_EQ(again.retimed.within_tolerance, 0);
  EXPECT_NEAR(again.retimed.median_abs_error_pct, 12.5, 1e-9);
  EXPECT_EQ(again.predicted.within_tolerance, 2);  // the plain prediction's count is unchanged
}

TEST(Agreement, SwappedPairsSayWhetherTheirRunsOverlap) {
  BenchResults r;
  r.links = {{.link = "100Mbit"}};
  r.runs = {run("flsgd", 0.030, {0.031, 0.032, 0.033}),   // fastest, as predicted
            run("mgwfbp", 0.060, {0.064, 0.066, 0.070}),  // predicted faster than ssgd, measured slower
            run("ssgd", 0.070, {0.063, 0.065, 0.067}),    //   within each other's runs
            run("dcredit", 0.0605, {0.059, 0.0592, 0.0595}),  // a tie with mgwfbp: not ordered
            run("wfbp", 0.080, {0.050, 0.055, 0.058})};   // predicted slowest, measured faster than every other
                                                          //   but flsgd, beyond their runs
  const Agreement g = agreement(r).at(0);
  EXPECT_EQ(g.ordered_pairs, 9);  // 10 pairs less the tie
  ASSERT_EQ(g.swapped.size(), 4u);
  // Largest gap first: mgwfbp (66) over wfbp (55).
  EXPECT_EQ(g.swapped[0].predicted_faster, "mgwfbp");
  EXPECT_EQ(g.swapped[0].predicted_slower, "wfbp");
  EXPECT_NEAR(g.swapped[0].measured_gap_pct, 20, 1e-9);
  EXPECT_EQ(g.swapped[0].spread, Spread::kApart);
  const auto mgwfbp_ssgd = std::find_if(g.swapped.begin(), g.swapped.end(), [](const SwappedPair& s) {
    return s.predicted_faster == "mgwfbp" && s.predicted_slower == "ssgd";
  });
  ASSERT_NE(mgwfbp_ssgd, g.swapped.end());
  EXPECT_EQ(mgwfbp_ssgd->spread, Spread::kOverlapping);

  const std::string table = format_table(r);
  EXPECT_NE(table.find("5 of 9 pairs it orders measured in its order, 3 swapped beyond their runs' spread"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("mgwfbp predicted faster than ssgd, measured 1.5% slower (their runs overlap)"),
            std::string::npos)
      << table;
}

TEST(Agreement, SaysHowFarApartEachStrategysRunsMeasured) {
  BenchResults r;
  r.links = {{.link = "100Mbit"}};
  r.runs = {run("ssgd", 0.030, {0.030, 0.033}),         // 10% apart
            run("flsgd", 0.020, {0.025, 0.020, 0.021}),  // 25%, listed out of order
            run("mgwfbp", 0.035, {0.034, 0.0357}),       // 5%
            run("dcredit", 0.040, {0.050})};             // run once: no spread
  const RepeatSpread s = agreement(r).at(0).repeats;
  EXPECT_EQ(s.strategies, 3);
  EXPECT_NEAR(s.median_pct, 10, 1e-9);
  EXPECT_NEAR(s.largest_pct, 25, 1e-9);
  EXPECT_EQ(s.largest, "flsgd");
  const std::string table = format_table(r);
  EXPECT_NE(table.find("the runs of one strategy differ by a median 10.0%, at most 25.0% (flsgd)"),
            std::string::npos)
      << table;

  r.runs = {run("ssgd", 0.030, {0.030}), run("flsgd", 0.020, {0.025})};
  EXPECT_EQ(agreement(r).at(0).repeats.strategies, 0);
  EXPECT_EQ(format_table(r).find("differ by"), std::string::npos);
}

TEST(Agreement, ASwapBetweenSingleRunsIsNeverBeyondTheirSpread) {
  BenchResults r;
  r.links = {{.link = "100Mbit"}};
  r.runs = {run("dcredit", 0.060, {0.0725}), run("wfbp", 0.070, {0.0722})};
  const Agreement g = agreement(r).at(0);
  ASSERT_EQ(g.swapped.size(), 1u);
  EXPECT_EQ(g.swapped[0].spread, Spread::kRunOnce);
  const std::string table = format_table(r);
  EXPECT_NE(table.find("1 pairs it orders measured in its order, 0 swapped beyond"), std::string::npos) << table;
  EXPECT_NE(table.find("(run once: no spread to tell by)"), std::string::npos) << table;
}

}  // namespace
}  // namespace weft::bench
