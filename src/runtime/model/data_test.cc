#include "runtime/model/data.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>

#include "runtime/model/datasets.h"
#include "runtime/model/sharding.h"
#include "units/units.h"

namespace weft::runtime {
namespace {

// ---- Note [Sharding], on plain integers ----

TEST(Sharding, EpochPermutationIsAPermutationThatChangesWithSeedAndEpoch) {
  for (std::int64_t n : {0, 1, 2, 7, 1000}) {
    std::vector<std::int64_t> perm = epoch_permutation(n, 3, 1);
    EXPECT_EQ(perm, epoch_permutation(n, 3, 1));  // a function of its arguments
    std::sort(perm.begin(), perm.end());
    for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(perm[i], i);
  }
  EXPECT_NE(epoch_permutation(1000, 3, 1), epoch_permutation(1000, 3, 2));
  EXPECT_NE(epoch_permutation(1000, 3, 1), epoch_permutation(1000, 4, 1));
  EXPECT_NE(epoch_permutation(1000, 3, 1), epoch_permutation(1000, 4, 0));
}

TEST(Sharding, RanksPartitionEachStepOfTheCombinedBatch) {
  std::mt19937 rng(1);
  for (int trial = 0; trial < 200; ++trial) {
    const int world = 1 + static_cast<int>(rng() % 5);
    const int batch = 1 + static_cast<int>(rng() % 6);
    const std::int64_t n = static_cast<std::int64_t>(rng() % 200);
    const std::int64_t steps = steps_per_epoch(n, {.rank = 0, .world = world, .batch = batch});
    ASSERT_EQ(steps, n / (world * batch));
    std::vector<int> seen(static_cast<std::size_t>(n), 0);
    for (std::int64_t s = 0; s < steps; ++s) {
      const std::vector<std::int64_t> combined = shard_positions({.rank = 0, .world = 1, .batch = world * batch}, s);
      for (int r = 0; r < world; ++r) {
        const std::vector<std::int64_t> mine = shard_positions({.rank = r, .world = world, .batch = batch}, s);
        for (int j = 0; j < batch; ++j) {
          ASSERT_EQ(mine[j], combined[j * world + r]) << "world " << world << " batch " << batch;
          ++seen.at(mine[j]);
        }
      }
    }
    // Each position at most once an epoch; all but the n mod (W·B) last ones.
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), steps * world * batch);
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 0), n - steps * world * batch);
  }
}

// ---- the union property on the batches themselves ----

void expect_union_of_shards(DataOptions options, int world, int steps) {
  const int batch = options.batch;
  std::vector<std::unique_ptr<DataSource>> ranks;
  for (int r = 0; r < world; ++r) {
    options.rank = r;
    options.world = world;
    ranks.push_back(make_data(options));
  }
  options.rank = 0;
  options.world = 1;
  options.batch = batch * world;
  const auto single = make_data(options);
  EXPECT_EQ(single->batches_per_epoch(), ranks[0]->batches_per_epoch());
  for (int s = 0; s < steps; ++s) {
    const Batch all = single->next();
    for (int r = 0; r < world; ++r) {
      const Batch mine = ranks[r]->next();
      // Row i of the combined batch is row i / W of rank i % W.
      const torch::Tensor rows = torch::arange(r, batch * world, world);
      ASSERT_TRUE(torch::equal(mine.input, all.input.index_select(0, rows))) << "step " << s << " rank " << r;
      ASSERT_TRUE(torch::equal(mine.target, all.target.index_select(0, rows))) << "step " << s << " rank " << r;
    }
  }
}

TEST(Data, SyntheticShardsUnionToTheCombinedBatchAcrossEpochs) {
  // 60,000 synthetic images in steps of 2·1000: step 30 is the next epoch's first.
  expect_union_of_shards({.model = "cnn", .synthetic = true, .batch = 1000, .seed = 3}, 2, 32);
  expect_union_of_shards({.model = "mlp", .synthetic = true, .batch = 5, .seed = 4}, 3, 4);
  expect_union_of_shards({.model = "gpt-tiny", .synthetic = true, .batch = 4, .seed = 5}, 2, 4);
}

TEST(Data, EpochsShuffleDifferently) {
  const auto data = make_data({.model = "mlp", .synthetic = true, .batch = 30000, .seed = 3});
  ASSERT_EQ(data->batches_per_epoch(), 2);
  const Batch first = data->next();
  data->next();
  const Batch next_epoch = data->next();
  EXPECT_FALSE(torch::equal(first.target, next_epoch.target));
}

TEST(Data, SyntheticShapesMatchTheRealData) {
  const Batch image = make_data({.model = "mlp", .synthetic = true, .batch = 4})->next();
  EXPECT_EQ(image.input.sizes().vec(), (std::vector<std::int64_t>{4, 1, 28, 28}));
  EXPECT_EQ(image.input.scalar_type(), torch::kFloat32);
  EXPECT_EQ(image.target.sizes().vec(), std::vector<std::int64_t>{4});
  EXPECT_EQ(image.target.scalar_type(), torch::kInt64);
  const Batch text = make_data({.model = "gpt-tiny", .synthetic = true, .batch = 4})->next();
  EXPECT_EQ(text.input.sizes().vec(), (std::vector<std::int64_t>{4, kTextContext}));
  EXPECT_EQ(text.target.sizes().vec(), (std::vector<std::int64_t>{4, kTextContext}));
}

TEST(Data, BadOptionsAreUsageErrors) {
  EXPECT_THROW(make_data({.model = "resnet", .synthetic = true}), UsageError);
  EXPECT_THROW(make_data({.model = "mlp", .synthetic = true, .rank = 2, .world = 2}), UsageError);
  EXPECT_THROW(make_data({.model = "mlp", .synthetic = true, .world = 0}), UsageError);
  EXPECT_THROW(make_data({.model = "mlp", .synthetic = true, .batch = 0}), UsageError);
  EXPECT_THROW(make_data({.model = "mlp", .synthetic = true, .world = 2, .batch = 30001}), UsageError);
}

// ---- the real datasets (skipped, saying why, where the packages are missing) ----

bool have_fashion_mnist() { return std::filesystem::exists(kFashionMnistDir / "train-images-idx3-ubyte.gz"); }

#define REQUIRE_FASHION_MNIST() \
  if (!have_fashion_mnist()) GTEST_SKIP() << "needs Debian's dataset-fashion-mnist"

TEST(FashionMnist, TrainAndTestSplitsHaveTheirSizesAndBalancedLabels) {
  REQUIRE_FASHION_MNIST();
  for (const auto& [split, count] : {std::pair{Split::kTrain, 60000}, std::pair{Split::kTest, 10000}}) {
    const ImageSet set = read_fashion_mnist(kFashionMnistDir, split);
    EXPECT_EQ(set.count, count);
    EXPECT_EQ(set.rows, 28);
    EXPECT_EQ(set.cols, 28);
    EXPECT_EQ(set.pixels.size(), std::size_t(count) * 28 * 28);
    ASSERT_EQ(set.labels.size(), std::size_t(count));
    std::vector<int> per_class(10, 0);
    for (std::uint8_t label : set.labels) ++per_class.at(label);  // .at: labels are 0..9
    for (int c = 0; c < 10; ++c) EXPECT_EQ(per_class[c], count / 10) << "class " << c;
  }
}

TEST(FashionMnist, ShardsUnionToTheCombinedBatch) {
  REQUIRE_FASHION_MNIST();
  expect_union_of_shards({.model = "mlp", .batch = 8, .seed = 9}, 2, 3);
}

TEST(FashionMnist, BatchesAreStandardisedAndEvaluationCoversTheTestSet) {
  REQUIRE_FASHION_MNIST();
  const auto data = make_data({.model = "cnn", .batch = 500});
  EXPECT_EQ(data->batches_per_epoch(), 120);
  const Batch batch = data->next();
  EXPECT_NEAR(batch.input.mean().item<double>(), 0.0, 0.1);
  EXPECT_NEAR(batch.input.std().item<double>(), 1.0, 0.1);
  std::int64_t samples = 0;
  for (const Batch& b : data->eval_batches(3000)) samples += b.target.size(0);
  EXPECT_EQ(samples, 10000);
}

TEST(FashionMnist, AMissingDirectorySaysWhatToInstall) {
  try {
    read_fashion_mnist("/nonexistent/fashion", Split::kTrain);
    FAIL() << "no error";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("/nonexistent/fashion/train-images-idx3-ubyte.gz"), std::string::npos) << what;
    EXPECT_NE(what.find("apt-get install dataset-fashion-mnist"), std::string::npos) << what;
  }
}

TEST(FashionMnist, AFileThatIsNotIdxIsNamed) {
  const std::filesystem::path dir = std::filesystem::path(testing::TempDir()) / "weft-not-idx";
  std::filesystem::create_directories(dir);
  for (const char* name : {"t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"}) {
    std::ofstream(dir / name) << "plain text, not gzip";  // zlib reads it transparently
  }
  try {
    read_fashion_mnist(dir, Split::kTest);
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("t10k-images-idx3-ubyte.gz: not an IDX file"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST(Fortunes, TextBatchesPredictTheNextCharacter) {
  if (!std::filesystem::exists(kFortunesDir)) GTEST_SKIP() << "needs Debian's fortunes";
  const auto data = make_data({.model = "gpt-tiny", .batch = 8, .seed = 1});
  EXPECT_GT(data->batches_per_epoch(), 1000);
  const Batch batch = data->next();
  EXPECT_TRUE(torch::equal(batch.input.narrow(1, 1, kTextContext - 1), batch.target.narrow(1, 0, kTextContext - 1)));
  EXPECT_LT(batch.input.max().item<std::int64_t>(), kByteVocabulary);
  EXPECT_FALSE(data->eval_batches(64).empty());
  expect_union_of_shards({.model = "gpt-tiny", .batch = 4, .seed = 2}, 2, 2);
}

TEST(Fortunes, AMissingDirectorySaysWhatToInstall) {
  try {
    read_fortunes("/nonexistent/fortunes");
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("apt-get install fortunes"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace weft::runtime
