// Emulated sites on the real kernel (Note [Emulated sites], delay_line.h): 2 sites
// of 2 ranks, fast links inside each, a slow long WAN between them. Measures TCP
// round trips inside a site and across the WAN, one bulk transfer across it, and
// two at once that must share it. Needs root (label `root`); skips itself otherwise.
#include "netem/endpoint_testing.h"
#include "netem/netem.h"
#include "testing/testing.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "netem/netns.h"
#include "netem/shaping.h"

namespace weft::netem {
namespace {

using testing::accept_one;
using testing::connect_to;
using testing::fork_in;
using testing::read_all;
using testing::wait_exit_code;
using testing::write_all;

using namespace weft::literals;
using Clock = std::chrono::steady_clock;

constexpr int kMessage = 64;     // bytes of a ping-pong message
constexpr int kRoundTrips = 15;  // timed, after one untimed
// A bulk transfer is timed by its receiver over a window of the steady clock
// (shared by every process here), once slow start and its losses are over.
constexpr double kWindowStart = 2.0;  // s after the transfers begin
constexpr double kWindowEnd = 5.0;

// The median round trip of a small message from endpoint `from` to `to`, seconds.
double round_trip(const Endpoint& from, const Endpoint& to, int port) {
  int report[2];
  if (::pipe(report) != 0) return 0;
  const pid_t echo = fork_in(to.netns, [&] {
    const int conn = accept_one(port);
    char message[kMessage];
    for (int i = 0; i <= kRoundTrips; ++i) {
      if (!read_all(conn, message, kMessage) || !write_all(conn, message, kMessage)) return 2;
    }
    return 0;
  });
  const pid_t client = fork_in(from.netns, [&] {
    const int sock = connect_to(to.address, port);
    if (sock < 0) return 1;
    char message[kMessage] = {};
    std::vector<double> times;
    for (int i = 0; i <= kRoundTrips; ++i) {
      const Clock::time_point start = Clock::now();
      if (!write_all(sock, message, kMessage) || !read_all(sock, message, kMessage)) return 2;
      if (i > 0) times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    }
    std::sort(times.begin(), times.end());
    const double median = times[times.size() / 2];
    return ::write(report[1], &median, sizeof median) == sizeof median ? 0 : 3;
  });
  ::close(report[1]);
  double median = 0;
  if (::read(report[0], &median, sizeof median) != sizeof median) median = 0;
  ::close(report[0]);
  EXPECT_EQ(wait_exit_code(client), 0) << "ping client";
  EXPECT_EQ(wait_exit_code(echo), 0) << "echo server";
  return median;
}

struct Transfer {
  const Endpoint* from;
  const Endpoint* to;
  int port;
};

// Runs the transfers at once, each sending until its receiver closes, and returns
// each one's payload rate over the window [kWindowStart, kWindowEnd], bytes/s.
std::vector<double> bulk_rates(const std::vector<Transfer>& transfers) {
  const Clock::time_point begin = Clock::now() + std::chrono::milliseconds(300);  // all connected by then
  const auto at = [&](double s) { return begin + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)); };
  std::vector<pid_t> children;
  std::vector<int> reports;
  for (const Transfer& t : transfers) {
    int report[2];
    if (::pipe(report) != 0) return {};
    children.push_back(fork_in(t.to->netns, [&] {
      const int conn = accept_one(t.port);
      if (conn < 0) return 1;
      std::vector<char> buffer(1 << 20);
      long long in_window = 0;
      while (Clock::now() < at(kWindowEnd)) {
        const ssize_t n = ::read(conn, buffer.data(), buffer.size());
        if (n <= 0) return 2;
        if (Clock::now() >= at(kWindowStart)) in_window += n;
      }
      ::close(conn);
      const double rate = static_cast<double>(in_window) / (kWindowEnd - kWindowStart);
      return ::write(report[1], &rate, sizeof rate) == sizeof rate ? 0 : 3;
    }));
    children.push_back(fork_in(t.from->netns, [&] {
      const int sock = connect_to(t.to->address, t.port);
      if (sock < 0) return 1;
      std::this_thread::sleep_until(begin);
      const std::vector<char> data(1 << 20, 'x');
      while (write_all(sock, data.data(), static_cast<long long>(data.size()))) {
      }
      return 0;  // the receiver closed: done
    }));
    ::close(report[1]);
    reports.push_back(report[0]);
  }
  std::vector<double> rates;
  for (const int fd : reports) {
    double rate = 0;
    if (::read(fd, &rate, sizeof rate) != sizeof rate) rate = 0;
    ::close(fd);
    rates.push_back(rate);
  }
  for (const pid_t child : children) EXPECT_EQ(wait_exit_code(child), 0);
  return rates;
}

// This process's CPU so far (the switch's thread, and the test's own waiting), s.
double cpu_seconds_of_this_process() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec + (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6;
}

int threads_of_this_process() {
  int n = 0;
  DIR* tasks = ::opendir("/proc/self/task");
  while (const dirent* entry = ::readdir(tasks)) n += entry->d_name[0] != '.';
  ::closedir(tasks);
  return n;
}

// The bar (issue 56): across the WAN a round trip within 10% of 2 x its
// latency, one transfer within 10% of what TCP delivers over its rate (payload_rate,
// shaping.h), two transfers from one site to the other sharing that rate (their sum
// within 10%); inside a site, a round trip far below the WAN's.
TEST(Sites, TwoSitesOfTwoRanksOverAWan) {
  SKIP_UNLESS_PRIVILEGED();
  constexpr BytesPerSecond kSiteRate = 1_Gbit;
  constexpr BytesPerSecond kWanRate = 20_Mbit;
  constexpr Seconds kWanLatency = 20_ms;
  const int threads_before = threads_of_this_process();
  {
    NetemOptions options{.workers = 4};
    options.sites = sites_shorthand("2x2", 4, kSiteRate, 0);
    options.wan = {.bandwidth = kWanRate, .latency = kWanLatency};
    EmulatedNetwork network(options);
    ASSERT_NE(network.delay_line(), nullptr);
    const std::vector<Endpoint>& e = network.endpoints();
    ASSERT_EQ(e[1].site, 0);
    ASSERT_EQ(e[2].site, 1);

    const double inside = round_trip(e[0], e[1], 5101);
    const double across = round_trip(e[0], e[2], 5102);
    const BytesPerSecond expected = payload_rate(kWanRate, 1500);
    const double cpu_before = cpu_seconds_of_this_process();
    const Clock::time_point bulk_start = Clock::now();
    const std::vector<double> one = bulk_rates({{&e[0], &e[2], 5103}});
    ASSERT_EQ(one.size(), 1u);
    const std::vector<double> two = bulk_rates({{&e[0], &e[2], 5104}, {&e[1], &e[3], 5105}});
    ASSERT_EQ(two.size(), 2u);
    const double cpu = cpu_seconds_of_this_process() - cpu_before;
    const double bulk_seconds = std::chrono::duration<double>(Clock::now() - bulk_start).count();
    const DelayLineCounters counters = network.delay_line()->counters();
    std::printf("inside a site: round trip %.3f ms; across: %.3f ms (asked %.3f); one transfer %.2f Mbit/s, two "
                "%.2f + %.2f = %.2f Mbit/s (expected %.2f); switch: %llu frames, %llu across the WAN, %llu dropped "
                "there, %llu otherwise; %.2f s CPU in %.1f s of transfers\n",
                inside * 1e3, across * 1e3, 2 * kWanLatency * 1e3, one[0] * 8e-6, two[0] * 8e-6, two[1] * 8e-6,
                (two[0] + two[1]) * 8e-6, expected * 8e-6, static_cast<unsigned long long>(counters.frames),
                static_cast<unsigned long long>(counters.wan_frames),
                static_cast<unsigned long long>(counters.wan_dropped),
                static_cast<unsigned long long>(counters.dropped), cpu, bulk_seconds);
    EXPECT_LT(inside, 0.05 * 2 * kWanLatency);
    EXPECT_NEAR(across, 2 * kWanLatency, 0.1 * 2 * kWanLatency);
    EXPECT_NEAR(one[0], expected, 0.1 * expected);
    EXPECT_NEAR(two[0] + two[1], expected, 0.1 * expected);
  }
  EXPECT_EQ(namespaces_of(::getpid()), std::vector<std::string>{}) << "namespaces were left behind";
  EXPECT_EQ(threads_of_this_process(), threads_before) << "the switch's thread was left behind";
}

// Per-pair links (Topology::links): each ordered pair of sites holds its frames
// its own latency, so a round trip between two sites is one way on each pair's
// link — within 10% of what was asked, as the bar (issue 56).
TEST(Sites, EachPairOfSitesHasItsOwnRoundTrip) {
  SKIP_UNLESS_PRIVILEGED();
  constexpr Seconds kWanLatency = 10_ms;  // every pair but those below
  const int threads_before = threads_of_this_process();
  {
    NetemOptions options{.workers = 3};
    options.sites = sites_shorthand("3x1", 3, 1_Gbit, 0);
    options.wan = {.bandwidth = 100_Mbit, .latency = kWanLatency};
    options.links = {{.from = 0, .to = 2, .link = {.bandwidth = 20_Mbit, .latency = 30_ms}},
                     {.from = 2, .to = 0, .link = {.bandwidth = 20_Mbit, .latency = 30_ms}},
                     {.from = 1, .to = 2, .link = {.bandwidth = 100_Mbit, .latency = 5_ms}}};
    EmulatedNetwork network(options);
    ASSERT_NE(network.delay_line(), nullptr);
    const std::vector<Endpoint>& e = network.endpoints();
    struct Pair {
      int from, to;
      Seconds expected;
    };
    // 0-1: the WAN both ways; 0-2: the pair's own both ways; 1-2: 5 ms there, the WAN's 10 back.
    for (const Pair& pair : {Pair{0, 1, 2 * kWanLatency}, Pair{0, 2, 2 * 30_ms}, Pair{1, 2, 5_ms + kWanLatency}}) {
      const double measured = round_trip(e[static_cast<std::size_t>(pair.from)],
                                         e[static_cast<std::size_t>(pair.to)], 5110 + pair.from * 3 + pair.to);
      std::printf("sites %d and %d: round trip %.3f ms (asked %.3f)\n", pair.from, pair.to, measured * 1e3,
                  pair.expected * 1e3);
      EXPECT_NEAR(measured, pair.expected, 0.1 * pair.expected) << "sites " << pair.from << " and " << pair.to;
    }
  }
  EXPECT_EQ(namespaces_of(::getpid()), std::vector<std::string>{}) << "namespaces were left behind";
  EXPECT_EQ(threads_of_this_process(), threads_before) << "the switch's thread was left behind";
}

}  // namespace
}  // namespace weft::netem
