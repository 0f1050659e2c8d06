// Readers of the runtime's datasets from the Debian packages that ship them
// (docs/runtime.md §3). They return raw bytes, not tensors, so that parsing files needs no
// LibTorch; data.cc turns them into batches.
//
// Errors: a missing dataset is bad user input (UsageError naming the path and the
// package to install); a file that exists but is not what its name promises is
// also reported as UsageError naming the file and what was expected.
//
// Thread-safety: pure functions of the files they read.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace weft::runtime {

enum class Split { kTrain, kTest };

// gpt-tiny reads text as bytes: 256 symbols, samples of kTextContext inputs (and
// as many next-character targets). The model's positional table has this length.
inline constexpr int kByteVocabulary = 256;
inline constexpr int kTextContext = 64;

// Where Debian's `dataset-fashion-mnist` and `fortunes` install their files.
inline const std::filesystem::path kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
inline const std::filesystem::path kFortunesDir = "/usr/share/games/fortunes";

// Images and labels as stored: `pixels` is count × 28 × 28 bytes (0 = background),
// row-major; `labels` is count classes in 0..9.
struct ImageSet {
  std::int64_t count = 0;
  int rows = 0;
  int cols = 0;
  std::vector<std::uint8_t> pixels;
  std::vector<std::uint8_t> labels;
};

// Reads the gzipped IDX files of Fashion-MNIST (train: 60,000, test: 10,000).
// THROWS UsageError when `dir` lacks a file (naming it and `apt-get install
// dataset-fashion-mnist`), when a file is not gzip/IDX of the expected kind, when
// images and labels disagree in count, or a label is outside 0..9.
ImageSet read_fashion_mnist(const std::filesystem::path& dir, Split split);

// The plain-text fortune files of `dir` (every regular file without an extension,
// i.e. not the .dat indexes nor the .u8 copies), concatenated in name order, as
// bytes. The `%` lines between fortunes are kept: to a character model they are
// the end-of-fortune mark. THROWS UsageError when `dir` holds no such file (naming
// it and `apt-get install fortunes`).
std::string read_fortunes(const std::filesystem::path& dir);

}  // namespace weft::runtime
