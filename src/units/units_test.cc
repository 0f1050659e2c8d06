#include "units/units.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

namespace weft {
namespace {

using namespace literals;

TEST(Units, ParsesBandwidthAsPeopleWriteIt) {
  EXPECT_DOUBLE_EQ(parse_bandwidth("100Mbit"), 12.5e6);
  EXPECT_DOUBLE_EQ(parse_bandwidth("1Gbit"), 125e6);
  EXPECT_DOUBLE_EQ(parse_bandwidth("10MB/s"), 10e6);
  EXPECT_DOUBLE_EQ(parse_bandwidth("125000000"), 125e6);
  EXPECT_DOUBLE_EQ(parse_bandwidth("2.5Gbit"), 312.5e6);
  EXPECT_DOUBLE_EQ(parse_bandwidth("1MiB/s"), 1048576.0);
  EXPECT_DOUBLE_EQ(1_Gbit, 125e6);
}

TEST(Units, ParsesDurations) {
  EXPECT_DOUBLE_EQ(parse_duration("50us"), 50e-6);
  EXPECT_DOUBLE_EQ(parse_duration("2ms"), 2e-3);
  EXPECT_DOUBLE_EQ(parse_duration("1s"), 1.0);
  EXPECT_DOUBLE_EQ(parse_duration("0.25"), 0.25);
  EXPECT_DOUBLE_EQ(parse_duration("0"), 0.0);
  EXPECT_DOUBLE_EQ(parse_duration("1e-3"), 1e-3);
}

TEST(Units, ParsesSizes) {
  EXPECT_EQ(parse_bytes("4MiB"), 4_MiB);
  EXPECT_EQ(parse_bytes("25MB"), 25'000'000);
  EXPECT_EQ(parse_bytes("512"), 512);
}

class BadQuantity : public testing::TestWithParam<const char*> {};

TEST_P(BadQuantity, IsAUsageErrorThatListsTheAcceptedForms) {
  try {
    parse_bandwidth(GetParam());
    FAIL() << GetParam() << " was accepted";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(GetParam()), std::string::npos) << what;
    EXPECT_NE(what.find("1Gbit"), std::string::npos) << what;
  }
}
INSTANTIATE_TEST_SUITE_P(Units, BadQuantity,
                         testing::Values("", "fast", "0", "-1Gbit", "10Mbits", "1.2.3Gbit", "Gbit", "nan"));

TEST(Units, RejectsNegativeDurations) {
  EXPECT_THROW(parse_duration("-2ms"), UsageError);
  EXPECT_THROW(parse_duration("2 hours"), UsageError);
}

TEST(Units, FormatsRoundTrip) {
  EXPECT_EQ(format_bandwidth(1_Gbit), "1Gbit");
  EXPECT_EQ(format_bandwidth(100_Mbit), "100Mbit");
  EXPECT_EQ(format_duration(2e-3), "2ms");
  EXPECT_EQ(format_duration(50e-6), "50us");
  EXPECT_EQ(format_duration(1.5), "1.5s");
  EXPECT_EQ(format_bytes(4_MiB), "4MiB");
  EXPECT_EQ(format_bytes(100), "100B");
  for (const char* text : {"100Mbit", "1Gbit", "20Mbit", "10Gbit"}) {
    EXPECT_EQ(format_bandwidth(parse_bandwidth(text)), text);
  }
}

double sorted_median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

TEST(Median, EqualsTheMiddleOfTheSortedValues) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(-5, 5);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<double> v(1 + rng() % 12);
    for (double& x : v) x = rng() % 3 == 0 ? std::round(u(rng)) : u(rng);  // ties too
    EXPECT_DOUBLE_EQ(median(v), sorted_median(v));
  }
  EXPECT_THROW(median({}), std::logic_error);
}

}  // namespace
}  // namespace weft
