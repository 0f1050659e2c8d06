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

// acpsgd sends P or Q in turn (a 64 x 64 matrix at rank 2: 64·2 values either
// way) and its vectors, in one fp16 sum; PowerSGD both factors in float32, vectors in fp16.
TEST(Encoding, AcpSgdSendsHalfTheFactorsAndTheRestInOneFp16Sum) {
  Profile profile{.model = "m", .batch = 1};
  profile.layers = {{.name = "fc", .params = 64 * 64 + 64, .shapes = {{64, 64}, {64}}}};
  const std::vector<Chunk> fc{{.layer = 0, .offset = 0, .length = (64 * 64 + 64) * 4}};
  EXPECT_EQ(wire_cost(parse_encoding("powersgd:2", "x"), fc, profile, Host{}).bytes, 4 * 128 * 2 + 2 * 64);
  EXPECT_EQ(wire_cost(parse_encoding("acpsgd:2", "x"), fc, profile, Host{}).bytes, 2 * 64 * 2 + 2 * 64);
  const Host host{.codec_cost = {{"acpsgd", 1e-9}, {"powersgd", 3e-9}, {"fp16", 5e-9}}};
  EXPECT_DOUBLE_EQ(wire_cost(parse_encoding("acpsgd:2", "x"), fc, profile, host).compute,
                   1e-9 * 64 * 64 * 2 + 5e-9 * 64);
}

// A message's wire cost is its chunks' payloads summed (what the planners price
// a merged message by): a chunk that cuts a tensor sends it whole, in any message.
TEST(WireCost, AMessageCostsItsChunksPayloadsSummed) {
  Profile profile{.model = "m", .batch = 1};
  profile.layers = {{.name = "fc1", .params = 64 * 64 + 64, .shapes = {{64, 64}, {64}}},
                    {.name = "norm", .params = 128, .shapes = {{64}, {64}}},
                    {.name = "fc2", .params = 300 * 20 + 300, .shapes = {{300, 20}, {300}}},
                    {.name = "plain", .params = 1000}};
  const std::vector<Chunk> chunks{{.layer = 2, .offset = 0, .length = 4 * 3000},  // cuts fc2's matrix
                                  {.layer = 2, .offset = 4 * 3000, .length = 4 * 3300},
                                  {.layer = 1, .offset = 0, .length = 4 * 128},
                                  {.layer = 0, .offset = 0, .length = 4 * (64 * 64 + 64)},
                                  {.layer = 3, .offset = 0, .length = 4 * 1000}};
  const Host host{.codec_cost = {{"fp16", 1e-9}, {"int8", 2e-9}, {"acpsgd", 3e-9}, {"powersgd", 4e-9}}};
  std::vector<Encoding> encodings = candidate_encodings();
  encodings.push_back({});
  for (const Encoding& encoding : encodings) {
    Payload sum;
    for (const Chunk& c : chunks) sum += payload(encoding, c, profile);
    const WireCost whole = wire_cost(encoding, chunks, profile, host), summed = wire_cost(encoding, sum, host);
    EXPECT_EQ(sum.bytes, 4 * (3000 + 3300 + 128 + 64 * 64 + 64 + 1000)) << to_string(encoding);
    EXPECT_EQ(summed.bytes, whole.bytes) << to_string(encoding);
    EXPECT_EQ(summed.exchanges, whole.exchanges) << to_string(encoding);
    EXPECT_DOUBLE_EQ(summed.compute, whole.compute) << to_string(encoding);
  }
  // Only fc1's matrix is factorised: fc2's is cut in two.
  EXPECT_EQ(wire_cost(parse_encoding("powersgd:2", "x"), chunks, profile, host).bytes,
            powersgd_wire_bytes(64, 64, 2) + 2 * (6300 + 128 + 64 + 1000));
}

// Note [A message's collectives]: `none` is the float32 all-reduce, unchanged; a
// PowerSGD message that factors a matrix pays one more start-up and core_wait,
// and every codec its compute, alone on the channel as in the simulator's flow.
TEST(WireCost, AMessagesCollectivesPayAStartUpEach) {
  Cluster cluster{.workers = 4, .bandwidth = 12.5e6, .latency = 1e-3};
  cluster.host.core_wait = 2e-3;
  const AllReduceTime time(cluster);
  const Flow plain = encoded_allreduce_flow(cluster, {.bytes = 4096});
  EXPECT_EQ(plain.startup, allreduce_flow(cluster, 4096).startup);
  EXPECT_EQ(plain.volume, allreduce_flow(cluster, 4096).volume);
  EXPECT_EQ(encoded_allreduce_time(time, cluster, {.bytes = 4096}), allreduce_time(cluster, 4096));
  const WireCost powersgd{.bytes = 4096, .compute = 1e-3, .exchanges = 2};
  const Seconds startup = allreduce_flow(cluster, 4096).startup;
  EXPECT_DOUBLE_EQ(encoded_allreduce_flow(cluster, powersgd).startup, 2 * startup + 1e-3 + 2e-3);
  EXPECT_DOUBLE_EQ(encoded_allreduce_time(time, cluster, powersgd),
                   allreduce_time(cluster, 4096) + startup + 2e-3 + 1e-3);
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
