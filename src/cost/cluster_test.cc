#include "cost/cluster.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <string>
#include <vector>

namespace weft {
namespace {

using namespace literals;

Cluster ring(int workers, BytesPerSecond bandwidth, Seconds latency) {
  Cluster c;
  c.workers = workers;
  c.bandwidth = bandwidth;
  c.latency = latency;
  return c;
}

Cluster ps(int workers, int servers, BytesPerSecond server_bandwidth = 0) {
  Cluster c = ring(workers, 1_Gbit, 50_us);
  c.arch = Arch::kParameterServer;
  c.servers = servers;
  c.server_bandwidth = server_bandwidth;
  return c;
}

// Property: alone on the fabric, the flow takes the textbook ring time.
TEST(AllReduce, FlowAloneTakesTheRingTime) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int p = std::uniform_int_distribution(2, 128)(rng);
    const double b = std::uniform_real_distribution(1e6, 1e10)(rng);
    const double alpha = std::uniform_real_distribution(0.0, 1e-3)(rng);
    const Bytes n = std::uniform_int_distribution<Bytes>(0, 1_GiB)(rng);
    const Cluster c = ring(p, b, alpha);
    const double expected = 2.0 * (p - 1) * alpha + 2.0 * (p - 1) / p * n / b;

    const Flow flow = allreduce_flow(c, n);
    const LinkSet links = links_of(c);
    ASSERT_EQ(flow.links, std::vector<int>{0});
    ASSERT_EQ(links.capacity.size(), 1u);
    EXPECT_NEAR(flow.startup + flow.volume / links.capacity[0], expected, 1e-12 * (1 + expected));
    EXPECT_NEAR(allreduce_time(c, n), expected, 1e-12 * (1 + expected));
  }
}

TEST(AllReduce, FittedFormOverridesTheRing) {
  Cluster c = ring(8, 1_Gbit, 50_us);
  c.fitted = FittedAllReduce{.a = 2_ms, .b = 1e-9};
  const Flow flow = allreduce_flow(c, 1'000'000);
  EXPECT_DOUBLE_EQ(flow.startup, 2e-3);
  EXPECT_DOUBLE_EQ(links_of(c).capacity[0], 1e9);
  EXPECT_DOUBLE_EQ(allreduce_time(c, 1'000'000), 2e-3 + 1e-3);
}

// Note [Measured all-reduce curve], with the times `weft bench` measured on 4
// workers behind 100Mbit links (results/emulated/net-100Mbit.json).
std::vector<MeasuredAllReduce> measured_100mbit() {
  return {{4_KiB, 6.07e-3}, {16_KiB, 9.36e-3}, {64_KiB, 8.02e-3}, {256_KiB, 35.24e-3}, {1_MiB, 135.36e-3}};
}

TEST(MeasuredCurve, AMessageAloneTakesTheMeasuredTimeAtEveryMonotoneSize) {
  Cluster c = ring(4, 100_Mbit, 0);
  c.fitted = measured_curve(measured_100mbit(), "net.json");
  // b is the last segment's slope, the fabric's capacity 1/b.
  const double b = (135.36e-3 - 35.24e-3) / static_cast<double>(1_MiB - 256_KiB);
  EXPECT_DOUBLE_EQ(c.fitted->b, b);
  EXPECT_DOUBLE_EQ(links_of(c).capacity[0], 1 / b);
  EXPECT_NEAR(allreduce_time(c, 4_KiB), 6.07e-3, 1e-12);
  EXPECT_NEAR(allreduce_time(c, 256_KiB), 35.24e-3, 1e-12);
  EXPECT_NEAR(allreduce_time(c, 1_MiB), 135.36e-3, 1e-12);
  // 16 KiB and 64 KiB measured 9.36 and 8.02 ms: pooled into their mean.
  EXPECT_NEAR(allreduce_time(c, 16_KiB), (9.36e-3 + 8.02e-3) / 2, 1e-12);
  EXPECT_NEAR(allreduce_time(c, 64_KiB), (9.36e-3 + 8.02e-3) / 2, 1e-12);
  // Between two sizes, linear; beyond the largest, its start-up plus b·n; below the
  // smallest, the smallest's start-up.
  EXPECT_NEAR(allreduce_time(c, (256_KiB + 1_MiB) / 2), (35.24e-3 + 135.36e-3) / 2, 1e-12);
  EXPECT_NEAR(allreduce_time(c, 4_MiB), 135.36e-3 + b * static_cast<double>(3_MiB), 1e-12);
  EXPECT_NEAR(allreduce_time(c, 704), 6.07e-3 - b * static_cast<double>(4_KiB - 704), 1e-12);
  // The least-squares line said 30.1 ms at 256 KiB; the curve is what was measured.
}

TEST(MeasuredCurve, TimesNeverDecreaseWithSize) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<MeasuredAllReduce> points;
    Bytes n = 4_KiB;
    for (int k = 0; k < 2 + trial % 5; ++k, n *= 4) {
      points.push_back({n, std::uniform_real_distribution(1e-4, 1e-1)(rng)});
    }
    Cluster c = ring(4, 1_Gbit, 0);
    c.fitted = measured_curve(points, "net.json");
    Seconds previous = 0;
    for (Bytes size = 1_KiB; size <= 4 * n; size = size * 3 / 2) {
      const Seconds t = allreduce_time(c, size);
      EXPECT_GE(t, previous * (1 - 1e-12)) << size << " bytes";
      previous = t;
    }
  }
}

// Note [One curve per algorithm], with the times `weft bench` measured on 4 workers
// behind 1Gbit links (2026-12-03): the ring at every size, the all-gather up to
// 64 KiB, where it was faster.
TEST(MeasuredCurve, EachAlgorithmFollowsItsOwnCurve) {
  const std::vector<MeasuredAllReduce> by_ring = {
      {4_KiB, 5.24e-3}, {16_KiB, 5.11e-3}, {64_KiB, 4.76e-3}, {256_KiB, 6.55e-3}, {1_MiB, 13.06e-3}};
  const std::vector<MeasuredAllReduce> gathered = {{4_KiB, 2.50e-3}, {16_KiB, 3.48e-3}, {64_KiB, 3.21e-3}};
  Cluster c = ring(4, 1_Gbit, 0);
  c.fitted = measured_curves(by_ring, gathered, 64_KiB, "net.json");
  // The ring's curve starts where it sums: at 64 KiB.
  const Cluster ring_only = [&] {
    Cluster r = c;
    r.fitted = measured_curve({by_ring.begin() + 2, by_ring.end()}, "net.json");
    return r;
  }();
  EXPECT_DOUBLE_EQ(c.fitted->b, ring_only.fitted->b);  // the ring's large messages set the rate
  EXPECT_EQ(c.fitted->gather_below, 64_KiB);
  // Up to 64 KiB, the all-gather's times (16 and 64 KiB pooled into their mean).
  EXPECT_NEAR(allreduce_time(c, 4_KiB), 2.50e-3, 1e-12);
  EXPECT_NEAR(allreduce_time(c, 64_KiB), (3.48e-3 + 3.21e-3) / 2, 1e-12);
  // Beyond it, the ring's, also just past the switch: a 72.5 KiB message costs
  // what the ring takes there, not a step up from the all-gather's 64 KiB.
  for (const Bytes n : {Bytes{64_KiB + 1}, Bytes{74'240}, Bytes{231'000}, Bytes{1_MiB}}) {
    EXPECT_NEAR(allreduce_time(c, n), allreduce_time(ring_only, n), 1e-12) << n << " bytes";
  }
  EXPECT_GT(allreduce_time(c, 74'240), allreduce_time(c, 64_KiB) + 1e-3);
  // Its slower small sizes are not pooled into 256 KiB's time.
  EXPECT_NEAR(allreduce_time(c, 256_KiB), 6.55e-3, 1e-12);
}

TEST(MeasuredCurve, BadPointsAreNamed) {
  const auto message = [](std::vector<MeasuredAllReduce> points) {
    try {
      measured_curve(std::move(points), "net.json");
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({{4_KiB, 1e-3}}).find("at least two"), std::string::npos);
  EXPECT_NE(message({{4_KiB, 1e-3}, {4_KiB, 2e-3}}).find("points[1].bytes"), std::string::npos);
  EXPECT_NE(message({{4_KiB, 1e-3}, {16_KiB, -1}}).find("points[1].seconds"), std::string::npos);
  EXPECT_NE(message({{0, 1e-3}, {16_KiB, 1e-3}}).find("net.json"), std::string::npos);
}

// AllReduceTime works out once what allreduce_time() works out per call: the
// planners' searches rely on it giving the very same doubles.
TEST(AllReduce, PrecomputedTimeIsBitIdentical) {
  std::vector<Cluster> clusters = {ring(1, 1_Gbit, 50_us), ring(16, 1_Gbit, 50_us), ring(7, 3e8, 13_us)};
  clusters.push_back(ring(8, 1_Gbit, 50_us));
  clusters.back().fitted = FittedAllReduce{.a = 2_ms, .b = 1e-9};
  clusters.push_back(ring(4, 1_Gbit, 0));
  clusters.back().fitted = measured_curves({{4_KiB, 5.24e-3}, {64_KiB, 4.76e-3}, {1_MiB, 13.06e-3}},
                                           {{4_KiB, 2.50e-3}, {64_KiB, 3.21e-3}}, 64_KiB, "net.json");
  std::mt19937_64 rng(44);
  for (const Cluster& c : clusters) {
    const AllReduceTime time(c);
    for (int i = 0; i < 2000; ++i) {
      const Bytes n = i < 3 ? i : static_cast<Bytes>(rng() % (Bytes{1} << (i % 40)));
      ASSERT_EQ(time(n), allreduce_time(c, n)) << "P=" << c.workers << " n=" << n;
    }
  }
  EXPECT_THROW(AllReduceTime(ring(4, 1_Gbit, 0))(-1), std::logic_error);
  const Cluster servers = ps(4, 1);
  const AllReduceTime on_servers(servers);  // built, then refused when asked
  EXPECT_THROW(on_servers(1), std::logic_error);
}

TEST(AllReduce, OneWorkerIsFree) {
  const Cluster c = ring(1, 1_Gbit, 50_us);
  EXPECT_EQ(allreduce_time(c, 100_MiB), 0.0);
  EXPECT_EQ(allreduce_flow(c, 100_MiB).volume, 0.0);
}

std::string message_of(const Cluster& c);

// Note [Collectives across sites]: each reach against its closed form, written
// out by hand for the topologies the issue measures.
Cluster with_sites(int workers, std::string_view shape, BytesPerSecond inside, Seconds latency,
                   BytesPerSecond wan, Seconds wan_latency) {
  Cluster c = ring(workers, inside, latency);
  c.topology.sites = sites_shorthand(shape, workers, inside, latency);
  c.topology.wan = {.bandwidth = wan, .latency = wan_latency};
  validate(c);
  return c;
}

// The flow alone: its startup, then its volume at its slowest link's capacity.
Seconds alone(const Cluster& c, const Flow& flow) {
  const LinkSet links = links_of(c);
  BytesPerSecond rate = std::numeric_limits<double>::infinity();
  for (int l : flow.links) rate = std::min(rate, links.capacity[static_cast<std::size_t>(l)]);
  return flow.startup + flow.volume / rate;
}

TEST(Sites, TwoSitesOfTwoMatchTheClosedForms) {
  const BytesPerSecond B = 1_Gbit, W = 20_Mbit;
  const Seconds a = 0.05_ms, aw = 20_ms;
  const Cluster c = with_sites(4, "2x2", B, a, W, aw);
  for (const Bytes n : {Bytes{0}, Bytes{1}, 4_KiB, 1_MiB, 100_MiB}) {
    SCOPED_TRACE(n);
    const double x = static_cast<double>(n);
    // A step costs a round trip: twice the one-way latency.
    // One ring 0-1-2-3: two WAN hops (one per ordered pair), each at W.
    const Seconds all = 6 * (2 * aw) + 2.0 * 3 / 4 * x / W;
    // Each site's ring of two: one step each way.
    const Seconds site = 2 * (2 * a) + x / B;
    // The site's ring, its leader's broadcast to the one other (a step + n/B),
    // the two leaders swapping their sums over the WAN (one step, n bytes).
    const Seconds by_sites = (2 * (2 * a) + x / B) + (2 * a + x / B) + (2 * aw + x / W);
    for (const auto& [reach, expected] :
         {std::pair{Reach::kAll, all}, std::pair{Reach::kSite, site}, std::pair{Reach::kBySites, by_sites}}) {
      SCOPED_TRACE(to_string(reach));
      EXPECT_NEAR(allreduce_time(c, n, reach), expected, 1e-12 * (1 + expected));
      EXPECT_NEAR(alone(c, allreduce_flow(c, n, reach)), expected, 1e-12 * (1 + expected));
      EXPECT_NEAR(AllReduceTime(c, reach)(n), expected, 1e-12 * (1 + expected));
    }
  }
  // The links: the whole ring, each site's ring, the leaders' WAN ring.
  const LinkSet links = links_of(c);
  EXPECT_EQ(links.name, (std::vector<std::string>{"allreduce", "site0", "site1", "wan"}));
  EXPECT_EQ(allreduce_flow(c, 1_MiB, Reach::kAll).links, std::vector<int>{0});
  EXPECT_EQ(allreduce_flow(c, 1_MiB, Reach::kSite).links, (std::vector<int>{1, 2}));
  EXPECT_EQ(allreduce_flow(c, 1_MiB, Reach::kBySites).links, std::vector<int>{3});
  // Here by sites is the faster average of all workers for every size: the WAN
  // is crossed by one ring of two rather than of four.
  EXPECT_LT(allreduce_time(c, 1_MiB, Reach::kBySites), allreduce_time(c, 1_MiB, Reach::kAll));
}

TEST(Sites, OneWorkerPerSiteIsTheFlatRingOverTheWan) {
  const BytesPerSecond W = 20_Mbit;
  const Seconds aw = 40_ms;
  const Cluster c = with_sites(4, "4x1", W, aw, W, aw);
  const Cluster flat = ring(4, W, 2 * aw);  // a uniform ring's α is per step already
  for (const Bytes n : {Bytes{0}, 4_KiB, 10_MiB}) {
    const double x = static_cast<double>(n);
    const Seconds expected = 6 * (2 * aw) + 1.5 * x / W;
    EXPECT_NEAR(allreduce_time(c, n, Reach::kAll), expected, 1e-12 * (1 + expected));
    EXPECT_NEAR(allreduce_time(c, n, Reach::kBySites), expected, 1e-12 * (1 + expected));
    EXPECT_NEAR(allreduce_time(flat, n), expected, 1e-12 * (1 + expected));
    EXPECT_EQ(allreduce_time(c, n, Reach::kSite), 0.0);  // a site of one averages nothing
    EXPECT_EQ(alone(c, allreduce_flow(c, n, Reach::kSite)), 0.0);
    EXPECT_NEAR(alone(c, allreduce_flow(c, n, Reach::kBySites)), expected, 1e-12 * (1 + expected));
  }
  // One site: by sites is the site's ring and broadcast, with no WAN stage.
  const Cluster one = with_sites(4, "1x4", 1_Gbit, 0.05_ms, W, aw);
  const double x = static_cast<double>(1_MiB);
  const Seconds site = 6 * (2 * 0.05_ms) + 1.5 * x / 1_Gbit + 2 * 0.05_ms + 3 * x / 1_Gbit;
  EXPECT_NEAR(allreduce_time(one, 1_MiB, Reach::kBySites), site, 1e-12);
  EXPECT_NEAR(alone(one, allreduce_flow(one, 1_MiB, Reach::kBySites)), site, 1e-12);
}

TEST(Sites, UnevenSitesAreSetByTheirSlowestPart) {
  const BytesPerSecond B0 = 1_Gbit, B1 = 100_Mbit, W = 200_Mbit;
  const Seconds a0 = 0.05_ms, a1 = 1_ms, aw = 20_ms;
  Cluster c = ring(4, B0, a0);
  c.topology.sites = {{.ranks = {0, 1, 2}, .bandwidth = B0, .latency = a0},
                      {.ranks = {3}, .bandwidth = B1, .latency = a1}};
  c.topology.wan = {.bandwidth = W, .latency = aw};
  validate(c);
  const Bytes n = 8_MiB;
  const double x = static_cast<double>(n);
  // One ring of four: the WAN hops, capped by site 1's slower link.
  EXPECT_NEAR(allreduce_time(c, n, Reach::kAll), 6 * (2 * aw) + 1.5 * x / B1, 1e-9);
  // Site 0's ring of three (four steps of n/3); site 1 alone averages nothing.
  EXPECT_NEAR(allreduce_time(c, n, Reach::kSite), 4 * (2 * a0) + 4.0 / 3 * x / B0, 1e-12);
  // Site 0's ring and its broadcast to two, then the two leaders' swap at B1.
  EXPECT_NEAR(allreduce_time(c, n, Reach::kBySites),
              (4 * (2 * a0) + 4.0 / 3 * x / B0) + (2 * a0 + 2 * x / B0) + (2 * aw + x / B1), 1e-9);
  // Alone, each flow takes the same time.
  for (const Reach reach : {Reach::kAll, Reach::kSite, Reach::kBySites}) {
    EXPECT_NEAR(alone(c, allreduce_flow(c, n, reach)), allreduce_time(c, n, reach), 1e-12) << to_string(reach);
  }
}

TEST(Sites, ARingThatCrossesTheWanMoreOftenSharesIt) {
  // Ranks alternate between the sites: every hop of the ring crosses the WAN, each
  // ordered pair of sites twice, so each hop gets half the pair's link.
  const BytesPerSecond B = 1_Gbit, W = 20_Mbit;
  Cluster c = ring(4, B, 0.05_ms);
  c.topology.sites = {{.ranks = {0, 2}, .bandwidth = B, .latency = 0.05_ms},
                      {.ranks = {1, 3}, .bandwidth = B, .latency = 0.05_ms}};
  c.topology.wan = {.bandwidth = W, .latency = 20_ms};
  validate(c);
  const double x = static_cast<double>(1_MiB);
  EXPECT_NEAR(allreduce_time(c, 1_MiB, Reach::kAll), 6 * (2 * 20_ms) + 1.5 * x / (W / 2), 1e-9);
  // By sites does not depend on where the ranks sit.
  const Cluster in_order = with_sites(4, "2x2", B, 0.05_ms, W, 20_ms);
  EXPECT_DOUBLE_EQ(allreduce_time(c, 1_MiB, Reach::kBySites), allreduce_time(in_order, 1_MiB, Reach::kBySites));
}

// Per-pair links (Topology::links): a hop from site a to b moves its bytes on
// a→b's link, and its step costs the round trip a→b then b→a.
TEST(Sites, EachHopCrossesItsOwnPairsLink) {
  const BytesPerSecond B = 1_Gbit, W = 20_Mbit, slow = 10_Mbit;
  const Seconds a = 0.05_ms, aw = 20_ms, short_way = 10_ms;
  Cluster c = with_sites(4, "2x2", B, a, W, aw);
  // Site 0 to 1: slower but shorter; 1 to 0 is the WAN's.
  c.topology.links = {{.from = 0, .to = 1, .link = {.bandwidth = slow, .latency = short_way}}};
  validate(c);
  const Bytes n = 1_MiB;
  const double x = static_cast<double>(n);
  // Every step's round trip goes 0→1 and back 1→0.
  const Seconds rtt = short_way + aw;
  // The ring 0-1-2-3 crosses 0→1 (hop 1-2) and 1→0 (hop 3-0): the slower, 0→1, sets the pace.
  const Seconds all = 6 * rtt + 1.5 * x / slow;
  // The two leaders swap both ways at once: the slower direction decides.
  const Seconds by_sites = (2 * (2 * a) + x / B) + (2 * a + x / B) + (rtt + x / slow);
  const Seconds site = 2 * (2 * a) + x / B;  // inside the sites, nothing changed
  for (const auto& [reach, expected] :
       {std::pair{Reach::kAll, all}, std::pair{Reach::kSite, site}, std::pair{Reach::kBySites, by_sites}}) {
    SCOPED_TRACE(to_string(reach));
    EXPECT_NEAR(allreduce_time(c, n, reach), expected, 1e-12 * (1 + expected));
    EXPECT_NEAR(alone(c, allreduce_flow(c, n, reach)), expected, 1e-12 * (1 + expected));
    EXPECT_NEAR(AllReduceTime(c, reach)(n), expected, 1e-12 * (1 + expected));
  }
  // Which way is the slow one does not matter to either ring of two sites.
  Cluster reversed = c;
  reversed.topology.links[0] = {.from = 1, .to = 0, .link = {.bandwidth = slow, .latency = short_way}};
  for (const Reach reach : {Reach::kAll, Reach::kBySites}) {
    EXPECT_DOUBLE_EQ(allreduce_time(reversed, n, reach), allreduce_time(c, n, reach)) << to_string(reach);
  }
  // Links that repeat the WAN's figures change nothing.
  Cluster alike = with_sites(4, "2x2", B, a, W, aw);
  const Cluster uniform = alike;
  alike.topology.links = {{.from = 0, .to = 1, .link = alike.topology.wan},
                          {.from = 1, .to = 0, .link = alike.topology.wan}};
  for (const Reach reach : {Reach::kAll, Reach::kSite, Reach::kBySites}) {
    EXPECT_DOUBLE_EQ(allreduce_time(alike, n, reach), allreduce_time(uniform, n, reach)) << to_string(reach);
  }
}

TEST(Sites, ALeadersRingIsSetByTheSlowestPairItUses) {
  // Three sites of one worker: the ring (of all, or of the leaders) sends 0→1,
  // 1→2 and 2→0; 1→0 carries only the go-ahead back for hop 0→1.
  const BytesPerSecond W = 20_Mbit;
  const Seconds aw = 20_ms;
  Cluster c = with_sites(3, "3x1", 1_Gbit, 0, W, aw);
  c.topology.links = {{.from = 1, .to = 0, .link = {.bandwidth = 1_Mbit, .latency = 100_ms}},
                      {.from = 2, .to = 0, .link = {.bandwidth = 5_Mbit, .latency = aw}}};
  validate(c);
  const Bytes n = 1_MiB;
  const double x = static_cast<double>(n);
  // Hop 0→1's round trip is 20 + 100 ms, the longest; hop 2→0's rate, 5 Mbit, the
  // slowest (1→0's 1 Mbit carries none of the ring's bytes). Four steps of n/3.
  const Seconds expected = 4 * (aw + 100_ms) + 4.0 / 3 * x / 5_Mbit;
  EXPECT_NEAR(allreduce_time(c, n, Reach::kAll), expected, 1e-12 * (1 + expected));
  EXPECT_NEAR(allreduce_time(c, n, Reach::kBySites), expected, 1e-12 * (1 + expected));
  EXPECT_NEAR(alone(c, allreduce_flow(c, n, Reach::kBySites)), expected, 1e-12 * (1 + expected));
  EXPECT_NEAR(alone(c, allreduce_flow(c, n, Reach::kAll)), expected, 1e-12 * (1 + expected));
}

TEST(Sites, WithoutSitesNothingChanged) {
  const Cluster c = ring(4, 1_Gbit, 0.05_ms);
  EXPECT_EQ(links_of(c).name, std::vector<std::string>{"allreduce"});
  const Bytes n = 1_MiB;
  EXPECT_DOUBLE_EQ(allreduce_time(c, n), 6 * 0.05_ms + 1.5 * static_cast<double>(n) / 1_Gbit);
  EXPECT_DOUBLE_EQ(allreduce_time(c, n, Reach::kAll), allreduce_time(c, n));
  // Another reach needs sites: a bug in the caller, not bad input.
  EXPECT_THROW(allreduce_time(c, n, Reach::kSite), std::logic_error);
  EXPECT_THROW(allreduce_flow(c, n, Reach::kBySites), std::logic_error);
  // Sites are for all-reduce clusters without a fit.
  Cluster servers = ps(4, 1);
  servers.topology.sites = sites_shorthand("2x2", 4, 1_Gbit, 0);
  servers.topology.wan.bandwidth = 20_Mbit;
  EXPECT_NE(message_of(servers).find("--topology"), std::string::npos);
}

TEST(ParameterServer, LinksAreNumberedPerTheHeader) {
  const Cluster c = ps(3, 2, 10_Gbit);
  const LinkSet links = links_of(c);
  ASSERT_EQ(links.capacity.size(), 2u * 3 + 2u * 2);
  EXPECT_EQ(links.name[2 * 1], "worker1.up");
  EXPECT_EQ(links.name[2 * 1 + 1], "worker1.down");
  EXPECT_EQ(links.name[2 * 3 + 2 * 1], "server1.up");
  EXPECT_EQ(links.name[2 * 3 + 2 * 1 + 1], "server1.down");
  EXPECT_EQ(links.capacity[0], 1_Gbit);
  EXPECT_EQ(links.capacity[2 * 3], 10_Gbit);
}

TEST(ParameterServer, PushAndPullCrossBothEnds) {
  const Cluster c = ps(4, 2);
  const Flow push = push_flow(c, 2, 1, 1000);
  EXPECT_EQ(push.links, (std::vector<int>{4, 2 * 4 + 2 + 1}));
  EXPECT_EQ(push.startup, c.latency);
  EXPECT_EQ(push.volume, 1000.0);
  const Flow pull = pull_flow(c, 1, 2, 1000);
  EXPECT_EQ(pull.links, (std::vector<int>{2 * 4 + 2, 5}));
}

TEST(ParameterServer, ServerBandwidthZeroMeansWorkers) {
  const Cluster c = ps(2, 1, 0);
  EXPECT_EQ(links_of(c).capacity.back(), c.bandwidth);
}

TEST(ParameterServer, FlowsOnTheWrongArchAreBugs) {
  EXPECT_THROW(push_flow(ring(2, 1_Gbit, 0), 0, 0, 10), std::logic_error);
  EXPECT_THROW(allreduce_flow(ps(2, 1), 10), std::logic_error);
  EXPECT_THROW(pull_flow(ps(2, 1), 1, 0, 10), std::logic_error);  // no server 1
}

std::string message_of(const Cluster& c) {
  try {
    validate(c);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(Validate, NamesTheFlagAndValue) {
  EXPECT_EQ(message_of(ring(4, 1_Gbit, 0)), "");
  EXPECT_NE(message_of(ring(0, 1_Gbit, 0)).find("--workers: 0"), std::string::npos);
  EXPECT_NE(message_of(ring(4, 0, 0)).find("--bandwidth"), std::string::npos);
  EXPECT_NE(message_of(ring(4, -5, 0)).find("at least 1 byte/s"), std::string::npos);
  // A rate near zero made a petabyte's time overflow: a byte a second at least.
  EXPECT_NE(message_of(ring(4, 1e-300, 0)).find("--bandwidth: 1e-300"), std::string::npos);
  EXPECT_EQ(message_of(ring(4, 1, 0)), "");
  EXPECT_NE(message_of(ring(4, 1_Gbit, -1e-3)).find("--latency"), std::string::npos);
  EXPECT_NE(message_of(ring(4, std::nan(""), 0)).find("--bandwidth"), std::string::npos);
  EXPECT_NE(message_of(ps(4, 0)).find("--servers: 0"), std::string::npos);
  EXPECT_NE(message_of(ps(4, 1, -1)).find("--server-bandwidth"), std::string::npos);
  Cluster fitted = ring(4, 1_Gbit, 0);
  fitted.fitted = FittedAllReduce{.a = 0, .b = 0};
  EXPECT_NE(message_of(fitted).find("--fit-b"), std::string::npos);
  fitted.fitted->b = 1.7976931348623157e308;
  EXPECT_NE(message_of(fitted).find("--fit-b"), std::string::npos);
}

TEST(Arch, ParsesAndPrints) {
  EXPECT_EQ(parse_arch("ps"), Arch::kParameterServer);
  EXPECT_EQ(to_string(parse_arch("allreduce")), "allreduce");
  EXPECT_THROW(parse_arch("ring"), UsageError);
}

}  // namespace
}  // namespace weft
