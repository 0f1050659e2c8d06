#include "schedule/encoding.h"

#include <gtest/gtest.h>

#include "schedule/schedule.h"
#include "schedule/wire_cost.h"

namespace weft {
namespace {

TEST(Encoding, NamesRoundTrip) {
  for (const char* name : {"none", "fp16", "bf16", "int8", "powersgd:1", "powersgd:4", "acpsgd:1", "acpsgd:3"}) {
    EXPECT_EQ(to_string(parse_encoding(name, "--compression")), name);
  }
  EXPECT_EQ(parse_encoding("powersgd:2", "x").rank, 2);
  EXPECT_EQ(parse_encoding("acpsgd:2", "x").codec, Encoding::Codec::kAcpSgd);
}

TEST(Encoding, BadNamesListTheAcceptedOnes) {
  for (const char* bad : {"", "fp32", "powersgd", "powersgd:0", "powersgd:-1", "powersgd:2x", "FP16", "acpsgd", "acpsgd:0"}) {
    try {
      parse_encoding(bad, "--compression");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--compression"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("powersgd:R, acpsgd:R"), std::string::npos) << e.what();
    }
  }
}

TEST(Encoding, WireBytes) {
  EXPECT_EQ(elementwise_wire_bytes({}, 1000), 4000);
  EXPECT_EQ(elementwise_wire_bytes({.codec = Encoding::Codec::kFp16}, 1000), 2000);
  EXPECT_EQ(elementwise_wire_bytes({.codec = Encoding::Codec::kBf16}, 1000), 2000);
  EXPECT_EQ(elementwise_wire_bytes({.codec = Encoding::Codec::kInt8}, 1000), 1000 + 4 * 4);
  // 512 x 256 at rank 2: factors 4 * 768 * 2; a vector goes in fp16.
  EXPECT_EQ(powersgd_wire_bytes(512, 256, 2), 4 * 768 * 2);
  EXPECT_EQ(powersgd_wire_bytes(512, 1, 2), 1024);
  // Factors larger than the fp16 matrix: the matrix in fp16.
  EXPECT_EQ(powersgd_wire_bytes(4, 4, 4), 2 * 16);
}

// Note [Which tensors PowerSGD factorises]: a conv weight 64x32x3x3 is a 64 x 288
// matrix; a bias, a scalar and a matrix whose factors outweigh it are not.
TEST(Encoding, WhichTensorsAreFactorised) {
  const MatrixShape conv = matrix_shape(64 * 32 * 9, 4, 64);
  EXPECT_EQ(conv.rows, 64);
  EXPECT_EQ(conv.cols, 288);
  EXPECT_TRUE(factorised(conv, 2));
  EXPECT_FALSE(factorised(matrix_shape(64, 1, 64), 2));
  EXPECT_FALSE(factorised(matrix_shape(1, 0, 1), 2));
  EXPECT_FALSE(factorised(matrix_shape(16, 2, 4), 4));
}

// PowerSGD sums P, then Q (computed from P): two exchanges, each a collective's
// start-up; a message with no matrix to factor, and every other codec, is one.
TEST(Encoding, PowerSgdIsTwoExchangesWhereItFactorsAMatrix) {
  Profile profile{.model = "m", .batch = 1};
  profile.layers = {{.name = "fc", .params = 64 * 64 + 64, .shapes = {{64, 64}, {64}}},
                    {.name = "bias", .params = 64, .shapes = {{64}}}};
  const std::vector<Chunk> fc{{.layer = 0, .offset = 0, .length = (64 * 64 + 64) * 4}};
  const std::vector<Chunk> bias{{.layer = 1, .offset = 0, .length = 64 * 4}};
  const Encoding powersgd = parse_encoding("powersgd:2", "x");
  EXPECT_EQ(wire_cost(powersgd, fc, profile, Host{}).exchanges, 2);
  EXPECT_EQ(wire_cost(powersgd, bias, profile, Host{}).exchanges, 1);
  for (const char* one : {"none", "fp16", "bf16", "int8", "acpsgd:2"}) {
    EXPECT_EQ(wire_cost(parse_encoding(one, "x"), fc, profile, Host{}).exchanges, 1) << one;
  }
}

// acpsgd sends P or Q in turn (a 64 x 64 matrix at rank 2: 64·2 floats either
// way) and its vectors in float32, in one sum; PowerSGD both factors, vectors in fp16.
TEST(Encoding, AcpSgdSendsHalfTheFactorsAndTheRestInFloat32) {
  Profile profile{.model = "m", .batch = 1};
  profile.layers = {{.name = "fc", .params = 64 * 64 + 64, .shapes = {{64, 64}, {64}}}};
  const std::vector<Chunk> fc{{.layer = 0, .offset = 0, .length = (64 * 64 + 64) * 4}};
  EXPECT_EQ(wire_cost(parse_encoding("powersgd:2", "x"), fc, profile, Host{}).bytes, 4 * 128 * 2 + 2 * 64);
  EXPECT_EQ(wire_cost(parse_encoding("acpsgd:2", "x"), fc, profile, Host{}).bytes, 4 * 64 * 2 + 4 * 64);
  const Host host{.codec_cost = {{"acpsgd", 1e-9}, {"powersgd", 3e-9}}};
  EXPECT_DOUBLE_EQ(wire_cost(parse_encoding("acpsgd:2", "x"), fc, profile, host).compute, 1e-9 * 64 * 64 * 2);
}

// Parameter servers keep the element-wise encodings of a list, or none.
TEST(Encoding, ExchangesTakeTheElementWiseEncodingsOrNone) {
  const auto names = [](const std::vector<Encoding>& list) {
    std::string out;
    for (const Encoding& e : exchange_encodings(list)) out += to_string(e) + " ";
    return out;
  };
  EXPECT_EQ(names({parse_encoding("powersgd:2", "x"), parse_encoding("int8", "x"), parse_encoding("fp16", "x")}),
            "int8 fp16 ");
  EXPECT_EQ(names({parse_encoding("acpsgd:2", "x")}), "none ");
  EXPECT_NO_THROW(check_exchange_encoding(parse_encoding("bf16", "x"), "ps"));
  EXPECT_THROW(check_exchange_encoding(parse_encoding("acpsgd:1", "x"), "ps"), UsageError);
}

TEST(Encoding, UncompressedScheduleJsonHasNoEncodingField) {
  Schedule s{.strategy = "x", .iterations = {{CommOp{.chunks = {{0, 0, 4}}}}}};
  EXPECT_EQ(to_json(s).find("encoding"), std::string::npos);
  s.iterations[0][0].encoding = {.codec = Encoding::Codec::kPowerSgd, .rank = 3};
  const Schedule back = parse_schedule(to_json(s), "test");
  EXPECT_EQ(back.iterations[0][0].encoding, s.iterations[0][0].encoding);
}

}  // namespace
}  // namespace weft
