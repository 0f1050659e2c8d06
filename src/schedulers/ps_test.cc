// Tests of the parameter-server strategies ps and ps-interleaved (schedulers/ps.cc)
// and of their planning pieces (ps.h), checked against docs/strategies.md §4.4 and, through the
// simulator, against the congestion they are meant to relieve.

#include "schedulers/ps.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "profile/zoo.h"
#include "schedulers/strategies.h"
#include "sim/simulator.h"

namespace weft {
namespace {

using namespace literals;

// A random small profile; about one layer in six has no parameters when
// `parameterless` is set.
Profile random_profile(std::mt19937& rng, bool parameterless) {
  std::uniform_int_distribution<int> layers(1, 14);
  std::uniform_int_distribution<std::int64_t> params(1, 200'000);
  std::uniform_real_distribution<double> ms(0.05, 5.0);
  std::bernoulli_distribution empty(parameterless ? 1.0 / 6 : 0.0);
  Profile p;
  p.model = "random";
  const int n = layers(rng);
  for (int l = 0; l < n; ++l) {
    const Seconds fp = ms(rng) * 1e-3;
    p.layers.push_back({.name = "l" + std::to_string(l), .params = empty(rng) ? 0 : params(rng),
                        .bytes_per_param = 4, .fp = fp, .bp = 2 * fp});
  }
  if (p.total_bytes() == 0) p.layers.back().params = 1000;
  return p;
}

Cluster ps_cluster(int workers, BytesPerSecond bandwidth, int servers = 1) {
  return {.workers = workers, .bandwidth = bandwidth, .latency = 50_us,
          .arch = Arch::kParameterServer, .servers = servers};
}

// The 9-group example of seed 000 (Fig. Inter-iteration, Algorithm 1): nine layers
// of equal size, so each is a group of its own (group idx = layer 8 − idx), with
// backward times bp(l) = l + 1 ms. From the start of the backward pass,
// τ_g = 0, 9, 17, 24, 30, 35, 39, 42, 44 ms and end_comp = 45 ms.
Profile nine_groups() {
  Profile p;
  p.model = "seed000-example";
  for (int l = 0; l < 9; ++l) {
    p.layers.push_back({.name = "g" + std::to_string(8 - l), .params = 1000, .bytes_per_param = 4,
                        .fp = (l + 1) * 0.5e-3, .bp = (l + 1) * 1e-3});
  }
  return p;
}

// ---- fusion and sharding ----

TEST(PsFuseLayers, GroupsAreContiguousInBackwardOrderAndCoverEveryByteOnce) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const Profile p = random_profile(rng, true);
    const int target = std::uniform_int_distribution<int>(1, 20)(rng);
    const LayerGroups groups = ps::fuse_layers(p, target);
    ASSERT_FALSE(groups.empty());
    EXPECT_LE(static_cast<int>(groups.size()), target);
    // Concatenated, the groups are exactly the layers with bytes in backward order,
    // so group 0 holds the output-side layer.
    std::vector<int> flat;
    for (const auto& g : groups) {
      ASSERT_FALSE(g.empty());
      flat.insert(flat.end(), g.begin(), g.end());
    }
    EXPECT_EQ(flat, layers_with_bytes(p));
    // Every group but the last reaches the threshold (and so do not split early).
    const std::vector<Bytes> bytes = ps::group_bytes(p, groups);
    const Bytes threshold = (p.total_bytes() + target - 1) / target;
    for (size_t i = 0; i + 1 < bytes.size(); ++i) EXPECT_GE(bytes[i], threshold) << "group " << i;
  }
  EXPECT_THROW(ps::fuse_layers(nine_groups(), 0), std::logic_error);
}

TEST(PsFuseLayers, ZooModelsGiveSeveralGroupsToInterleave) {
  for (const char* model : {"resnet50", "gpt2"}) {
    const LayerGroups groups = ps::fuse_layers(zoo_profile(model));
    EXPECT_GE(groups.size(), 9u) << model;
    EXPECT_LE(groups.size(), static_cast<size_t>(ps::kTargetGroups)) << model;
  }
}

TEST(PsAssignServers, BalancesBytesWithinTheLargestGroup) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const int servers = std::uniform_int_distribution<int>(1, 5)(rng);
    std::vector<Bytes> bytes(std::uniform_int_distribution<size_t>(0, 20)(rng));
    for (Bytes& b : bytes) b = std::uniform_int_distribution<Bytes>(1, 1'000'000)(rng);
    const std::vector<int> server = ps::assign_servers(bytes, servers);
    ASSERT_EQ(server.size(), bytes.size());
    std::vector<Bytes> load(static_cast<size_t>(servers), 0);
    for (size_t i = 0; i < bytes.size(); ++i) {
      ASSERT_GE(server[i], 0);
      ASSERT_LT(server[i], servers);
      load[static_cast<size_t>(server[i])] += bytes[i];
    }
    if (bytes.empty()) continue;
    const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
    EXPECT_LE(*hi - *lo, *std::max_element(bytes.begin(), bytes.end()));
    EXPECT_EQ(ps::assign_servers(bytes, servers), server);  // deterministic
  }
  EXPECT_EQ(ps::assign_servers({5, 9, 1}, 1), (std::vector<int>{0, 0, 0}));
  EXPECT_THROW(ps::assign_servers({1}, 0), std::logic_error);
}

// ---- inter-iteration interleaving ----

// docs/strategies.md §4.4: group idx communicates in global iteration t iff idx mod T == t mod T,
// t counted from 0. The seed's example lists iteration 1 → {2,5,8}, 2 → {1,4,7},
// 3 → {0,3,6}, which contradicts its own rule "group i synchronises in iterations
// i % T + kT" (group 2 in iterations 2, 5, ...). docs/strategies.md follows the rule; the seed's
// intra-iteration example ("at iteration 2, group 1 ...") is our t = 1, the second
// iteration, where group 1 indeed communicates.
TEST(PsInterleaving, NineGroupsPeriodThreeFollowsSpecRule) {
  EXPECT_EQ(ps::groups_in_iteration(9, 0, 3), (std::vector<int>{0, 3, 6}));
  EXPECT_EQ(ps::groups_in_iteration(9, 1, 3), (std::vector<int>{1, 4, 7}));
  EXPECT_EQ(ps::groups_in_iteration(9, 2, 3), (std::vector<int>{2, 5, 8}));
  EXPECT_EQ(ps::groups_in_iteration(9, 3, 3), (std::vector<int>{0, 3, 6}));
  EXPECT_EQ(ps::groups_in_iteration(9, 7, 1).size(), 9u);
  EXPECT_EQ(ps::groups_in_iteration(2, 4, 5), (std::vector<int>{}));  // T > N: a local step
  EXPECT_THROW(ps::communicates(0, 0, 0), std::logic_error);

  // The schedule puts the same groups in the same iterations of its period.
  const Profile p = nine_groups();
  StrategyOptions options;
  options.T = 3;
  const Schedule s = make_ps_interleaved(p, ps_cluster(4, 1_Gbit), options);
  ASSERT_EQ(s.period, 3);
  for (int t = 0; t < 3; ++t) {
    std::vector<int> groups;
    for (const CommOp& op : s.ops(t)) {
      ASSERT_EQ(op.chunks.size(), 1u);
      groups.push_back(8 - op.chunks[0].layer);
    }
    EXPECT_EQ(groups, ps::groups_in_iteration(9, t, 3)) << "t = " << t;
  }
}

TEST(PsInterleaving, EveryGroupOncePerPeriodInItsIteration) {
  std::mt19937 rng(13);
  for (int trial = 0; trial < 200; ++trial) {
    const Profile p = random_profile(rng, true);
    const int workers = std::uniform_int_distribution<int>(1, 6)(rng);
    const int servers = std::uniform_int_distribution<int>(1, 3)(rng);
    StrategyOptions options;
    options.T = std::uniform_int_distribution<int>(1, 6)(rng);
    const Cluster cluster = ps_cluster(workers, 1_Gbit, servers);
    const Schedule s = make_ps_interleaved(p, cluster, options);
    ASSERT_NO_THROW(validate(s, p, workers));
    ASSERT_EQ(s.period, options.T);
    const LayerGroups groups = ps::fuse_layers(p);
    std::map<int, int> seen;  // group (by its first layer) -> iteration of the period
    for (int t = 0; t < s.period; ++t) {
      for (const CommOp& op : s.ops(t)) {
        const auto g = std::find_if(groups.begin(), groups.end(),
                                    [&](const auto& group) { return group.front() == op.chunks.front().layer; });
        ASSERT_NE(g, groups.end());
        const int idx = static_cast<int>(g - groups.begin());
        EXPECT_TRUE(seen.emplace(idx, t).second) << "group " << idx << " twice in a period";
        EXPECT_EQ(idx % options.T, t);
        EXPECT_EQ(op.chunks.size(), g->size());
        EXPECT_LT(op.server, servers);
      }
    }
    EXPECT_EQ(seen.size(), groups.size());
  }
}

// ---- intra-iteration slots (Algorithm 1) ----

TEST(PsSlots, SeedExampleNineGroupsPeriodThree) {
  const Profile p = nine_groups();
  const LayerGroups groups = ps::fuse_layers(p);
  ASSERT_EQ(groups.size(), 9u);
  const int P = 2;
  const ps::Slots s = ps::allocate_slots(p, groups, 3, P);
  const std::vector<double> tau_ms = {0, 9, 17, 24, 30, 35, 39, 42, 44};
  for (size_t idx = 0; idx < 9; ++idx) EXPECT_NEAR(s.group_start[idx], tau_ms[idx] * 1e-3, 1e-12);
  EXPECT_NEAR(s.end_comp, 45e-3, 1e-12);

  // "At iteration 2, the slot for group 1 equals the difference between the start
  // times of group 5 and group 2" (divided among the P workers).
  EXPECT_NEAR(s.slot[1], (s.group_start[5] - s.group_start[2]) / P, 1e-12);
  EXPECT_NEAR(s.slot[1], 9e-3, 1e-12);
  // idx + 1 + T == N: the window ends with the backward.
  EXPECT_NEAR(s.next[5], s.end_comp, 1e-12);
  EXPECT_NEAR(s.slot[5], (45e-3 - 39e-3) / P, 1e-12);
  // Beyond: the window runs half its backward part into the next forward.
  EXPECT_NEAR(s.next[6], 45e-3 + 0.5 * (45e-3 - 42e-3), 1e-12);
  EXPECT_NEAR(s.next[7], 45e-3 + 0.5 * (45e-3 - 44e-3), 1e-12);
  // The last group starts at end_comp and gets no slot (Note [Release offsets
  // from Algorithm 1]).
  EXPECT_NEAR(s.cur[8], s.end_comp, 1e-12);
  EXPECT_EQ(s.slot[8], 0.0);
}

TEST(PsSlots, WindowsOfOneIterationFollowEachOtherWithoutOverlap) {
  std::mt19937 rng(17);
  for (int trial = 0; trial < 300; ++trial) {
    const Profile p = random_profile(rng, true);
    const int T = std::uniform_int_distribution<int>(1, 6)(rng);
    const int P = std::uniform_int_distribution<int>(1, 8)(rng);
    const LayerGroups groups = ps::fuse_layers(p, std::uniform_int_distribution<int>(1, 16)(rng));
    const ps::Slots s = ps::allocate_slots(p, groups, T, P);
    const int n = static_cast<int>(groups.size());
    for (int idx = 0; idx < n; ++idx) {
      const auto i = static_cast<size_t>(idx);
      EXPECT_GE(s.slot[i], 0) << idx;
      EXPECT_NEAR(s.slot[i] * P, s.next[i] - s.cur[i], 1e-12);
      // The next group of the same iteration starts where this window ends.
      if (idx + T < n) {
        EXPECT_EQ(s.next[i], s.cur[i + static_cast<size_t>(T)]) << idx;
      }
      // Windows never start before the group's data exists.
      const Seconds ready = backward_end_times(p)[static_cast<size_t>(groups[i].back())];
      EXPECT_GE(s.cur[i], ready - 1e-12) << idx;
    }
  }
  EXPECT_THROW(ps::allocate_slots(nine_groups(), ps::fuse_layers(nine_groups()), 0, 2), std::logic_error);
}

// Worker p leaves at cur + p·s (docs/strategies.md §4.4), whatever lies between the groups.
TEST(PsSlots, WorkerPReleasesAtCurPlusPSlots) {
  std::mt19937 rng(19);
  for (int trial = 0; trial < 300; ++trial) {
    const Profile p = random_profile(rng, true);
    const int T = std::uniform_int_distribution<int>(1, 5)(rng);
    const int P = std::uniform_int_distribution<int>(1, 8)(rng);
    StrategyOptions options;
    options.T = T;
    const Schedule schedule = make_ps_interleaved(p, ps_cluster(P, 1_Gbit), options);
    const LayerGroups groups = ps::fuse_layers(p);
    const ps::Slots s = ps::allocate_slots(p, groups, T, P);
    const std::vector<Seconds> bp_end = backward_end_times(p);
    for (int t = 0; t < T; ++t) {
      const std::vector<int> in_t = ps::groups_in_iteration(static_cast<int>(groups.size()), t, T);
      ASSERT_EQ(schedule.ops(t).size(), in_t.size());
      for (size_t k = 0; k < in_t.size(); ++k) {
        const CommOp& op = schedule.ops(t)[k];
        const auto idx = static_cast<size_t>(in_t[k]);
        ASSERT_EQ(op.release_offset.size(), static_cast<size_t>(P));
        for (int w = 0; w < P; ++w) {
          EXPECT_NEAR(bp_end[static_cast<size_t>(op.ready_after)] + op.release(w), s.cur[idx] + w * s.slot[idx], 1e-12);
        }
        // Without parameterless layers in between, ready is cur: worker 0 waits 0.
        if (groups[idx].back() == 0 || p.layers[static_cast<size_t>(groups[idx].back()) - 1].bytes() > 0) {
          EXPECT_NEAR(op.release(0), 0.0, 1e-12);
        }
      }
    }
  }
}

// ---- the schedules ----

TEST(PsSchedule, PlainPsPushesEveryGroupEveryIteration) {
  std::mt19937 rng(23);
  for (int trial = 0; trial < 200; ++trial) {
    const Profile p = random_profile(rng, true);
    const int P = std::uniform_int_distribution<int>(1, 6)(rng);
    const int S = std::uniform_int_distribution<int>(1, 3)(rng);
    const Schedule s = make_ps(p, ps_cluster(P, 1_Gbit, S), {});
    ASSERT_NO_THROW(validate(s, p, P));
    EXPECT_EQ(s.strategy, "ps");
    ASSERT_EQ(s.period, 1);
    const LayerGroups groups = ps::fuse_layers(p);
    const std::vector<int> server = ps::assign_servers(ps::group_bytes(p, groups), S);
    ASSERT_EQ(s.ops(0).size(), groups.size());
    for (size_t idx = 0; idx < groups.size(); ++idx) {
      const CommOp& op = s.ops(0)[idx];
      EXPECT_EQ(op.kind, OpKind::kParameterServer);
      EXPECT_EQ(op.ready_after, groups[idx].back());
      EXPECT_EQ(op.needed_by, groups[idx].back());
      EXPECT_EQ(op.priority, static_cast<int>(idx));
      EXPECT_EQ(op.server, server[idx]);
      EXPECT_TRUE(op.release_offset.empty());  // no staggering
    }
    // Note [What the server does]: {0, 0} means averaged gradients and SGD.
    EXPECT_EQ(s.easgd.alpha, 0.0);
    EXPECT_EQ(s.easgd.beta, 0.0);
    EXPECT_EQ(nlohmann::json::parse(s.options_json).at("groups"), groups.size());
  }
}

TEST(PsSchedule, InterleavedCarriesEasgdAndItsOptions) {
  const Profile p = nine_groups();
  StrategyOptions options;
  options.T = 3;
  const Schedule s = make_ps_interleaved(p, ps_cluster(8, 1_Gbit), options);
  EXPECT_EQ(s.strategy, "ps-interleaved");
  EXPECT_DOUBLE_EQ(s.easgd.beta, 0.9);
  EXPECT_DOUBLE_EQ(s.easgd.alpha, 0.9 / 8);
  const auto json = nlohmann::json::parse(s.options_json);
  EXPECT_EQ(json.at("T"), 3);
  EXPECT_EQ(json.at("groups"), 9);
  EXPECT_EQ(json.at("slots_s").size(), 9u);
  EXPECT_NEAR(json.at("slots_s")[1].get<double>(), (35e-3 - 17e-3) / 8, 1e-12);

  options.easgd_alpha = 0.05;
  options.easgd_beta = 0.5;
  const Schedule t = make_ps_interleaved(p, ps_cluster(8, 1_Gbit), options);
  EXPECT_DOUBLE_EQ(t.easgd.alpha, 0.05);
  EXPECT_DOUBLE_EQ(t.easgd.beta, 0.5);
}

TEST(PsSchedule, BadOptionsNameTheirFlag) {
  const Profile p = nine_groups();
  const auto message_of = [&](StrategyOptions options, Cluster cluster) -> std::string {
    try {
      make_ps_interleaved(p, cluster, options);
    } catch (const UsageError& e) {
      return e.what();
    }
    return "no error";
  };
  const Cluster ok = ps_cluster(4, 1_Gbit);
  StrategyOptions bad_t;
  bad_t.T = 0;
  EXPECT_NE(message_of(bad_t, ok).find("--T 0"), std::string::npos) << message_of(bad_t, ok);
  for (double beta : {0.0, 1.5, -0.1}) {
    StrategyOptions o;
    o.easgd_beta = beta;
    EXPECT_NE(message_of(o, ok).find("--easgd-beta"), std::string::npos) << beta;
  }
  StrategyOptions bad_alpha;
  bad_alpha.easgd_alpha = -0.5;
  EXPECT_NE(message_of(bad_alpha, ok).find("--easgd-alpha"), std::string::npos);
  Cluster no_server = ok;
  no_server.servers = 0;
  EXPECT_NE(message_of({}, no_server).find("--servers"), std::string::npos);
  EXPECT_THROW(make_ps(p, no_server, {}), UsageError);
}

// Note [Compressed exchanges] (runtime/comm/parameter_server.h): the element-wise
// codecs become every operation's encoding; PowerSGD is refused, naming what is
// accepted.
TEST(PsSchedule, CompressionIsEveryOperationsEncodingAndElementwiseOnly) {
  const Profile p = nine_groups();
  const Cluster c = ps_cluster(4, 1_Gbit);
  StrategyOptions options;
  options.compression = parse_encoding("int8", "--compression");
  for (const Schedule& s : {make_ps(p, c, options), make_ps_interleaved(p, c, options),
                            find_strategy("ps").make(p, c, options)}) {
    for (const auto& ops : s.iterations) {
      for (const CommOp& op : ops) EXPECT_EQ(to_string(op.encoding), "int8") << s.strategy;
    }
  }
  options.compression = parse_encoding("powersgd:2", "--compression");
  for (SchedulerFn make : {SchedulerFn(make_ps), SchedulerFn(make_ps_interleaved)}) {
    try {
      make(p, c, options);
      ADD_FAILURE() << "powersgd:2 accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--compression powersgd:2"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("none, fp16, bf16, int8"), std::string::npos) << e.what();
    }
  }
}

TEST(PsSchedule, RegisteredInTheTable) {
  for (std::string_view name : {"ps", "ps-interleaved"}) {
    const StrategyInfo& info = find_strategy(name);
    EXPECT_EQ(info.family, Family::kParameterServer);
    EXPECT_EQ(info.arch, Arch::kParameterServer);
  }
  EXPECT_EQ(find_strategy("ps").scheduler, &make_ps);
  EXPECT_EQ(find_strategy("ps-interleaved").scheduler, &make_ps_interleaved);
}

// ---- through the simulator ----

bool is_push(const Event& e) { return e.name.starts_with("push "); }

// Time-weighted mean number of pushes in flight into the servers, over the time at
// least one is.
double mean_incast(const Timeline& timeline) {
  std::vector<std::pair<Seconds, int>> edges;
  for (const Event& e : timeline.events) {
    if (!is_push(e)) continue;
    edges.emplace_back(e.start, +1);
    edges.emplace_back(e.end, -1);
  }
  std::sort(edges.begin(), edges.end());
  double weighted = 0, covered = 0;
  int open = 0;
  for (size_t i = 0; i + 1 < edges.size(); ++i) {
    open += edges[i].second;
    const Seconds dt = edges[i + 1].first - edges[i].first;
    if (open > 0) {
      weighted += open * dt;
      covered += dt;
    }
  }
  return covered > 0 ? weighted / covered : 0;
}

// docs/design.md §1.2: P simultaneous pushes of n bytes into one server take about
// P·n/B_server, because they share the server's link.
TEST(PsSimulation, SimultaneousPushesIntoOneServerTakePTimesOnePush) {
  const Bytes n = 4_MiB;
  Profile p;
  p.model = "one-layer";
  p.layers.push_back({.name = "fc", .params = n / 4, .bytes_per_param = 4, .fp = 1e-3, .bp = 2e-3});
  const BytesPerSecond B = 1_Gbit;
  const auto push_seconds = [&](int workers, BytesPerSecond server_bandwidth) {
    Cluster c = ps_cluster(workers, B);
    c.server_bandwidth = server_bandwidth;
    // The first iteration's: the answers leave one after another (Note [Parameter-server
    // transport]), so later iterations' pushes start apart.
    const Timeline t = simulate(make_ps(p, c, {}), p, c, {.iterations = 1, .record_iterations = 1});
    std::vector<Seconds> durations;
    for (const Event& e : t.events) {
      if (is_push(e)) durations.push_back(e.end - e.start);
    }
    EXPECT_EQ(durations.size(), static_cast<size_t>(workers));
    EXPECT_EQ(t.summary.peak_server_incast, workers);
    // All P pushes start together and end together.
    const auto [lo, hi] = std::minmax_element(durations.begin(), durations.end());
    EXPECT_NEAR(*lo, *hi, 1e-9);
    return *hi - c.latency;  // the transfer, without the startup
  };
  const Seconds one = push_seconds(1, 0);
  EXPECT_NEAR(one, static_cast<double>(n) / B, 1e-9);
  for (int P : {2, 4, 8}) {
    EXPECT_NEAR(push_seconds(P, 0) / one, P, 1e-6) << P << " workers";
    // A server link P times faster removes the incast: it is the server's link.
    EXPECT_NEAR(push_seconds(P, P * B) / one, 1.0, 1e-6) << P << " workers, fat server";
  }
}

// A compressed push and answer move their wire bytes (schedule/wire_cost.h), and
// pay the codec's compute as start-up; so the iteration is shorter.
TEST(PsSimulation, CompressedExchangesMoveTheirWireBytes) {
  const Bytes n = 4_MiB;
  Profile p;
  p.model = "one-layer";
  p.layers.push_back({.name = "fc", .params = n / 4, .bytes_per_param = 4, .fp = 1e-3, .bp = 2e-3});
  Cluster c = ps_cluster(1, 100_Mbit);
  // Seconds of each push and of each pull, and the iteration, without start-ups.
  const auto run = [&](const char* codec) {
    StrategyOptions options;
    options.compression = parse_encoding(codec, "--compression");
    const Timeline t = simulate(make_ps(p, c, options), p, c, {.iterations = 2, .record_iterations = 1});
    std::map<std::string, Seconds> seconds;
    for (const Event& e : t.events) {
      if (e.name.starts_with("push ") || e.name.starts_with("pull ")) seconds[e.name.substr(0, 4)] = e.end - e.start;
    }
    seconds["iteration"] = t.summary.iteration;
    return seconds;
  };
  const auto none = run("none");
  for (const char* codec : {"fp16", "int8"}) {
    const auto encoded = run(codec);
    const double wire = static_cast<double>(elementwise_wire_bytes(parse_encoding(codec, "x"), n / 4));
    for (const char* direction : {"push", "pull"}) {
      EXPECT_NEAR(encoded.at(direction) - c.latency, wire / c.bandwidth, 1e-9) << codec << " " << direction;
      EXPECT_NEAR(none.at(direction) - c.latency, static_cast<double>(n) / c.bandwidth, 1e-9) << direction;
    }
    EXPECT_LT(encoded.at("iteration"), 0.6 * none.at("iteration")) << codec;
  }
  // The codec's compute is start-up time on each direction.
  c.host.codec_cost["int8"] = 1e-8;
  const auto costed = run("int8");
  const double wire = static_cast<double>(elementwise_wire_bytes(parse_encoding("int8", "x"), n / 4));
  EXPECT_NEAR(costed.at("push") - c.latency, wire / c.bandwidth + 1e-8 * static_cast<double>(n / 4), 1e-9);
}

TEST(PsSimulation, RandomSchedulesRunToTheEnd) {
  std::mt19937 rng(29);
  for (int trial = 0; trial < 60; ++trial) {
    const Profile p = random_profile(rng, true);
    const int P = std::uniform_int_distribution<int>(1, 5)(rng);
    const int S = std::uniform_int_distribution<int>(1, 3)(rng);
    const BytesPerSecond bw = std::uniform_real_distribution<double>(1e7, 1e10)(rng);
    StrategyOptions options;
    options.T = std::uniform_int_distribution<int>(1, 5)(rng);
    const Cluster c = ps_cluster(P, bw, S);
    for (const Schedule& s : {make_ps(p, c, options), make_ps_interleaved(p, c, options)}) {
      Timeline t;
      ASSERT_NO_THROW(t = simulate(s, p, c)) << s.strategy;
      EXPECT_GE(t.summary.iteration, t.summary.compute - 1e-12) << s.strategy;
    }
  }
}

// The seed's claim, in the model: on resnet50 with 8 workers and one server,
// interleaving lowers the incast and does not slow the iteration, both where the
// network is the bottleneck (1 Gbit) and where it is not (100 Gbit). A worker's
// pushes to a server take turns (Note [Parameter-server transport]), so the peak
// is P for both where pushes last long (1 Gbit); the mean is lower.
TEST(PsSimulation, InterleavedLowersIncastOnResnet50WithoutSlowingIt) {
  const Profile p = zoo_profile("resnet50");
  for (BytesPerSecond bw : {1_Gbit, 100_Gbit}) {
    const Cluster c = ps_cluster(8, bw);
    const SimOptions options{.iterations = 9, .record_iterations = 9};
    const Timeline plain = simulate(make_ps(p, c, {}), p, c, options);
    const Timeline interleaved = simulate(make_ps_interleaved(p, c, {}), p, c, options);  // T = 3
    EXPECT_LT(mean_incast(interleaved), mean_incast(plain)) << bw;
    EXPECT_LE(interleaved.summary.peak_server_incast, plain.summary.peak_server_incast) << bw;
    EXPECT_LE(interleaved.summary.iteration, plain.summary.iteration) << bw;
  }
}

// Intra-iteration staggering alone, against the same interleaved schedule without
// release offsets: fewer pushes in flight at once where a slot is long enough for
// a push (100 Gbit; measured 1.4 against 7.0 on average, peak 6 against 8: a
// worker's pushes take turns, Note [Parameter-server transport]).
TEST(PsSimulation, SlotsLowerTheConcurrencyOfPushes) {
  const Profile p = zoo_profile("resnet50");
  const Cluster c = ps_cluster(8, 100_Gbit);
  const SimOptions options{.iterations = 9, .record_iterations = 9};
  const Schedule staggered = make_ps_interleaved(p, c, {});
  Schedule together = staggered;
  for (auto& ops : together.iterations) {
    for (CommOp& op : ops) op.release_offset.clear();
  }
  const Timeline a = simulate(staggered, p, c, options);
  const Timeline b = simulate(together, p, c, options);
  EXPECT_LT(mean_incast(a), mean_incast(b));
  EXPECT_LT(a.summary.peak_server_incast, b.summary.peak_server_incast);
  EXPECT_EQ(b.summary.peak_server_incast, c.workers);
}

// Every group is pushed and pulled by every worker exactly once per period, in the
// iteration docs/strategies.md §4.4 assigns it.
TEST(PsSimulation, EveryGroupSynchronisedOncePerPeriod) {
  const Profile p = zoo_profile("resnet50");
  const int P = 4, T = 3, iterations = 3 * T;
  const Cluster c = ps_cluster(P, 10_Gbit, 2);
  StrategyOptions options;
  options.T = T;
  const Schedule s = make_ps_interleaved(p, c, options);
  // One more period than recorded: the last iteration's pulls outlive the run.
  const Timeline t = simulate(s, p, c, {.iterations = iterations + T, .record_iterations = iterations});
  const LayerGroups groups = ps::fuse_layers(p);
  const std::vector<Bytes> bytes = ps::group_bytes(p, groups);

  // pushed[w][iteration], pulled[w][iteration]: bytes and transfers.
  std::map<std::pair<int, int>, std::pair<Bytes, int>> pushed, pulled;
  for (const Event& e : t.events) {
    auto* into = is_push(e) ? &pushed : e.name.starts_with("pull ") ? &pulled : nullptr;
    if (into == nullptr) continue;
    auto& [b, count] = (*into)[{e.worker, e.iteration}];
    b += e.bytes;
    ++count;
  }
  for (int w = 0; w < P; ++w) {
    for (int it = 0; it < iterations; ++it) {
      Bytes expected = 0;
      const std::vector<int> in_t = ps::groups_in_iteration(static_cast<int>(groups.size()), it, T);
      for (int idx : in_t) expected += bytes[static_cast<size_t>(idx)];
      for (auto* table : {&pushed, &pulled}) {
        const auto& [b, count] = (*table)[{w, it}];
        EXPECT_EQ(b, expected) << "worker " << w << " iteration " << it;
        EXPECT_EQ(count, static_cast<int>(in_t.size())) << "worker " << w << " iteration " << it;
      }
    }
    // Over each period, the whole model.
    for (int start = 0; start < iterations; start += T) {
      Bytes period = 0;
      for (int it = start; it < start + T; ++it) period += pushed[{w, it}].first;
      EXPECT_EQ(period, p.total_bytes());
    }
  }
}

}  // namespace
}  // namespace weft
