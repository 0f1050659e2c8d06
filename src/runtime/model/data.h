// Training data for the runtime models (docs/runtime.md §3): Fashion-MNIST from Debian's
// dataset-fashion-mnist, a character corpus from Debian's fortunes for gpt-tiny, and
// synthetic data of the right shapes for benchmarks.
//
// Each worker reads a disjoint shard of the training set: rank r of W takes samples
// r, r+W, r+2W, ... of a per-epoch permutation that every rank computes alike from
// (seed, epoch). One process reading with rank 0 of 1 and a batch of W·B sees
// exactly the union of the W workers' batches of B, in rank order — the property the
// equivalence tests rely on. Precisely: row i of that combined batch is row i / W of
// rank i % W's batch (Note [Sharding] in runtime/model/sharding.h).
//
// Thread-safety: one reader per thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <torch/torch.h>

namespace weft::runtime {

struct Batch {
  torch::Tensor input;
  torch::Tensor target;
};

struct DataOptions {
  std::string model;       // selects the dataset: mlp/cnn -> fashion-mnist, gpt-tiny -> text
  bool synthetic = false;  // random tensors of the same shapes, no files needed
  int rank = 0;
  int world = 1;
  int batch = 32;          // per worker
  std::uint64_t seed = 0;
};

class DataSource {
 public:
  virtual ~DataSource() = default;
  // The next training batch of this rank; wraps into the next epoch.
  virtual Batch next() = 0;
  // Batches per epoch for this rank.
  virtual std::int64_t batches_per_epoch() const = 0;
  // Batches next() has returned, counted across epochs; seek(position()) on a
  // fresh source of the same options makes it return the same batches from there
  // on (a resumed job, docs/checkpoints.md). seek THROWS UsageError if negative.
  virtual std::int64_t position() const = 0;
  virtual void seek(std::int64_t batches) = 0;
  // The whole evaluation split, in batches of `batch` (not sharded).
  virtual std::vector<Batch> eval_batches(int batch) = 0;
};

// THROWS UsageError saying which package to install (and the path looked at) when
// a dataset is missing, or naming the model if it has no dataset.
std::unique_ptr<DataSource> make_data(const DataOptions& options);

}  // namespace weft::runtime
