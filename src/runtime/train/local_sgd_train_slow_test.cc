// Local SGD learns (label slow: minutes on two shared cores): the cnn reaches 85%
// test accuracy on Fashion-MNIST with dreamddp (H = 5) on 4 processes within 3
// epochs, with `weft train`'s defaults (plain SGD, lr 0.05, batch 32 per worker).
// Rank 0 evaluates its own parameters at the end, which dreamddp has not all
// averaged in the last iteration: the figure is that of one worker's model.

#include "runtime/train/train_test_util.h"

namespace {

using namespace weft::testing_util;

TEST_F(TrainTest, SlowCnnWithDreamddpOnFourProcessesLearnsFashionMnist) {
  const fs::path metrics = dir_ / "metrics.jsonl";
  const auto [status, err] = weft("cnn",
                                  {"train", "--model", "cnn", "--strategy", "dreamddp", "--H", "5", "--nproc", "4",
                                   "--epochs", "3", "--eval-every", "1000000", "--metrics", metrics.string(),
                                   "--no-progress"},
                                  std::chrono::seconds(3000));
  ASSERT_EQ(status, 0) << err;
  EXPECT_GE(final_accuracy(metrics), 0.85);
}

}  // namespace
