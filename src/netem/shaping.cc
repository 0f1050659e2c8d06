#include "netem/shaping.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

namespace weft::netem {
namespace {

// Note [Token bucket parameters]; the constants live here and only here.
constexpr Bytes kEthernetHeader = 14;
constexpr Seconds kBurstTime = 1e-3;
constexpr Seconds kQueueTime = 50e-3;
constexpr Bytes kTransmitQueueFrames = 1000;  // Linux's default txqueuelen
constexpr int kIpTcpHeaders = 20 + 20 + 12;  // IPv4, TCP, TCP timestamps
constexpr Bytes kLinuxGsoMax = 65536;         // a device's default gso_max_size
constexpr Bytes kFewestFramesToCap = 4;       // a smaller cap turns GSO off

}  // namespace

TokenBucket token_bucket_for(BytesPerSecond rate, int mtu) {
  if (!(rate > 0) || !std::isfinite(rate) || mtu <= kIpTcpHeaders) {
    throw std::logic_error(fmt::format("token_bucket_for: rate {} B/s must be > 0 and mtu {} > {}",
                                       rate, mtu, kIpTcpHeaders));
  }
  const Bytes frame = mtu + kEthernetHeader;
  const auto bytes_in = [rate](Seconds t) { return static_cast<Bytes>(std::ceil(rate * t)); };
  TokenBucket bucket{.rate = rate};
  bucket.burst = std::max(2 * frame, bytes_in(kBurstTime));
  bucket.limit = std::max(bytes_in(kQueueTime), kTransmitQueueFrames * frame);
  const Bytes whole_frames = bucket.burst / frame;
  bucket.gso_max = whole_frames < kFewestFramesToCap
                       ? kLinuxGsoMax
                       : std::min(kLinuxGsoMax, whole_frames * (mtu - kIpTcpHeaders));
  return bucket;
}

BytesPerSecond payload_rate(BytesPerSecond rate, int mtu) {
  if (mtu <= kIpTcpHeaders) {
    throw std::logic_error(fmt::format("payload_rate: an MTU of {} bytes leaves no room for TCP's payload", mtu));
  }
  return rate * (mtu - kIpTcpHeaders) / (mtu + kEthernetHeader);
}

std::string tc_rate(BytesPerSecond rate) { return fmt::format("{}bit", std::llround(rate * 8)); }

std::vector<std::vector<std::string>> shaping_commands(const std::string& netns,
                                                       const std::string& device,
                                                       const TokenBucket& bucket) {
  std::vector<std::vector<std::string>> commands;
  commands.push_back({"tc", "-netns", netns, "qdisc", "add", "dev", device, "root", "handle",
                      "1:", "tbf", "rate", tc_rate(bucket.rate), "burst",
                      std::to_string(bucket.burst), "limit", std::to_string(bucket.limit)});
  return commands;
}

}  // namespace weft::netem
