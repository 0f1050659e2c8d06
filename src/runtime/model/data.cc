// Batches for the runtime models: the datasets of datasets.h as tensors, read in
// shards (Note [Sharding] in sharding.h).
#include "runtime/model/data.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include "runtime/model/datasets.h"
#include "runtime/model/sharding.h"
#include "units/units.h"

namespace weft::runtime {
namespace {

// Per-pixel statistics of the Fashion-MNIST training images (after scaling to
// [0, 1]); inputs are standardised with them, as torchvision's examples do.
constexpr double kFashionMnistMean = 0.2860;
constexpr double kFashionMnistStd = 0.3530;

// Synthetic sets have the real ones' shapes; the image sets also their sizes (an
// epoch means the same number of steps), the text sets a round size.
constexpr std::int64_t kSyntheticImageTrain = 60000;
constexpr std::int64_t kSyntheticImageTest = 10000;
constexpr std::int64_t kSyntheticTextTrain = 32768;
constexpr std::int64_t kSyntheticTextTest = 1024;

// The last 1/20 of the corpus is held out for evaluation: a contiguous stretch,
// so that no evaluation window overlaps a fortune seen in training.
constexpr std::int64_t kTextHeldOutFraction = 20;

// A set of examples stored compactly (bytes), turned into a batch on demand.
class Examples {
 public:
  virtual ~Examples() = default;
  virtual std::int64_t size() const = 0;
  virtual Batch gather(const torch::Tensor& indices) const = 0;  // int64 indices
};

// Images [n, 1, rows, cols] uint8 and labels [n] int64; batches are standardised
// float images.
class ImageExamples final : public Examples {
 public:
  ImageExamples(torch::Tensor pixels, torch::Tensor labels)
      : pixels_(std::move(pixels)), labels_(std::move(labels)) {}
  std::int64_t size() const override { return pixels_.size(0); }
  Batch gather(const torch::Tensor& indices) const override {
    torch::Tensor x = pixels_.index_select(0, indices).to(torch::kFloat32);
    x = x.div_(255.0).sub_(kFashionMnistMean).div_(kFashionMnistStd);
    return {x, labels_.index_select(0, indices)};
  }

 private:
  torch::Tensor pixels_;
  torch::Tensor labels_;
};

// Windows [n, kTextContext + 1] of uint8 characters; a batch's input is the first
// kTextContext characters, its target each input's next character (int64 both).
class TextExamples final : public Examples {
 public:
  explicit TextExamples(torch::Tensor windows) : windows_(std::move(windows)) {}
  std::int64_t size() const override { return windows_.size(0); }
  Batch gather(const torch::Tensor& indices) const override {
    const torch::Tensor rows = windows_.index_select(0, indices).to(torch::kInt64);
    return {rows.narrow(1, 0, kTextContext).contiguous(), rows.narrow(1, 1, kTextContext).contiguous()};
  }

 private:
  torch::Tensor windows_;
};

std::shared_ptr<Examples> image_examples(const ImageSet& set) {
  const torch::Tensor pixels =
      torch::from_blob(const_cast<std::uint8_t*>(set.pixels.data()), {set.count, 1, set.rows, set.cols},
                       torch::kUInt8)
          .clone();
  const torch::Tensor labels =
      torch::from_blob(const_cast<std::uint8_t*>(set.labels.data()), {set.count}, torch::kUInt8)
          .to(torch::kInt64);
  return std::make_shared<ImageExamples>(pixels, labels);
}

// Non-overlapping windows: sample i is characters [i·C, i·C + C] (C + 1 of them,
// the last one shared with the next sample as its first input).
std::shared_ptr<Examples> text_examples(const torch::Tensor& text) {
  const std::int64_t count = (text.size(0) - 1) / kTextContext;
  return std::make_shared<TextExamples>(text.as_strided({count, kTextContext + 1}, {kTextContext, 1}).clone());
}

torch::Generator generator(std::uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

struct TrainTest {
  std::shared_ptr<Examples> train;
  std::shared_ptr<Examples> test;
};

TrainTest fashion_mnist() {
  return {image_examples(read_fashion_mnist(kFashionMnistDir, Split::kTrain)),
          image_examples(read_fashion_mnist(kFashionMnistDir, Split::kTest))};
}

TrainTest fortunes() {
  const std::string corpus = read_fortunes(kFortunesDir);
  const torch::Tensor text =
      torch::from_blob(const_cast<char*>(corpus.data()), {static_cast<std::int64_t>(corpus.size())}, torch::kUInt8)
          .clone();
  const std::int64_t held_out = text.size(0) / kTextHeldOutFraction;
  const std::int64_t train = text.size(0) - held_out;
  return {text_examples(text.narrow(0, 0, train)), text_examples(text.narrow(0, train, held_out))};
}

// Synthetic data depends on the seed only (not the rank), so that the shards of
// all ranks partition one and the same set.
TrainTest synthetic(bool images, std::uint64_t seed) {
  torch::Generator gen = generator(seed);
  const auto bytes = [&](std::int64_t n, std::int64_t high, torch::IntArrayRef tail) {
    std::vector<std::int64_t> shape{n};
    shape.insert(shape.end(), tail.begin(), tail.end());
    return torch::randint(0, high, shape, gen, torch::kUInt8);
  };
  if (images) {
    const auto set = [&](std::int64_t n) {
      return std::make_shared<ImageExamples>(bytes(n, 256, {1, 28, 28}), bytes(n, 10, {}).to(torch::kInt64));
    };
    return {set(kSyntheticImageTrain), set(kSyntheticImageTest)};
  }
  const auto set = [&](std::int64_t n) { return std::make_shared<TextExamples>(bytes(n, 256, {kTextContext + 1})); };
  return {set(kSyntheticTextTrain), set(kSyntheticTextTest)};
}

class ShardedSource final : public DataSource {
 public:
  ShardedSource(TrainTest data, const DataOptions& options)
      : data_(std::move(data)),
        shard_{.rank = options.rank, .world = options.world, .batch = options.batch},
        seed_(options.seed),
        steps_(steps_per_epoch(data_.train->size(), shard_)) {
    if (steps_ == 0) {
      throw UsageError(fmt::format("batch {} × {} workers = {} is more than the {} training examples of {}; "
                                   "use a smaller batch",
                                   shard_.batch, shard_.world, std::int64_t{shard_.batch} * shard_.world,
                                   data_.train->size(), options.model));
    }
    start_epoch(0);
  }

  Batch next() override {
    if (step_ == steps_) start_epoch(epoch_ + 1);
    std::vector<std::int64_t> indices = shard_positions(shard_, step_++);
    for (std::int64_t& i : indices) i = permutation_[i];
    return data_.train->gather(torch::tensor(indices, torch::kInt64));
  }

  std::int64_t batches_per_epoch() const override { return steps_; }

  std::int64_t position() const override { return epoch_ * steps_ + step_; }
  void seek(std::int64_t batches) override {
    if (batches < 0) throw UsageError(fmt::format("data position {} is negative", batches));
    start_epoch(batches / steps_);
    step_ = batches % steps_;
  }

  std::vector<Batch> eval_batches(int batch) override {
    if (batch < 1) throw UsageError(fmt::format("evaluation batch {} is not >= 1", batch));
    std::vector<Batch> batches;
    const std::int64_t n = data_.test->size();
    for (std::int64_t start = 0; start < n; start += batch) {
      batches.push_back(data_.test->gather(torch::arange(start, std::min(n, start + batch), torch::kInt64)));
    }
    return batches;
  }

 private:
  void start_epoch(std::int64_t epoch) {
    epoch_ = epoch;
    step_ = 0;
    permutation_ = epoch_permutation(data_.train->size(), seed_, epoch);
  }

  TrainTest data_;
  Shard shard_;
  std::uint64_t seed_;
  std::int64_t steps_;
  std::int64_t epoch_ = 0;
  std::int64_t step_ = 0;
  std::vector<std::int64_t> permutation_;
};

void check(const DataOptions& o) {
  if (o.world < 1) throw UsageError(fmt::format("world size {} is not >= 1", o.world));
  if (o.rank < 0 || o.rank >= o.world) {
    throw UsageError(fmt::format("rank {} is not in 0..{} (world size {})", o.rank, o.world - 1, o.world));
  }
  if (o.batch < 1) throw UsageError(fmt::format("batch {} is not >= 1", o.batch));
}

}  // namespace

std::unique_ptr<DataSource> make_data(const DataOptions& options) {
  check(options);
  const bool images = options.model == "mlp" || options.model == "cnn";
  if (!images && options.model != "gpt-tiny") {
    throw UsageError(fmt::format("no dataset for model '{}'; accepted: mlp, cnn (Fashion-MNIST), gpt-tiny (text)",
                                 options.model));
  }
  TrainTest data = options.synthetic ? synthetic(images, options.seed) : images ? fashion_mnist() : fortunes();
  return std::make_unique<ShardedSource>(std::move(data), options);
}

}  // namespace weft::runtime
