#include "bench/report.h"

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
            {.strategy = "mgwfbp", .link = "1Gbit", .measured_iteration = 0.04, .predicted_iteration = 0.05}};
  r.failed = {{.strategy = "dcredit", .link = "100Mbit", .message = "exited with status 134", .log = "logs/x.log"}};
  r.skipped = {{.strategy = "ps", .reason = "--strategy ps: parameter-server strategies cannot be trained yet"}};
  const std::string table = format_table(r);
  EXPECT_NE(table.find("+60.0%"), std::string::npos) << table;   // wfbp's error
  EXPECT_NE(table.find("-20.0%"), std::string::npos) << table;   // mgwfbp's
  EXPECT_NE(table.find("pytorch-ddp"), std::string::npos) << table;
  EXPECT_NE(table.find("to 85%"), std::string::npos) << table;
  EXPECT_NE(table.find("40s"), std::string::npos) << table;
  EXPECT_NE(table.find("failed: dcredit on 100Mbit: exited with status 134 (log: logs/x.log)"), std::string::npos);
  EXPECT_NE(table.find("skipped: ps: --strategy ps"), std::string::npos);
  int mentions = 0;  // the link is named once for its group of runs, once by the failure
  for (auto at = table.find("100Mbit"); at != std::string::npos; at = table.find("100Mbit", at + 1)) ++mentions;
  EXPECT_EQ(mentions, 2) << table;
}

}  // namespace
}  // namespace weft::bench
