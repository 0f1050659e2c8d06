#include "sim/network.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

namespace weft {
namespace {

using namespace literals;

LinkSet make_links(std::vector<BytesPerSecond> capacity) {
  LinkSet links;
  for (size_t l = 0; l < capacity.size(); ++l) links.name.push_back("l" + std::to_string(l));
  links.capacity = std::move(capacity);
  return links;
}

// Runs the network until it is idle; returns each flow's finish time by id of start.
std::map<Network::FlowId, Seconds> run_to_end(Network& net) {
  std::map<Network::FlowId, Seconds> done;
  while (net.next_event() != Network::kNever) {
    const Seconds t = net.next_event();
    for (Network::FlowId id : net.advance(t)) done[id] = t;
  }
  return done;
}

TEST(Network, EqualAllReducesShareTheFabricFairly) {
  Cluster c;
  c.workers = 8;
  c.bandwidth = 1_Gbit;
  c.latency = 50_us;
  const Bytes n = 10_MiB;
  Network net(links_of(c));
  const Flow flow = allreduce_flow(c, n);
  net.start(flow, 0);
  net.start(flow, 0);
  EXPECT_EQ(net.next_event(), flow.startup);
  EXPECT_TRUE(net.advance(flow.startup).empty());
  const Seconds expected = flow.startup + 2.0 * n / net.links().capacity[0];
  EXPECT_DOUBLE_EQ(net.next_event(), expected);
  EXPECT_EQ(net.advance(net.next_event()).size(), 2u);
  EXPECT_EQ(net.flows_in_flight(), 0);
  EXPECT_EQ(net.next_event(), Network::kNever);
}

TEST(Network, ParameterServerIncastTakesPTimesAsLong) {
  for (int p : {1, 2, 5, 16}) {
    Cluster c;
    c.workers = p;
    c.bandwidth = 1_Gbit;
    c.latency = 1_ms;
    c.arch = Arch::kParameterServer;
    const Bytes n = 1_MiB;
    Network net(links_of(c));
    for (int w = 0; w < p; ++w) net.start(push_flow(c, w, 0, n), 0);
    const auto done = run_to_end(net);
    ASSERT_EQ(done.size(), static_cast<size_t>(p));
    for (const auto& [id, t] : done) EXPECT_NEAR(t, c.latency + p * n / c.bandwidth, 1e-12);
    EXPECT_EQ(net.peak_flows(2 * p + 1), p);  // server0.down
    EXPECT_EQ(net.peak_flows(0), 1);          // worker0.up
  }
}

TEST(Network, MaxMinGivesTheRestToTheUnconstrainedFlow) {
  // Flow a crosses links 0 (10 B/s) and 1 (4 B/s); flow b crosses link 0 only.
  Network net(make_links({10, 4}));
  const auto a = net.start(Flow{.startup = 0, .volume = 40, .links = {0, 1}}, 0);
  const auto b = net.start(Flow{.startup = 0, .volume = 60, .links = {0}}, 0);
  EXPECT_DOUBLE_EQ(net.rate(a), 4);
  EXPECT_DOUBLE_EQ(net.rate(b), 6);
  const auto done = run_to_end(net);
  EXPECT_DOUBLE_EQ(done.at(a), 10);
  EXPECT_DOUBLE_EQ(done.at(b), 10);
}

TEST(Network, LateFlowSlowsTheEarlyOne) {
  Network net(make_links({1}));
  const auto a = net.start(Flow{.startup = 0, .volume = 10, .links = {0}}, 0);
  EXPECT_TRUE(net.advance(4).empty());
  const auto b = net.start(Flow{.startup = 0, .volume = 10, .links = {0}}, 4);
  auto done = run_to_end(net);
  // At t=4, a has 6 left; sharing at 1/2 each it ends at 16, b then runs alone.
  EXPECT_DOUBLE_EQ(done.at(a), 16);
  EXPECT_DOUBLE_EQ(done.at(b), 20);
  EXPECT_DOUBLE_EQ(net.busy_time(0, net.time()), 20);
}

// Note [Flows alone]: flows on links no other crosses move at their narrowest
// link and leave each other be; one that shares a link refills them all.
TEST(Network, FlowsAloneLeaveEachOtherBe) {
  Network net(make_links({10, 4, 2}));
  const auto a = net.start(Flow{.startup = 0, .volume = 100, .links = {0}, .weight = 3}, 0);
  EXPECT_DOUBLE_EQ(net.rate(a), 10);
  EXPECT_TRUE(net.advance(1).empty());
  const auto b = net.start(Flow{.startup = 1, .volume = 20, .links = {1, 2}}, 1);
  EXPECT_TRUE(net.advance(2).empty());  // b's startup ends: alone on links 1 and 2
  EXPECT_DOUBLE_EQ(net.rate(a), 10);
  EXPECT_DOUBLE_EQ(net.rate(b), 2);
  EXPECT_TRUE(net.advance(4).empty());  // a has 60 left, b 16
  const auto c = net.start(Flow{.startup = 0, .volume = 8, .links = {0, 2}}, 4);
  EXPECT_DOUBLE_EQ(net.rate(b), 1);  // link 2 shared with c
  EXPECT_DOUBLE_EQ(net.rate(c), 1);
  EXPECT_DOUBLE_EQ(net.rate(a), 9);  // link 0's rest, whatever a's weight
  const auto done = run_to_end(net);
  EXPECT_DOUBLE_EQ(done.at(c), 12);
  EXPECT_DOUBLE_EQ(done.at(a), 4 + 60.0 / 9 * 1);  // ends before c: 60/9 s after 4
  EXPECT_DOUBLE_EQ(done.at(b), 12 + 8.0 / 2);
}

TEST(Network, StartupUsesNoBandwidth) {
  Network net(make_links({1}));
  net.start(Flow{.startup = 5, .volume = 2, .links = {0}}, 0);
  const auto b = net.start(Flow{.startup = 0, .volume = 3, .links = {0}}, 0);
  EXPECT_DOUBLE_EQ(net.rate(b), 1);  // alone until the other's startup ends
  const auto done = run_to_end(net);
  EXPECT_DOUBLE_EQ(done.at(b), 3);
  EXPECT_DOUBLE_EQ(net.busy_time(0, net.time()), 3 + 2);  // idle from 3 to 5
}

// A stretched flow advances 1/stretch as fast, in its startup and its transfer, and
// the share it leaves unused is not handed to the others.
TEST(Network, AStretchedFlowAdvancesSlowerFromThenOn) {
  Network net(make_links({1}));
  const auto a = net.start(Flow{.startup = 2, .volume = 10, .links = {0}}, 0, /*stretch=*/2);
  EXPECT_EQ(net.next_event(), 4);             // startup 2, twice as long
  net.set_stretch(a, 1, 3);                   // 1.5 of 2 s of startup done at 3
  EXPECT_EQ(net.next_event(), 3.5);
  EXPECT_TRUE(net.advance(3.5).empty());      // transferring at 1 byte/s
  net.set_stretch(a, 4, 6);                   // 7.5 bytes left, at 1/4 byte/s
  EXPECT_DOUBLE_EQ(net.next_event(), 36);
  const auto b = net.start(Flow{.startup = 0, .volume = 1, .links = {0}}, 6);
  auto done = run_to_end(net);
  // From 6: each gets 1/2 byte/s of the link; a moves 1/8 byte/s of it. b ends at 8
  // (a has 7.5 − 2/8 = 7.25 left), then a alone moves 1/4 byte/s: 8 + 29 = 37.
  EXPECT_DOUBLE_EQ(done.at(b), 8);
  EXPECT_DOUBLE_EQ(done.at(a), 37);
  EXPECT_THROW(net.start(Flow{.startup = 0, .volume = 1, .links = {0}}, 37, 0.5), std::logic_error);
  EXPECT_THROW(net.set_stretch(a, 2, 37), std::logic_error);  // no longer in flight
}

// The next event stays the earliest of all flows whichever flow a stretch moves:
// one that finishes later, the one that finishes first, past another, and back.
TEST(Network, TheNextEventFollowsEveryStretch) {
  Network net(make_links({1, 1}));
  const auto a = net.start(Flow{.startup = 0, .volume = 4, .links = {0}}, 0);
  const auto b = net.start(Flow{.startup = 0, .volume = 6, .links = {1}}, 0);
  EXPECT_EQ(net.next_event(), 4);
  net.set_stretch(b, 2, 1);  // 5 bytes left at 1/2 byte/s: 11; a still first
  EXPECT_EQ(net.next_event(), 4);
  net.set_stretch(a, 8, 2);  // 2 bytes left at 1/8 byte/s: 18; now b is first
  EXPECT_EQ(net.next_event(), 11);
  net.set_stretch(b, 1, 3);  // 4 bytes left at 1 byte/s: 7
  EXPECT_EQ(net.next_event(), 7);
  net.set_stretch(a, 1, 3);  // 1.875 bytes left at 1 byte/s: 4.875
  EXPECT_EQ(net.next_event(), 4.875);
  const auto done = run_to_end(net);
  EXPECT_EQ(done.at(a), 4.875);
  EXPECT_EQ(done.at(b), 7);
}

// A stretch may slow a flow's startup and its transfer by different factors.
TEST(Network, StartupAndTransferStretchApart) {
  Network net(make_links({1}));
  const auto a = net.start(Flow{.startup = 2, .volume = 10, .links = {0}}, 0, Stretch(3, 2));
  EXPECT_EQ(net.next_event(), 6);        // startup 2, three times as long
  net.set_stretch(a, Stretch(1, 2), 3);  // half of the startup done at 3: 1 s left
  EXPECT_EQ(net.next_event(), 4);
  EXPECT_TRUE(net.advance(4).empty());
  EXPECT_DOUBLE_EQ(net.next_event(), 24);  // 10 bytes at 1/2 byte/s
  EXPECT_THROW(net.set_stretch(a, Stretch(1, 0.5), 4), std::logic_error);
}

TEST(Network, EmptyFlowFinishesWhenItsStartupEnds) {
  Network net(make_links({1}));
  net.start(Flow{.startup = 0, .volume = 0, .links = {0}}, 0);
  EXPECT_EQ(net.next_event(), 0);
  EXPECT_EQ(net.advance(0).size(), 1u);
  net.start(Flow{.startup = 2, .volume = 0, .links = {0}}, 0);
  EXPECT_EQ(net.advance(2).size(), 1u);
  EXPECT_EQ(net.busy_time(0, net.time()), 0);
}

TEST(Network, IdsOfFinishedFlowsAreNotReusedWhileTheCallerWalksThem) {
  Network net(make_links({1}));
  const auto a = net.start(Flow{.startup = 0, .volume = 1, .links = {0}}, 0);
  const auto b = net.start(Flow{.startup = 0, .volume = 1, .links = {0}}, 0);
  const std::vector<Network::FlowId> done = net.advance(2);
  ASSERT_EQ(done.size(), 2u);
  const auto c = net.start(Flow{.startup = 0, .volume = 1, .links = {0}}, 2);
  EXPECT_NE(c, a);
  EXPECT_NE(c, b);
  net.advance(3);
  // Now they may be reused.
  const auto d = net.start(Flow{.startup = 0, .volume = 1, .links = {0}}, 3);
  EXPECT_TRUE(d == a || d == b || d == c);
}

TEST(Network, RejectsTimeTravel) {
  Network net(make_links({1}));
  net.start(Flow{.startup = 0, .volume = 10, .links = {0}}, 0);
  EXPECT_THROW(net.advance(11), std::logic_error);  // past the finish at 10
  net.advance(5);
  EXPECT_THROW(net.start(Flow{.startup = 0, .volume = 1, .links = {0}}, 4), std::logic_error);
  EXPECT_THROW(net.start(Flow{.startup = 0, .volume = 1, .links = {3}}, 5), std::logic_error);
}

// Weighted flows split a link in proportion to their weights; all-reduces under a
// measured fit are weighted by their size, so started together they end together.
TEST(Network, WeightsSplitALinkInProportion) {
  Network net(make_links({8}));
  const auto a = net.start(Flow{.startup = 0, .volume = 30, .links = {0}, .weight = 3}, 0);
  const auto b = net.start(Flow{.startup = 0, .volume = 10, .links = {0}, .weight = 1}, 0);
  EXPECT_DOUBLE_EQ(net.rate(a), 6);
  EXPECT_DOUBLE_EQ(net.rate(b), 2);
  const auto done = run_to_end(net);
  EXPECT_DOUBLE_EQ(done.at(a), 5);
  EXPECT_DOUBLE_EQ(done.at(b), 5);

  Cluster c;
  c.workers = 4;
  c.fitted = FittedAllReduce{.a = 1e-3, .b = 1e-8};
  Network fabric(links_of(c));
  const auto large = fabric.start(allreduce_flow(c, 300'000), 0);
  const auto small = fabric.start(allreduce_flow(c, 100'000), 0);
  const auto ends = run_to_end(fabric);
  EXPECT_NEAR(ends.at(large), 1e-3 + 400'000 * 1e-8, 1e-12);
  EXPECT_NEAR(ends.at(small), ends.at(large), 1e-12);
}

// Note [Transfers in one array]: on one link the weights' sum is kept as flows
// come and go while it is exact, and added up afresh otherwise; both give each
// flow its share, whether the weights are integers, fractions or too large to sum
// exactly.
TEST(Network, OneLinkSharesByWeightWhateverTheWeights) {
  for (const double scale : {1.0, 0.37, 1e15}) {
    Network net(make_links({8}));
    const auto a = net.start(Flow{.startup = 0, .volume = 30, .links = {0}, .weight = 3 * scale}, 0);
    const auto b = net.start(Flow{.startup = 0, .volume = 10, .links = {0}, .weight = scale}, 0);
    const auto c = net.start(Flow{.startup = 0, .volume = 40, .links = {0}, .weight = 4 * scale}, 0);
    EXPECT_DOUBLE_EQ(net.rate(a), 3) << scale;
    EXPECT_DOUBLE_EQ(net.rate(b), 1) << scale;
    EXPECT_DOUBLE_EQ(net.rate(c), 4) << scale;
    // All three end together: they shared the link in proportion throughout.
    const auto done = run_to_end(net);
    for (const auto id : {a, b, c}) EXPECT_DOUBLE_EQ(done.at(id), 10) << scale;
  }
}

// Note [One link, one clock]: the same flows, once with integral weights (the
// clock) and once with every weight times 1.5 (the same shares, but fractional:
// each flow's bytes banked), end at the same times to a relative 1e-12 — with
// stretches changed mid-flight and, in half the trials, now and then a flow on a
// second link, which stops the clock until the first link is alone again.
TEST(Network, TheClockEndsFlowsWhenBankingBytesWould) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    struct Event {
      Seconds at;
      Flow flow;       // started at `at` (volume < 0: a stretch instead)
      int target = 0;  // the stretch's flow, by order of start
      Stretch stretch;
    };
    std::vector<Event> events;
    const int n_flows = std::uniform_int_distribution(1, 40)(rng);
    for (int f = 0; f < n_flows; ++f) {
      Flow flow{.startup = std::uniform_int_distribution(0, 2)(rng) == 0 ? 0.5 : 0.0,
                .volume = std::uniform_real_distribution(0.0, 20.0)(rng),
                .links = {trial % 2 == 1 && f % 7 == 3 ? 1 : 0},
                .weight = static_cast<double>(std::uniform_int_distribution(1, 3)(rng))};
      events.push_back({std::uniform_real_distribution(0.0, 10.0)(rng), flow});
    }
    std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) { return a.at < b.at; });
    for (int k = 0; k < n_flows / 2; ++k) {
      const int target = std::uniform_int_distribution(0, n_flows - 1)(rng);
      const Seconds at = events[static_cast<size_t>(target)].at + std::uniform_real_distribution(0.0, 5.0)(rng);
      events.push_back({at, Flow{.volume = -1}, target,
                        Stretch(std::uniform_real_distribution(1.0, 3.0)(rng), std::uniform_real_distribution(1.0, 3.0)(rng))});
    }
    std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) { return a.at < b.at; });

    auto finishes = [&](double weight_scale) {
      Network net(make_links({10, 4}));
      std::vector<Network::FlowId> ids;            // by order of start
      std::map<Network::FlowId, int> live;         // id -> order of start
      std::vector<Seconds> done(static_cast<size_t>(n_flows), -1);
      size_t next = 0;
      while (next < events.size() || net.next_event() != Network::kNever) {
        if (next < events.size() && events[next].at <= net.next_event()) {
          const Event& e = events[next++];
          if (e.flow.volume >= 0) {
            Flow flow = e.flow;
            flow.weight *= weight_scale;
            ids.push_back(net.start(flow, e.at));
            live[ids.back()] = static_cast<int>(ids.size()) - 1;
          } else if (static_cast<size_t>(e.target) < ids.size() && net.in_flight(ids[static_cast<size_t>(e.target)]) &&
                     live.at(ids[static_cast<size_t>(e.target)]) == e.target) {
            net.set_stretch(ids[static_cast<size_t>(e.target)], e.stretch, e.at);
          }
          continue;
        }
        const Seconds t = net.next_event();
        for (Network::FlowId id : net.advance(t)) {
          done[static_cast<size_t>(live.at(id))] = t;
          live.erase(id);
        }
      }
      return done;
    };
    const std::vector<Seconds> clock = finishes(1);
    const std::vector<Seconds> banked = finishes(1.5);
    for (int f = 0; f < n_flows; ++f) {
      ASSERT_NEAR(clock[static_cast<size_t>(f)], banked[static_cast<size_t>(f)], 1e-12 * (1 + banked[static_cast<size_t>(f)]))
          << "trial " << trial << " flow " << f;
    }
  }
}

// Property, on random flows over random links: at every event the rates are
// feasible and weighted max-min fair (every flow crosses a saturated link on which
// no flow moves more per unit of its weight), and each flow's rate integrated over
// time equals its volume. Half the trials weigh every flow 1 (plain max-min).
TEST(Network, RandomFlowsAreMaxMinFairAndConserveBytes) {
  std::mt19937 rng(42);
  for (int trial = 0; trial < 200; ++trial) {
    const int n_links = std::uniform_int_distribution(1, 5)(rng);
    std::vector<BytesPerSecond> capacity;
    for (int l = 0; l < n_links; ++l) capacity.push_back(std::uniform_real_distribution(1.0, 10.0)(rng));
    Network net(make_links(capacity));

    struct Started {
      Flow flow;
      Seconds at;
    };
    std::vector<Started> plan;
    const int n_flows = std::uniform_int_distribution(1, 8)(rng);
    for (int f = 0; f < n_flows; ++f) {
      Flow flow;
      flow.startup = std::uniform_int_distribution(0, 1)(rng) ? std::uniform_real_distribution(0.0, 2.0)(rng) : 0.0;
      flow.volume = std::uniform_real_distribution(0.0, 20.0)(rng);
      for (int l = 0; l < n_links; ++l) {
        if (std::uniform_int_distribution(0, 1)(rng)) flow.links.push_back(l);
      }
      if (flow.links.empty()) flow.links.push_back(std::uniform_int_distribution(0, n_links - 1)(rng));
      if (trial % 2 == 1) flow.weight = std::uniform_real_distribution(0.25, 4.0)(rng);
      plan.push_back({flow, std::uniform_real_distribution(0.0, 5.0)(rng)});
    }
    std::sort(plan.begin(), plan.end(), [](const Started& a, const Started& b) { return a.at < b.at; });

    std::map<Network::FlowId, size_t> which;  // live id -> index into plan
    std::vector<double> moved(plan.size(), 0);
    std::vector<bool> finished(plan.size(), false);
    size_t next = 0;
    Seconds now = 0;
    while (next < plan.size() || net.flows_in_flight() > 0) {
      const Seconds t = next < plan.size() ? std::min(plan[next].at, net.next_event()) : net.next_event();
      for (const auto& [id, index] : which) moved[index] += net.rate(id) * (t - now);
      now = t;
      if (t == net.next_event()) {
        for (Network::FlowId id : net.advance(t)) {
          const size_t index = which.at(id);
          EXPECT_NEAR(moved[index], plan[index].flow.volume, 1e-9 * (1 + plan[index].flow.volume));
          finished[index] = true;
          which.erase(id);
        }
      } else {
        which[net.start(plan[next].flow, t)] = next;
        ++next;
      }
      // Fairness of the current allocation (flows in startup have rate 0).
      std::vector<double> load(capacity.size(), 0);
      std::vector<double> fastest(capacity.size(), 0);  // per unit of weight
      for (const auto& [id, index] : which) {
        for (int l : plan[index].flow.links) {
          load[l] += net.rate(id);
          fastest[l] = std::max(fastest[l], net.rate(id) / plan[index].flow.weight);
        }
      }
      for (int l = 0; l < n_links; ++l) ASSERT_LE(load[l], capacity[l] * (1 + 1e-9));
      for (const auto& [id, index] : which) {
        if (net.rate(id) == 0) continue;
        bool has_bottleneck = false;
        for (int l : plan[index].flow.links) {
          has_bottleneck |= load[l] >= capacity[l] * (1 - 1e-9) &&
                            net.rate(id) / plan[index].flow.weight >= fastest[l] * (1 - 1e-9);
        }
        ASSERT_TRUE(has_bottleneck) << "trial " << trial << " flow " << index;
      }
    }
    for (size_t i = 0; i < plan.size(); ++i) EXPECT_TRUE(finished[i]) << i;
  }
}

}  // namespace
}  // namespace weft
