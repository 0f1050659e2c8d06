// The checkpoint format's round trip and refusals (runtime/train/checkpoint.h), and the
// state it is made of: the optimizer's and the data position.
#include "runtime/train/checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <unistd.h>

#include "runtime/model/data.h"
#include "runtime/model/optimizer.h"
#include "units/units.h"

namespace weft::runtime {
namespace {

namespace fs = std::filesystem;

class CheckpointFiles : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("weft_checkpoint_test_{}", ::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static RankCheckpoint sample() {
    return {.iteration = 7,
            .data_position = 42,
            .tensors = {{"param/0/0", torch::randn({3, 4})},
                        {"opt/steps", torch::tensor(std::vector<std::int64_t>{5, 6})},
                        {"rng/torch", torch::randint(0, 255, {16}, torch::kUInt8)},
                        {"scalar", torch::tensor(2.5f)}}};
  }
  std::string refusal(const nlohmann::json& job, int rank, std::int64_t iteration) {
    try {
      load_rank_checkpoint(dir_, job, rank, iteration);
    } catch (const UsageError& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
  const nlohmann::json job_{{"model", "mlp"}, {"workers", 2}};
};

TEST_F(CheckpointFiles, RoundTripIsExact) {
  const RankCheckpoint saved = sample();
  save_rank_checkpoint(dir_, job_, 1, saved);
  commit_checkpoint(dir_, job_, 7, 2);
  EXPECT_EQ(latest_checkpoint(dir_, job_), 7);
  const RankCheckpoint loaded = load_rank_checkpoint(dir_, job_, 1, 7);
  EXPECT_EQ(loaded.iteration, 7);
  EXPECT_EQ(loaded.data_position, 42);
  ASSERT_EQ(loaded.tensors.size(), saved.tensors.size());
  for (const auto& [name, tensor] : saved.tensors) {
    ASSERT_TRUE(loaded.tensors.contains(name)) << name;
    EXPECT_TRUE(torch::equal(loaded.tensors.at(name), tensor)) << name;
  }
}

TEST_F(CheckpointFiles, AnotherJobOrAVersionOrACorruptFileIsRefused) {
  save_rank_checkpoint(dir_, job_, 0, sample());
  commit_checkpoint(dir_, job_, 7, 1);
  const nlohmann::json other{{"model", "cnn"}, {"workers", 2}};
  try {
    latest_checkpoint(dir_, other);
    ADD_FAILURE() << "another job's checkpoint was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("another job: it is of model \"mlp\", this job's is \"cnn\""),
              std::string::npos)
        << e.what();
  }
  EXPECT_NE(refusal(other, 0, 7).find("another job"), std::string::npos);
  EXPECT_NE(refusal(job_, 1, 7).find("missing"), std::string::npos);

  const fs::path file = dir_ / "rank0-iter7.ckpt";
  std::string text;
  {
    std::ifstream in(file, std::ios::binary);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::string flipped = text;
  flipped[flipped.size() - 3] ^= 0x5a;
  std::ofstream(file, std::ios::binary | std::ios::trunc) << flipped;
  EXPECT_NE(refusal(job_, 0, 7).find("corrupt"), std::string::npos);
  std::ofstream(file, std::ios::binary | std::ios::trunc) << text.substr(0, text.size() - 10);
  EXPECT_NE(refusal(job_, 0, 7).find("truncated"), std::string::npos);

  std::ofstream(dir_ / "latest.json") << R"({"format": 99, "job": {}, "iteration": 7})";
  try {
    latest_checkpoint(dir_, job_);
    ADD_FAILURE() << "format 99 was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint format 99; this weft reads format 1 only"), std::string::npos)
        << e.what();
  }
  fs::remove(dir_ / "latest.json");
  EXPECT_THROW(latest_checkpoint(dir_, job_), UsageError);
}

TEST_F(CheckpointFiles, PruneKeepsTheNewerFilesAndOtherRanks) {
  for (std::int64_t t : {5, 10, 15}) {
    RankCheckpoint c = sample();
    c.iteration = t;
    save_rank_checkpoint(dir_, job_, 0, c);
    save_rank_checkpoint(dir_, job_, 1, c);
  }
  prune_checkpoints(dir_, 0, 10);
  EXPECT_FALSE(fs::exists(dir_ / "rank0-iter5.ckpt"));
  EXPECT_TRUE(fs::exists(dir_ / "rank0-iter10.ckpt"));
  EXPECT_TRUE(fs::exists(dir_ / "rank0-iter15.ckpt"));
  EXPECT_TRUE(fs::exists(dir_ / "rank1-iter5.ckpt"));
}

// An optimizer restored from state() continues exactly as the original.
TEST(OptimizerState, RestoredOptimizerContinuesBitIdentically) {
  for (const std::string kind : {"sgd", "momentum", "adam"}) {
    SCOPED_TRACE(kind);
    auto make = [] { return std::vector<std::vector<torch::Tensor>>{{torch::ones({3}).requires_grad_()}}; };
    auto a = make();
    auto b = make();
    LayerOptimizer first(a, {.kind = kind, .lr = 0.1});
    const auto step = [](LayerOptimizer& o, std::vector<std::vector<torch::Tensor>>& p, float g) {
      p[0][0].mutable_grad() = torch::full({3}, g);
      o.step(0);
    };
    step(first, a, 0.5f);
    step(first, a, -0.25f);
    LayerOptimizer second(b, {.kind = kind, .lr = 0.1});
    {
      torch::NoGradGuard no_grad;
      b[0][0].copy_(a[0][0]);
    }
    second.load_state(first.state());
    step(first, a, 0.125f);
    step(second, b, 0.125f);
    EXPECT_TRUE(torch::equal(a[0][0], b[0][0]));
  }
}

TEST(OptimizerState, StateOfAnotherShapeIsRefused) {
  std::vector<std::vector<torch::Tensor>> p{{torch::ones({3}).requires_grad_()}};
  LayerOptimizer o(p, {.kind = "momentum", .lr = 0.1});
  auto state = o.state();
  state["m/0/0"] = torch::zeros({4});
  EXPECT_THROW(o.load_state(state), std::logic_error);
  state.erase("steps");
  EXPECT_THROW(o.load_state(state), std::logic_error);
}

// A source sought to a position hands out what the original does from there,
// across an epoch boundary too.
TEST(DataPosition, SeekResumesTheSameBatches) {
  const DataOptions options{.model = "mlp", .synthetic = true, .rank = 1, .world = 2, .batch = 256, .seed = 4};
  auto original = make_data(options);
  const std::int64_t epoch = original->batches_per_epoch();
  for (std::int64_t i = 0; i < epoch - 1; ++i) original->next();
  auto resumed = make_data(options);
  resumed->seek(original->position());
  EXPECT_EQ(resumed->position(), epoch - 1);
  for (int i = 0; i < 3; ++i) {
    const Batch a = original->next();
    const Batch b = resumed->next();
    EXPECT_TRUE(torch::equal(a.input, b.input)) << "batch " << i;
    EXPECT_TRUE(torch::equal(a.target, b.target)) << "batch " << i;
  }
  EXPECT_EQ(resumed->position(), epoch + 2);
  EXPECT_THROW(resumed->seek(-1), UsageError);
}

}  // namespace
}  // namespace weft::runtime
