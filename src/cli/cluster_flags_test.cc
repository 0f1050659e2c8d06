#include "cli/cluster_flags.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "testing/testing.h"
#include "units/units.h"

namespace weft::cli {
namespace {

namespace fs = std::filesystem;

// A --network file in a folder of the test's own, removed after it.
class NetworkFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("weft_cluster_flags_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  Cluster load(const std::string& json) const {
    const fs::path file = dir_ / "net.json";
    std::ofstream(file) << json;
    return make_cluster({.workers = 4, .bandwidth = "1Gbit", .network_file = file.string()});
  }

  fs::path dir_;
};

// Note [One curve per algorithm]: `weft profile --network --out` writes each
// algorithm's time beside the time of the one used (`seconds`); the loader takes
// the ring's and the all-gather's, so a message just past the switch costs the
// ring's time there, where the one curve through `seconds` steps up from the
// all-gather's.
TEST_F(NetworkFile, EachAlgorithmsTimesMakeItsCurve) {
  const std::string points = R"([
      {"bytes": 16384, "seconds": 0.0030, "allreduce_s": 0.0050, "allgather_s": 0.0030},
      {"bytes": 65536, "seconds": 0.0032, "allreduce_s": 0.0048, "allgather_s": 0.0032},
      {"bytes": 262144, "seconds": 0.0065, "allreduce_s": 0.0065, "allgather_s": 0.0090},
      {"bytes": 1048576, "seconds": 0.0130, "allreduce_s": 0.0130, "allgather_s": 0.0300}])";
  const Cluster both = load(R"({"gather_below_bytes": 65536, "points": )" + points + "}");
  ASSERT_TRUE(both.fitted.has_value());
  EXPECT_EQ(both.fitted->gather_below, 65536);
  EXPECT_NEAR(allreduce_time(both, 16384), 0.0030, 1e-9);  // by all-gather
  EXPECT_NEAR(allreduce_time(both, 262144), 0.0065, 1e-9);  // by ring
  EXPECT_GT(allreduce_time(both, 74240), 0.0048);  // by ring, at least its 64 KiB time

  // The same sizes with the time of the algorithm used only: one curve, from
  // 3.2 ms at 64 KiB.
  const Cluster one = load(R"({"gather_below_bytes": 65536, "points": [
      {"bytes": 16384, "seconds": 0.0030}, {"bytes": 65536, "seconds": 0.0032},
      {"bytes": 262144, "seconds": 0.0065}, {"bytes": 1048576, "seconds": 0.0130}]})");
  EXPECT_LT(allreduce_time(one, 74240), 0.0040);
  EXPECT_GT(allreduce_time(both, 74240), allreduce_time(one, 74240) + 1e-3);
}

TEST_F(NetworkFile, BadFilesAreNamedWithWhatIsAccepted) {
  const auto message = [&](const std::string& json) { return test_support::usage_error_of([&] { load(json); }); };
  const std::string empty = message(R"({"points": []})");
  EXPECT_NE(empty.find("net.json"), std::string::npos) << empty;
  EXPECT_NE(empty.find("allreduce_s"), std::string::npos) << empty;
  const std::string descending = message(R"({"gather_below_bytes": 0, "points": [
      {"bytes": 4096, "allreduce_s": 0.002}, {"bytes": 1024, "allreduce_s": 0.003}]})");
  EXPECT_NE(descending.find("points[1].bytes = 1024"), std::string::npos) << descending;
  const std::string flat = message(R"({"a_s": 0.001, "b_s_per_byte": 0})");
  EXPECT_NE(flat.find("b_s_per_byte is 0, expected a number in (0, 1] s/byte"), std::string::npos) << flat;
  // Found by fuzz_network_fit: a b near the largest double made every time
  // infinite; a rate under a byte a second, or a startup over a day, is no network.
  const std::string huge = message(R"({"a_s": 0.0012, "b_s_per_byte": 1.7976931348623157e308})");
  EXPECT_NE(huge.find("b_s_per_byte is 1.7976931348623157e+308, expected a number in (0, 1]"), std::string::npos)
      << huge;
  const std::string late = message(R"({"a_s": 1e300, "b_s_per_byte": 1e-9})");
  EXPECT_NE(late.find("a_s is 1e+300, expected a duration in [0, 86400] s"), std::string::npos) << late;
  const Cluster slowest = load(R"({"a_s": 86400, "b_s_per_byte": 1})");
  EXPECT_TRUE(std::isfinite(allreduce_time(slowest, Bytes{1} << 50)));
  const std::string timeless = message(R"({"points": [{"bytes": 1024}]})");
  EXPECT_NE(timeless.find("missing field points[0].seconds"), std::string::npos) << timeless;
  const std::string negative = message(R"({"gather_below_bytes": -1, "a_s": 0, "b_s_per_byte": 1e-9})");
  EXPECT_NE(negative.find("gather_below_bytes is -1, expected a size >= 0"), std::string::npos) << negative;
  const std::string broken = message("{\"points\": [");
  EXPECT_NE(broken.find("not valid JSON"), std::string::npos) << broken;
  EXPECT_NE(broken.find("a_s and b_s_per_byte"), std::string::npos) << broken;
}

// A model weft trains is not in the zoo: the error says how to plan it.
TEST(LoadModel, AModelWeftTrainsIsPlannedFromItsMeasuredProfile) {
  const std::string cnn = test_support::usage_error_of([] { load_model({.model = "cnn"}); });
  EXPECT_NE(cnn.find("--model cnn: not a zoo model"), std::string::npos) << cnn;
  EXPECT_NE(cnn.find("gpt2"), std::string::npos) << cnn;
  EXPECT_NE(cnn.find("`weft profile --model cnn --out cnn.json`, then --profile cnn.json"), std::string::npos) << cnn;
  EXPECT_EQ(load_model({.model = "resnet18"}).model, "resnet18");
}

}  // namespace
}  // namespace weft::cli
