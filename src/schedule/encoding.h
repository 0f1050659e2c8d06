// A message's wire encoding: how its float32 values travel (docs/compression.md).
//
// It is part of the Schedule (CommOp::encoding), so that every executor sees it as
// data: the runtime encodes and decodes with the codec it names
// (runtime/comm/codecs.h), the simulator costs the message by its wire bytes plus the
// encode and decode compute. `none` is the float32 values themselves.
//
// Thread-safety: plain data and pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "units/units.h"

namespace weft {

struct Encoding {
  enum class Codec {
    kNone,      // float32, summed by Gloo
    kFp16,      // float16, summed by Gloo
    kBf16,      // bfloat16 bit patterns on a ring of our own, summed in float32
    kInt8,      // int8 with a float32 scale per block, on a requantising ring; error feedback
    kPowerSgd,  // rank-`rank` factors of each matrix, fp16 for the rest; error feedback
    kAcpSgd,    // PowerSGD's P and Q factors in alternate messages, with the rest in one fp16 sum; error feedback
  };
  Codec codec = Codec::kNone;
  int rank = 0;  // low_rank codecs: the rank R of the factors, >= 1; 0 otherwise

  bool operator==(const Encoding&) const = default;
};

// What --compression accepts, for error messages and --help.
inline constexpr std::string_view kEncodingsAccepted =
    "none, fp16, bf16, int8, powersgd:R, acpsgd:R (R an integer >= 1)";

// What `weft plan --compression auto` compares: none, fp16, bf16, int8,
// powersgd and acpsgd at ranks 1, 2 and 4.
std::vector<Encoding> candidate_encodings();

// "none", "fp16", "bf16", "int8", "powersgd:2", "acpsgd:2".
std::string to_string(const Encoding& encoding);

// The encoding `text` names. THROWS UsageError naming `what` (e.g. "--compression"),
// the value and kEncodingsAccepted.
Encoding parse_encoding(std::string_view text, std::string_view what);

// Whether the averaged values differ from float32's (all but none): such a codec
// trades accuracy for bytes.
inline bool lossy(const Encoding& e) { return e.codec != Encoding::Codec::kNone; }

// Whether the codec sends low-rank factors of matrices (powersgd, acpsgd): such a
// message needs an all-reduce, so parameter servers' point-to-point exchanges
// cannot take it.
inline bool low_rank(const Encoding& e) {
  return e.codec == Encoding::Codec::kPowerSgd || e.codec == Encoding::Codec::kAcpSgd;
}

// The encodings of `list` that parameter servers' exchanges take (every one but
// the low-rank codecs), in order; {none} if it holds none of them.
std::vector<Encoding> exchange_encodings(std::vector<Encoding> list);

// THROWS UsageError naming `strategy` and what it accepts if its parameter-server
// exchanges cannot take `encoding` (a low-rank codec).
void check_exchange_encoding(const Encoding& encoding, std::string_view strategy);

// Values per int8 block: each block of the wire carries one float32 scale.
inline constexpr Bytes kInt8Block = 256;

// Bytes on the wire for `values` float32 values encoded element-wise (every codec
// but the low-rank ones, whose factors depend on the tensors' shapes: see
// powersgd_wire_bytes; for them, the bytes of the values they send whole).
Bytes elementwise_wire_bytes(const Encoding& encoding, Bytes values);

// PowerSGD's bytes for one tensor of `rows` x `cols` values (a 1-D tensor has
// cols = 1) at rank R: the P and Q factors, 4(rows + cols)R, where that is fewer
// than the matrix in fp16; the tensor in fp16 otherwise.
Bytes powersgd_wire_bytes(Bytes rows, Bytes cols, int rank);

// Note [Which tensors PowerSGD factorises]
// ----------------------------------------
// A low-rank codec factorises a tensor of a message when the tensor lies wholly
// inside one chunk and is a matrix worth factorising: rows = its first dimension,
// cols = the product of the others (> 1), and the factors fewer bytes than the
// matrix in fp16; every other value travels whole. The codec (runtime/comm/codecs.cc)
// and the wire cost (schedule/wire_cost.cc) both ask this function, so the
// simulator costs exactly what the runtime sends.
struct MatrixShape {
  Bytes rows = 0;
  Bytes cols = 0;
};
MatrixShape matrix_shape(Bytes values, std::size_t dims, Bytes first_dim);
bool factorised(const MatrixShape& m, int rank);

}  // namespace weft
