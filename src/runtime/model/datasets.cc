#include "runtime/model/datasets.h"

#include <zlib.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <memory>

#include <fmt/format.h>

#include "units/units.h"

namespace weft::runtime {
namespace {

constexpr std::uint32_t kIdxUnsignedByteImages = 0x00000803;  // ubyte, 3 dimensions
constexpr std::uint32_t kIdxUnsignedByteLabels = 0x00000801;  // ubyte, 1 dimension
constexpr int kClasses = 10;

std::string missing_fashion_mnist(const std::filesystem::path& file) {
  return fmt::format(
      "Fashion-MNIST not found at {}; install it with: apt-get install dataset-fashion-mnist "
      "(or use --synthetic)",
      file.string());
}

std::vector<std::uint8_t> gunzip(const std::filesystem::path& file) {
  if (!std::filesystem::exists(file)) throw UsageError(missing_fashion_mnist(file));
  const std::unique_ptr<gzFile_s, int (*)(gzFile)> gz(gzopen(file.c_str(), "rb"), gzclose);
  if (!gz) throw UsageError(fmt::format("{}: cannot open for reading", file.string()));
  std::vector<std::uint8_t> data;
  std::vector<std::uint8_t> chunk(1 << 20);
  for (;;) {
    const int n = gzread(gz.get(), chunk.data(), static_cast<unsigned>(chunk.size()));
    if (n < 0) {
      int code = 0;
      throw UsageError(fmt::format("{}: not a readable gzip file ({}); reinstall dataset-fashion-mnist",
                                   file.string(), gzerror(gz.get(), &code)));
    }
    if (n == 0) break;
    data.insert(data.end(), chunk.begin(), chunk.begin() + n);
  }
  return data;
}

std::uint32_t big_endian_u32(const std::vector<std::uint8_t>& data, std::size_t offset) {
  return (std::uint32_t{data[offset]} << 24) | (std::uint32_t{data[offset + 1]} << 16) |
         (std::uint32_t{data[offset + 2]} << 8) | std::uint32_t{data[offset + 3]};
}

// Checks the IDX header (magic, then one big-endian u32 per dimension) and the
// payload size; returns the dimensions.
std::vector<std::int64_t> idx_dimensions(const std::vector<std::uint8_t>& data, std::uint32_t magic,
                                         const std::filesystem::path& file) {
  const std::size_t rank = magic & 0xFF;
  const std::size_t header = 4 * (1 + rank);
  if (data.size() < header || big_endian_u32(data, 0) != magic) {
    throw UsageError(fmt::format("{}: not an IDX file of {}-dimensional unsigned bytes (magic 0x{:08x} "
                                 "expected); reinstall dataset-fashion-mnist",
                                 file.string(), rank, magic));
  }
  std::vector<std::int64_t> dims;
  std::int64_t payload = 1;
  for (std::size_t d = 0; d < rank; ++d) {
    dims.push_back(big_endian_u32(data, 4 * (1 + d)));
    payload *= dims.back();
  }
  if (static_cast<std::int64_t>(data.size() - header) != payload) {
    throw UsageError(fmt::format("{}: truncated or oversized: header promises {} bytes of data, file has {}",
                                 file.string(), payload, data.size() - header));
  }
  return dims;
}

}  // namespace

ImageSet read_fashion_mnist(const std::filesystem::path& dir, Split split) {
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  const std::filesystem::path images_file = dir / (prefix + "-images-idx3-ubyte.gz");
  const std::filesystem::path labels_file = dir / (prefix + "-labels-idx1-ubyte.gz");

  std::vector<std::uint8_t> images = gunzip(images_file);
  std::vector<std::uint8_t> labels = gunzip(labels_file);
  const std::vector<std::int64_t> image_dims = idx_dimensions(images, kIdxUnsignedByteImages, images_file);
  const std::vector<std::int64_t> label_dims = idx_dimensions(labels, kIdxUnsignedByteLabels, labels_file);
  if (image_dims[0] != label_dims[0]) {
    throw UsageError(fmt::format("{} holds {} images but {} holds {} labels; reinstall dataset-fashion-mnist",
                                 images_file.string(), image_dims[0], labels_file.string(), label_dims[0]));
  }
  const auto bad = std::find_if(labels.begin() + 8, labels.end(), [](std::uint8_t c) { return c >= kClasses; });
  if (bad != labels.end()) {
    throw UsageError(fmt::format("{}: label {} at index {} is not a class 0..{}", labels_file.string(),
                                 int{*bad}, bad - (labels.begin() + 8), kClasses - 1));
  }

  ImageSet set;
  set.count = image_dims[0];
  set.rows = static_cast<int>(image_dims[1]);
  set.cols = static_cast<int>(image_dims[2]);
  set.pixels.assign(images.begin() + 16, images.end());
  set.labels.assign(labels.begin() + 8, labels.end());
  return set;
}

std::string read_fortunes(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    if (entry.is_regular_file() && !entry.path().has_extension()) files.push_back(entry.path());
  }
  if (files.empty()) {
    throw UsageError(fmt::format(
        "fortunes corpus not found at {} (no plain-text fortune files there); install it with: "
        "apt-get install fortunes (or use --synthetic)",
        dir.string()));
  }
  std::sort(files.begin(), files.end());
  std::string text;
  for (const auto& file : files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw UsageError(fmt::format("{}: cannot open for reading", file.string()));
    text.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return text;
}

}  // namespace weft::runtime
