// `weft train` learns (label slow: minutes on two shared cores): the cnn reaches
// 85% test accuracy on Fashion-MNIST with wfbp on 2 processes in 2 epochs, and
// gpt-tiny's loss falls well below its first value.
#include <numeric>

#include <nlohmann/json.hpp>

#include "runtime/train/train_test_util.h"

namespace {

using namespace weft::testing_util;

TEST_F(TrainTest, SlowCnnWithWfbpOnTwoProcessesLearnsFashionMnist) {
  const fs::path metrics = dir_ / "metrics.jsonl";
  const auto [status, err] = weft("cnn",
                                  {"train", "--model", "cnn", "--strategy", "wfbp", "--nproc", "2", "--epochs", "2",
                                   "--eval-every", "1000000", "--metrics", metrics.string(), "--no-progress"},
                                  std::chrono::seconds(3000));
  ASSERT_EQ(status, 0) << err;
  EXPECT_GE(final_accuracy(metrics), 0.85);
}

TEST_F(TrainTest, SlowGptTinyLossFalls) {
  const fs::path metrics = dir_ / "metrics.jsonl";
  const auto [status, err] = weft("gpt",
                                  {"train", "--model", "gpt-tiny", "--strategy", "wfbp", "--nproc", "2", "--steps",
                                   "300", "--optimizer", "adam", "--lr", "0.003", "--metrics", metrics.string(),
                                   "--no-progress"},
                                  std::chrono::seconds(3000));
  ASSERT_EQ(status, 0) << err;
  std::vector<double> losses;  // rank 0's, in order
  std::istringstream lines(read_text(metrics));
  for (std::string line; std::getline(lines, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["rank"] == 0 && j.contains("loss")) losses.push_back(j["loss"]);
  }
  ASSERT_GE(losses.size(), 20u);
  auto mean = [](auto first, auto last) { return std::accumulate(first, last, 0.0) / std::distance(first, last); };
  const double first = mean(losses.begin(), losses.begin() + 5);
  const double last = mean(losses.end() - 10, losses.end());
  EXPECT_LT(last, 0.6 * first) << "first " << first << ", last " << last;
}

}  // namespace
