#include "netem/shaping.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>

namespace weft::netem {
namespace {

using namespace weft::literals;

// Note [Token bucket parameters], as properties over random rates and MTUs.
TEST(TokenBucket, HoldsTwoFramesAndOneMillisecondAndQueuesAThousandFramesOrFiftyMilliseconds) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> log_rate(3, 11);  // 1 kB/s .. 100 GB/s
  std::uniform_int_distribution<int> mtu_of(68, 9000);
  for (int i = 0; i < 1000; ++i) {
    const BytesPerSecond rate = std::pow(10.0, log_rate(rng));
    const int mtu = mtu_of(rng);
    const TokenBucket b = token_bucket_for(rate, mtu);
    EXPECT_EQ(b.rate, rate);
    EXPECT_GE(b.burst, 2 * (mtu + 14)) << rate;
    EXPECT_GE(b.burst, rate * 1e-3) << rate;
    // No larger than it must be: the burst inflates short transfers.
    EXPECT_LE(b.burst, std::max<double>(2 * (mtu + 14), rate * 1e-3 + 1)) << rate;
    EXPECT_GE(b.limit, 1000 * (mtu + 14)) << rate;
    EXPECT_GE(b.limit, rate * 50e-3) << rate;
    EXPECT_GT(b.limit, b.burst) << rate;  // tbf queues what the bucket cannot send
  }
}

// A sender's packets (GSO) must fit the bucket whole, or tbf cuts them into frames.
TEST(TokenBucket, PassesTheLargestPacketASenderBuildsWhole) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> log_rate(3, 11);
  std::uniform_int_distribution<int> mtu_of(53, 9000);
  for (int i = 0; i < 1000; ++i) {
    const BytesPerSecond rate = std::pow(10.0, log_rate(rng));
    const int mtu = mtu_of(rng);
    const TokenBucket b = token_bucket_for(rate, mtu);
    const Bytes payload = mtu - 52;  // IPv4, TCP and timestamps
    EXPECT_LE(b.gso_max, 65536) << rate << " " << mtu;  // Linux's default and largest
    if (b.burst < 4 * (mtu + 14)) {
      // A cap of fewer frames would turn GSO off: tbf cuts instead.
      EXPECT_EQ(b.gso_max, 65536) << rate << " " << mtu;
      continue;
    }
    const Bytes frames = (b.gso_max + payload - 1) / payload;
    EXPECT_LE(frames * (mtu + 14), b.burst) << rate << " " << mtu;
    // No smaller than it may be: one more frame would not fit, or 64 KiB is reached.
    if (b.gso_max + payload <= 65536) {
      EXPECT_GT((frames + 1) * (mtu + 14), b.burst) << rate << " " << mtu;
    }
  }
}

TEST(TokenBucket, TenMbitAtEthernetMtuIsTwoFramesBurst) {
  const TokenBucket b = token_bucket_for(10_Mbit, 1500);
  EXPECT_EQ(b.burst, 3028);
  EXPECT_EQ(b.limit, 1000 * 1514);
  EXPECT_EQ(b.gso_max, 65536);  // two frames: uncapped
}

TEST(TokenBucket, GsoPacketsOfEightFramesAtHundredMbitAndLinuxsDefaultAtOneGbit) {
  EXPECT_EQ(token_bucket_for(100_Mbit, 1500).gso_max, 8 * 1448);  // 12.5 kB of burst
  EXPECT_EQ(token_bucket_for(50_Mbit, 1500).gso_max, 4 * 1448);
  EXPECT_EQ(token_bucket_for(1_Gbit, 1500).gso_max, 65536);
  EXPECT_EQ(token_bucket_for(100_Mbit, 9000).gso_max, 65536);  // two jumbo frames
}

TEST(TokenBucket, RejectsNonPositiveInputsAndMtusWithoutRoomForPayload) {
  EXPECT_THROW(token_bucket_for(0, 1500), std::logic_error);
  EXPECT_THROW(token_bucket_for(-1, 1500), std::logic_error);
  EXPECT_THROW(token_bucket_for(1e6, 0), std::logic_error);
  EXPECT_THROW(token_bucket_for(1e6, 52), std::logic_error);
}

TEST(PayloadRate, IsTcpsPayloadPerEthernetFrame) {
  EXPECT_NEAR(payload_rate(10e6, 1500), 10e6 * 1448 / 1514, 1e-6);
  EXPECT_NEAR(payload_rate(10e6, 9000), 10e6 * 8948 / 9014, 1e-6);
  EXPECT_THROW(payload_rate(10e6, 52), std::logic_error);
}

TEST(TcRate, IsWholeBitsPerSecond) {
  EXPECT_EQ(tc_rate(10_Mbit), "10000000bit");
  EXPECT_EQ(tc_rate(1_Gbit), "1000000000bit");
  EXPECT_EQ(tc_rate(100_Gbit), "100000000000bit");
  EXPECT_EQ(tc_rate(0.01), "0bit");
}

TEST(ShapingCommands, OneTbfOnTheDevicesEgress) {
  const TokenBucket b = token_bucket_for(1_Gbit, 1500);
  const auto commands = shaping_commands("ns", "eth0", b);
  ASSERT_EQ(commands.size(), 1u);
  EXPECT_EQ(commands[0][0], "tc");
  EXPECT_NE(std::find(commands[0].begin(), commands[0].end(), "tbf"), commands[0].end());
  EXPECT_NE(std::find(commands[0].begin(), commands[0].end(), std::to_string(b.burst)), commands[0].end());
}

}  // namespace
}  // namespace weft::netem
