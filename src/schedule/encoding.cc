#include "schedule/encoding.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "units/ranges.h"

namespace weft {

std::string to_string(const Encoding& encoding) {
  switch (encoding.codec) {
    case Encoding::Codec::kNone: return "none";
    case Encoding::Codec::kFp16: return "fp16";
    case Encoding::Codec::kBf16: return "bf16";
    case Encoding::Codec::kInt8: return "int8";
    case Encoding::Codec::kPowerSgd: return fmt::format("powersgd:{}", encoding.rank);
    case Encoding::Codec::kAcpSgd: return fmt::format("acpsgd:{}", encoding.rank);
  }
  return "?";
}

std::vector<Encoding> candidate_encodings() {
  using C = Encoding::Codec;
  std::vector<Encoding> out{{}, {.codec = C::kFp16}, {.codec = C::kBf16}, {.codec = C::kInt8}};
  for (const C codec : {C::kPowerSgd, C::kAcpSgd}) {
    for (const int rank : {1, 2, 4}) out.push_back({.codec = codec, .rank = rank});
  }
  return out;
}

Encoding parse_encoding(std::string_view text, std::string_view what) {
  if (text == "none") return {};
  if (text == "fp16") return {.codec = Encoding::Codec::kFp16};
  if (text == "bf16") return {.codec = Encoding::Codec::kBf16};
  if (text == "int8") return {.codec = Encoding::Codec::kInt8};
  for (const auto& [prefix, codec] : {std::pair{std::string_view("powersgd:"), Encoding::Codec::kPowerSgd},
                                       std::pair{std::string_view("acpsgd:"), Encoding::Codec::kAcpSgd}}) {
    if (!text.starts_with(prefix)) continue;
    const std::string_view digits = text.substr(prefix.size());
    int rank = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), rank);
    if (error == std::errc() && end == digits.data() + digits.size() && rank >= 1) return {.codec = codec, .rank = rank};
  }
  throw UsageError(fmt::format("{}: not an encoding; accepted: {}", ranges::given(what, text), kEncodingsAccepted));
}

std::vector<Encoding> exchange_encodings(std::vector<Encoding> list) {
  std::erase_if(list, [](const Encoding& e) { return low_rank(e); });
  if (list.empty()) list = {Encoding{}};
  return list;
}

void check_exchange_encoding(const Encoding& encoding, std::string_view strategy) {
  if (!low_rank(encoding)) return;
  throw UsageError(fmt::format("{}: strategy {} exchanges with parameter servers point to point, where weft "
                               "compresses element-wise; accepted with {}: none, fp16, bf16, int8",
                               ranges::given("--compression", to_string(encoding)), strategy, strategy));
}

Bytes elementwise_wire_bytes(const Encoding& encoding, Bytes values) {
  switch (encoding.codec) {
    case Encoding::Codec::kNone: return 4 * values;
    case Encoding::Codec::kFp16:
    case Encoding::Codec::kBf16:
    case Encoding::Codec::kPowerSgd:
    case Encoding::Codec::kAcpSgd: return 2 * values;
    case Encoding::Codec::kInt8: return values + 4 * ((values + kInt8Block - 1) / kInt8Block);
  }
  return 4 * values;
}

Bytes powersgd_wire_bytes(Bytes rows, Bytes cols, int rank) {
  const Bytes r = std::min<Bytes>(rank, std::min(rows, cols));
  const Bytes factors = 4 * (rows + cols) * r;
  const Bytes fp16 = 2 * rows * cols;
  return cols > 1 && factors < fp16 ? factors : fp16;
}

MatrixShape matrix_shape(Bytes values, std::size_t dims, Bytes first_dim) {
  const Bytes rows = dims >= 2 ? first_dim : values;
  return {.rows = rows, .cols = rows > 0 ? values / rows : 0};
}

// Note [Which tensors PowerSGD factorises] in encoding.h.
bool factorised(const MatrixShape& m, int rank) {
  return m.cols > 1 && powersgd_wire_bytes(m.rows, m.cols, rank) < 2 * m.rows * m.cols;
}

}  // namespace weft
