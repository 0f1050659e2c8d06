#include "sim/simulator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "schedule/encoding.h"
#include "schedule/index.h"
#include "schedule/random_schedule_testing.h"
#include "schedule/wire_cost.h"

namespace weft {
namespace {

using namespace literals;

struct LayerSpec {
  Seconds fp;
  Seconds bp;
  std::int64_t params;
};

Profile make_profile(const std::vector<LayerSpec>& specs) {
  Profile p;
  p.model = "hand-built";
  for (size_t l = 0; l < specs.size(); ++l) {
    Layer layer;
    layer.name = "layer" + std::to_string(l);
    layer.params = specs[l].params;
    layer.fp = specs[l].fp;
    layer.bp = specs[l].bp;
    p.layers.push_back(layer);
  }
  return p;
}

Profile random_profile(std::mt19937& rng, int max_layers = 8) {
  std::vector<LayerSpec> specs(static_cast<size_t>(std::uniform_int_distribution(1, max_layers)(rng)));
  for (LayerSpec& s : specs) {
    s.fp = std::uniform_real_distribution(0.0, 2e-3)(rng);
    s.bp = std::uniform_real_distribution(0.0, 4e-3)(rng);
    s.params = std::uniform_int_distribution<std::int64_t>(1, 2'000'000)(rng);
  }
  return make_profile(specs);
}

Cluster ring(int workers, BytesPerSecond bandwidth, Seconds latency) {
  Cluster c;
  c.workers = workers;
  c.bandwidth = bandwidth;
  c.latency = latency;
  return c;
}

Cluster random_ring(std::mt19937& rng) {
  return ring(std::uniform_int_distribution(2, 16)(rng), std::uniform_real_distribution(1e7, 1e9)(rng),
              std::uniform_real_distribution(0.0, 1e-4)(rng));
}

CommOp whole_layers(const Profile& p, std::vector<int> layers, int needed_by = kBarrier) {
  CommOp op;
  for (int l : layers) op.chunks.push_back({.layer = l, .offset = 0, .length = p.layers[l].bytes()});
  op.ready_after = *std::min_element(layers.begin(), layers.end());
  op.needed_by = needed_by;
  op.priority = op.ready_after;
  return op;
}

std::vector<int> all_layers(const Profile& p) {
  std::vector<int> layers(static_cast<size_t>(p.size()));
  std::iota(layers.begin(), layers.end(), 0);
  return layers;
}

// Every ready op launched at once.
const DispatchPolicy kAnyNumber{.kind = DispatchPolicy::Kind::kCredit, .credit = Bytes{1} << 60};

Schedule one_period(std::vector<CommOp> ops, DispatchPolicy dispatch = {}) {
  Schedule s;
  s.strategy = "hand-built";
  s.iterations = {std::move(ops)};
  s.dispatch = std::move(dispatch);
  s.options_json = "{}";
  return s;
}

// One op per layer, in backward order, each ready after its own backward.
std::vector<CommOp> per_layer_backward_order(const Profile& p, bool layer_wise) {
  std::vector<CommOp> ops;
  for (int l = p.size() - 1; l >= 0; --l) ops.push_back(whole_layers(p, {l}, layer_wise ? l : kBarrier));
  return ops;
}

Seconds compute_of(const Profile& p) { return p.forward_time() + p.backward_time(); }

// (a) ssgd: one all-reduce of the whole model after the backward, behind a barrier.
TEST(Simulate, WholeModelAllReduceAfterBackward) {
  std::mt19937 rng(1);
  for (int trial = 0; trial < 100; ++trial) {
    const Profile p = random_profile(rng);
    const Cluster c = random_ring(rng);
    const Timeline t = simulate(one_period({whole_layers(p, all_layers(p))}), p, c, {.iterations = 6});
    const Seconds comm = allreduce_time(c, p.total_bytes());
    EXPECT_NEAR(t.summary.iteration, compute_of(p) + comm, 1e-9);
    EXPECT_NEAR(t.summary.compute, compute_of(p), 1e-12);
    EXPECT_NEAR(t.summary.exposed_comm, comm, 1e-9);
    // The fabric is busy for the transfer part of the all-reduce only.
    const Seconds transfer = comm - allreduce_flow(c, p.total_bytes()).startup;
    EXPECT_NEAR(t.summary.link_utilisation, transfer / t.summary.iteration, 1e-9);
    EXPECT_EQ(t.summary.iterations, 5);
  }
}

// (b) wfbp: per-layer all-reduces in backward order, one at a time, then a barrier.
// start_l = max(BPend(l), end of the previous); iteration = fp + max(bp, last end).
TEST(Simulate, InOrderPerLayerMatchesTheRecurrence) {
  std::mt19937 rng(2);
  for (int trial = 0; trial < 100; ++trial) {
    const Profile p = random_profile(rng);
    const Cluster c = random_ring(rng);
    const auto bp_end = backward_end_times(p);
    Seconds end = 0;
    for (int l = p.size() - 1; l >= 0; --l) {
      end = std::max(bp_end[static_cast<size_t>(l)], end) + allreduce_time(c, p.layers[l].bytes());
    }
    const Seconds expected = p.forward_time() + std::max(p.backward_time(), end);
    const Timeline t = simulate(one_period(per_layer_backward_order(p, false)), p, c, {.iterations = 5});
    EXPECT_NEAR(t.summary.iteration, expected, 1e-9) << "trial " << trial;
  }
}

// Worker 0's collectives, (start, end), in launch order.
std::vector<std::pair<Seconds, Seconds>> comm_spans(const Timeline& t) {
  std::vector<std::pair<Seconds, Seconds>> spans;
  for (const Event& e : t.events) {
    if (e.worker == 0 && e.lane.starts_with("comm")) spans.emplace_back(e.start, e.end);
  }
  std::sort(spans.begin(), spans.end());
  return spans;
}

Seconds end_of_last_comm(const Timeline& t, int iteration) {
  Seconds end = 0;
  for (const Event& e : t.events) {
    if (e.worker == 0 && e.lane.starts_with("comm") && e.iteration == iteration) end = std::max(end, e.end);
  }
  return end;
}

Seconds start_of(const Timeline& t, std::string_view name, int iteration) {
  for (const Event& e : t.events) {
    if (e.worker == 0 && e.name == name && e.iteration == iteration) return e.start;
  }
  ADD_FAILURE() << "no event " << name << " in iteration " << iteration;
  return 0;
}

// (c) Layer-wise needed_by: sending in forward order once the whole gradient exists,
// the next forward of layer 0 starts as soon as layer 0's message is done, while
// later layers' messages are still on the wire; a barrier would wait for all.
TEST(Simulate, LayerWiseDependencyOverlapsTheNextForward) {
  const Profile p = make_profile({{1e-3, 2e-3, 1'000'000}, {1e-3, 2e-3, 1'000'000}, {1e-3, 2e-3, 1'000'000}});
  const Cluster c = ring(4, 1_Gbit, 10_us);
  std::vector<CommOp> layer_wise, barrier;
  for (int l = 0; l < p.size(); ++l) {
    CommOp op = whole_layers(p, {l}, l);
    op.ready_after = 0;  // all leave after the whole backward, in forward order
    layer_wise.push_back(op);
    op.needed_by = kBarrier;
    barrier.push_back(op);
  }
  const Timeline lw = simulate(one_period(layer_wise), p, c, {.iterations = 4, .record_iterations = 2});
  const Timeline bar = simulate(one_period(barrier), p, c, {.iterations = 4});
  EXPECT_LT(start_of(lw, "fp layer0", 1), end_of_last_comm(lw, 0));
  EXPECT_LT(lw.summary.iteration, bar.summary.iteration - 1e-6);
  // fp of layer l waits only for message l: c0 after the backward, then each forward
  // waits for the later of its message and the previous layer.
  const Seconds m = allreduce_time(c, 4'000'000);
  const Seconds bp_done = p.forward_time() + p.backward_time();
  EXPECT_NEAR(start_of(lw, "fp layer0", 1), bp_done + m, 1e-12);
  EXPECT_NEAR(start_of(lw, "fp layer1", 1), bp_done + 2 * m, 1e-12);
  EXPECT_NEAR(start_of(lw, "fp layer2", 1), bp_done + 3 * m, 1e-12);

  // Note [The workers' own step]: where the workers step once the backward has
  // returned, it returns with every gradient averaged: the barrier's timing.
  Cluster outside = c;
  outside.steps_outside = true;
  const Timeline drained = simulate(one_period(layer_wise), p, outside, {.iterations = 4, .record_iterations = 2});
  EXPECT_NEAR(start_of(drained, "fp layer0", 1), end_of_last_comm(drained, 0), 1e-12);
  EXPECT_NEAR(drained.summary.iteration, bar.summary.iteration, 1e-12);
}

// Note [The workers' own step]: under the workers' own step, layer-wise
// parameter averages leave together when the whole backward has ended; S-SGD's
// gradients still leave as each layer's backward ends.
TEST(Simulate, AveragesUnderTheWorkersOwnStepLeaveWhenTheBackwardEnds) {
  const Profile p = make_profile({{1e-3, 2e-3, 1'000'000}, {1e-3, 2e-3, 1'000'000}, {1e-3, 2e-3, 1'000'000}});
  Cluster c = ring(4, 1_Gbit, 10_us);
  const auto first_comm = [](const Timeline& t) {
    Seconds first = 1e300;
    for (const Event& e : t.events) {
      if (e.worker == 0 && e.lane.starts_with("comm") && e.iteration == 0) first = std::min(first, e.start);
    }
    return first;
  };
  for (const OpKind kind : {OpKind::kAverageParameters, OpKind::kAverageGradients}) {
    std::vector<CommOp> ops;
    for (int l = p.size() - 1; l >= 0; --l) {
      ops.push_back(whole_layers(p, {l}, l));
      ops.back().kind = kind;
    }
    c.steps_outside = false;
    const Timeline in_backward = simulate(one_period(ops), p, c, {.iterations = 4, .record_iterations = 1});
    c.steps_outside = true;
    const Timeline after = simulate(one_period(ops), p, c, {.iterations = 4, .record_iterations = 1});
    const Seconds layer2_done = p.forward_time() + p.layers[2].bp;
    EXPECT_NEAR(first_comm(in_backward), layer2_done, 1e-12);
    if (kind == OpKind::kAverageParameters) {
      EXPECT_NEAR(first_comm(after), compute_of(p), 1e-12);
      EXPECT_GT(after.summary.iteration, in_backward.summary.iteration + 1e-6);
    } else {
      EXPECT_NEAR(first_comm(after), layer2_done, 1e-12);
      EXPECT_EQ(after.summary.iteration, in_backward.summary.iteration);
    }
  }
}

// (d) A credit large enough for two ops lets both fly at once: they share the fabric
// (each at half rate) and overlap their startups, saving one startup over in-order.
TEST(Simulate, CreditSharesBandwidthBetweenConcurrentOps) {
  // Layer 0 has no backward time, so both gradients are ready at the same instant.
  const Profile p = make_profile({{1e-3, 0, 500'000}, {1e-3, 2e-3, 500'000}});
  const Cluster c = ring(8, 1_Gbit, 50_us);
  std::vector<CommOp> ops = {whole_layers(p, {1}), whole_layers(p, {0})};
  ops[0].ready_after = 0;  // both leave together
  const Timeline credit =
      simulate(one_period(ops, {.kind = DispatchPolicy::Kind::kCredit, .credit = 10_MiB, .windows = {}}),
               p, c, {.iterations = 4, .record_iterations = 1});
  const Timeline in_order = simulate(one_period(ops), p, c, {.iterations = 4});

  const Flow f = allreduce_flow(c, 2'000'000);
  const Seconds transfer_both = 2 * 2'000'000 / links_of(c).capacity[0];
  EXPECT_NEAR(credit.summary.iteration, compute_of(p) + f.startup + transfer_both, 1e-12);
  EXPECT_NEAR(in_order.summary.iteration, compute_of(p) + 2 * f.startup + transfer_both, 1e-12);

  std::vector<Event> comm;
  for (const Event& e : credit.events) {
    if (e.worker == 0 && e.lane.starts_with("comm")) comm.push_back(e);
  }
  ASSERT_EQ(comm.size(), 2u);
  EXPECT_DOUBLE_EQ(comm[0].start, comm[1].start);
  EXPECT_DOUBLE_EQ(comm[0].end, comm[1].end);  // fair sharing: equal sizes end together
  EXPECT_NE(comm[0].lane, comm[1].lane);
}

// Messages that end together while the credit lets the next ones start at once
// (a regression: a new flow must not take over the id of one not yet handled).
TEST(Simulate, CreditRefillsAsMessagesFinishTogether) {
  const Profile p = make_profile({{1e-3, 1e-3, 100'000}, {1e-3, 1e-3, 100'000},
                                  {1e-3, 1e-3, 100'000}, {1e-3, 1e-3, 100'000}});
  const Cluster c = ring(8, 1_Gbit, 50_us);
  std::vector<CommOp> ops;
  for (int l = 0; l < p.size(); ++l) {
    ops.push_back(whole_layers(p, {l}, l));
    ops.back().ready_after = 0;
  }
  const Timeline t = simulate(
      one_period(ops, {.kind = DispatchPolicy::Kind::kCredit, .credit = 800'000, .windows = {}}), p, c,
      {.iterations = 4});
  // Two rounds of two messages sharing the fabric; each round ends together.
  const Flow f = allreduce_flow(c, 400'000);
  const Seconds round = f.startup + 2 * f.volume / links_of(c).capacity[0];
  // Layers 0 and 1 arrive with the first round; the forward of layers 2, 3 (2 ms)
  // outlasts the second round.
  const Seconds expected = p.backward_time() + round + p.forward_time();
  EXPECT_NEAR(t.summary.iteration, std::max(expected, p.backward_time() + 2 * round + 2e-3), 1e-12);
}

// One collective per layer, all leaving as the backward ends, under a credit for
// all; each needed by its layer's next forward, or all by the next iteration's
// barrier.
Schedule leaving_together(const Profile& p, bool needed_by_barrier) {
  std::vector<CommOp> ops;
  for (int l = 0; l < p.size(); ++l) {
    ops.push_back(whole_layers(p, {l}, needed_by_barrier ? kBarrier : l));
    ops.back().ready_after = 0;
  }
  return one_period(ops, {.kind = DispatchPolicy::Kind::kCredit, .credit = 10_MiB, .windows = {}});
}

// Worker 0's messages' ends in the first iteration, from the instant the first left, in order.
std::vector<Seconds> first_iteration_ends(const Schedule& s, const Profile& p, const Cluster& c) {
  const Timeline t = simulate(s, p, c, {.iterations = 2, .record_iterations = 1});
  std::vector<Seconds> out;
  Seconds left = std::numeric_limits<Seconds>::infinity();
  for (const Event& e : t.events) {
    if (e.worker != 0 || !e.lane.starts_with("comm")) continue;
    out.push_back(e.end);
    left = std::min(left, e.start);
  }
  std::sort(out.begin(), out.end());
  for (Seconds& e : out) e -= left;
  return out;
}

// Note [Collectives in flight]: a measured transport runs two collectives at
// once; under a credit for all four messages the last two wait for the first two
// and pay their start-up after them.
TEST(Simulate, CollectivesBeyondTheTransportsLimitWaitTheirTurn) {
  Profile p = make_profile({{1e-3, 1e-3, 100'000}, {1e-3, 1e-3, 100'000},
                                  {1e-3, 1e-3, 100'000}, {1e-3, 1e-3, 100'000}});
  Cluster c = ring(4, 1_Gbit, 50_us);
  c.fitted = FittedAllReduce{.a = 2e-3, .b = 1e-8};
  const Schedule s = leaving_together(p, false);
  auto ends = [&](int limit) {
    c.fitted->concurrent = limit;
    return first_iteration_ends(s, p, c);
  };
  const Flow f = allreduce_flow(c, 400'000);
  const Seconds alone = f.volume * c.fitted->b;  // one message's bytes at the fabric's rate
  const Seconds all_at_once = f.startup + 4 * alone;
  const Seconds pair = f.startup + 2 * alone;
  const std::vector<Seconds> unlimited = ends(0), two = ends(2);
  ASSERT_EQ(unlimited.size(), 4u);
  ASSERT_EQ(two.size(), 4u);
  for (Seconds e : unlimited) EXPECT_NEAR(e, all_at_once, 1e-12);
  EXPECT_NEAR(two[0], pair, 1e-12);
  EXPECT_NEAR(two[1], pair, 1e-12);
  EXPECT_NEAR(two[2], 2 * pair, 1e-12);
  EXPECT_NEAR(two[3], 2 * pair, 1e-12);
}

// (e) Windows fuse the highest-priority ready ops into one message.
TEST(Simulate, WindowPolicyFusesOps) {
  const Profile p = make_profile({{1e-3, 1e-3, 300'000}, {1e-3, 1e-3, 200'000}, {1e-3, 2e-3, 100'000}});
  const Cluster c = ring(8, 1_Gbit, 50_us);
  std::vector<CommOp> ops = per_layer_backward_order(p, false);
  for (CommOp& op : ops) op.ready_after = 0;  // all ready at the end of the backward
  const Timeline t = simulate(
      one_period(ops, {.kind = DispatchPolicy::Kind::kWindows, .credit = 0, .windows = {p.total_bytes()}}), p, c,
      {.iterations = 4, .record_iterations = 1});
  EXPECT_NEAR(t.summary.iteration, compute_of(p) + allreduce_time(c, p.total_bytes()), 1e-12);
  std::vector<Event> comm;
  for (const Event& e : t.events) {
    if (e.worker == 0 && e.lane.starts_with("comm")) comm.push_back(e);
  }
  ASSERT_EQ(comm.size(), 1u);
  EXPECT_EQ(comm[0].bytes, p.total_bytes());
  EXPECT_EQ(comm[0].name, "allreduce 3 ops");
  EXPECT_EQ(comm[0].layer, -1);
}

// Messages the runtime would sum by all-gather are named so in the timeline, as
// the runtime names them; the cost is the measured curve's either way.
TEST(Simulate, MessagesUpToTheGatherThresholdAreNamedAllGather) {
  const Profile p = make_profile({{1e-3, 1e-3, 1'000}, {1e-3, 1e-3, 100'000}});
  Cluster c = ring(4, 1_Gbit, 50_us);
  c.fitted = FittedAllReduce{.a = 1e-3, .b = 1e-8, .gather_below = 4'000};
  const Timeline t = simulate(one_period(per_layer_backward_order(p, false)), p, c,
                              {.iterations = 3, .record_iterations = 1});
  std::vector<std::string> names;
  for (const Event& e : t.events) {
    if (e.worker == 0 && e.lane.starts_with("comm")) names.push_back(e.name.substr(0, e.name.find(' ')));
  }
  EXPECT_EQ(names, (std::vector<std::string>{"allreduce", "allgather"}));  // backward order: layer 1, then 0
}

// (f) A collective starts when the last worker releases it.
TEST(Simulate, ReleaseOffsetsDelayTheCollective) {
  const Profile p = make_profile({{1e-3, 2e-3, 250'000}, {1e-3, 2e-3, 250'000}});
  const Cluster c = ring(4, 1_Gbit, 50_us);
  CommOp op = whole_layers(p, {0, 1});
  op.release_offset = {0, 0, 3_ms, 1_ms};
  const Timeline t = simulate(one_period({op}), p, c, {.iterations = 4, .record_iterations = 1});
  EXPECT_NEAR(t.summary.iteration, compute_of(p) + 3e-3 + allreduce_time(c, p.total_bytes()), 1e-12);
  int comm_events = 0;
  for (const Event& e : t.events) {
    if (e.lane != "comm") continue;
    ++comm_events;
    EXPECT_NEAR(e.start, compute_of(p) + 3e-3, 1e-12) << "worker " << e.worker;
  }
  EXPECT_EQ(comm_events, 4);
}

// The same messages as `in_order`'s, one at a time in list order, under a policy
// whose collectives rank 0 announces (Note [Collective order], runtime/comm/engine.h).
Schedule announced_in_list_order(Schedule in_order) {
  in_order.dispatch = {.kind = DispatchPolicy::Kind::kCredit, .credit = 1};
  for (auto& ops : in_order.iterations) {
    for (size_t i = 0; i < ops.size(); ++i) ops[i].priority = static_cast<int>(i);
  }
  EXPECT_TRUE(decided_by_timing(in_order.dispatch));
  return in_order;
}

// Note [Skew]: each collective starts `skew` after its op is ready and, where rank
// 0 announces it, `back_to_back_skew` after it is launched (in order: when it is
// ready and the one before it has ended), whichever is later; the trace shows the
// wait inside it.
TEST(Simulate, SkewDelaysEachCollective) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 100; ++trial) {
    Profile p = random_profile(rng);
    Cluster c = random_ring(rng);
    c.host.skew = std::uniform_real_distribution(0.0, 5e-3)(rng);
    c.host.back_to_back_skew = std::uniform_real_distribution(0.0, 5e-3)(rng);
    Schedule schedule = one_period(per_layer_backward_order(p, false));
    if (trial % 2 == 1) schedule = announced_in_list_order(schedule);
    const Seconds back_to_back = decided_by_timing(schedule.dispatch) ? c.host.back_to_back_skew : 0;
    const auto bp_end = backward_end_times(p);
    Seconds end = 0;
    for (int l = p.size() - 1; l >= 0; --l) {
      const Seconds ready = bp_end[static_cast<size_t>(l)];
      const Seconds launched = std::max(ready, end);
      end = std::max(ready + c.host.skew, launched + back_to_back) + allreduce_time(c, p.layers[l].bytes());
    }
    const Seconds expected = p.forward_time() + std::max(p.backward_time(), end);
    const Timeline t = simulate(schedule, p, c, {.iterations = 5});
    EXPECT_NEAR(t.summary.iteration, expected, 1e-9) << "trial " << trial;
  }
  Profile p = make_profile({{1e-3, 2e-3, 250'000}});
  Cluster c = ring(4, 1_Gbit, 50_us);
  c.host.skew = 4e-3;
  c.host.back_to_back_skew = 1e-3;
  const Timeline t = simulate(one_period({whole_layers(p, {0})}), p, c, {.iterations = 4, .record_iterations = 1});
  EXPECT_NEAR(t.summary.iteration, compute_of(p) + c.host.skew + allreduce_time(c, p.total_bytes()), 1e-12);
  const auto comm = std::find_if(t.events.begin(), t.events.end(), [](const Event& e) { return e.lane == "comm"; });
  ASSERT_NE(comm, t.events.end());
  EXPECT_NEAR(comm->start, compute_of(p), 1e-12);
  EXPECT_NEAR(comm->end, compute_of(p) + c.host.skew + allreduce_time(c, p.total_bytes()), 1e-12);
}

// Note [Skew]: a collective that rank 0 announces at its predecessor's end waits
// back_to_back_skew, however long its data has been ready; one each rank issues
// at its own end of the predecessor does not.
TEST(Simulate, BackToBackSkewSeparatesAnnouncedCollectivesSentInARow) {
  // Layer 1's message is long; layer 0's is ready while it is in flight.
  Profile p = make_profile({{1e-3, 1e-4, 10'000}, {1e-3, 1e-4, 2'500'000}});
  Cluster c = ring(4, 1_Gbit, 50_us);
  c.host.skew = 4e-3;
  c.host.back_to_back_skew = 3e-3;
  const Schedule in_order = one_period(per_layer_backward_order(p, false));
  const Schedule announced = announced_in_list_order(in_order);
  const Seconds first_end = compute_of(p) - p.layers[0].bp + c.host.skew + allreduce_time(c, p.layers[1].bytes());
  ASSERT_GT(first_end, compute_of(p));  // the second message's data was ready long before
  EXPECT_NEAR(simulate(announced, p, c, {.iterations = 4}).summary.iteration,
              first_end + c.host.back_to_back_skew + allreduce_time(c, p.layers[0].bytes()), 1e-12);
  EXPECT_NEAR(simulate(in_order, p, c, {.iterations = 4}).summary.iteration,
              first_end + allreduce_time(c, p.layers[0].bytes()), 1e-12);
}

// A message in a codec moves its wire bytes (schedule/wire_cost.h); PowerSGD's Q
// sum is a second exchange, launched by the codec's thread: one more start-up and
// the host's core_wait. ACP-SGD sums once. Nothing computes beside it here, so no
// launch finds the cores taken.
TEST(Simulate, ACodecsLaterExchangesPayAStartUpAndACoreWaitEach) {
  Profile p = make_profile({{1e-3, 2e-3, 64 * 64 + 64}});
  p.layers[0].shapes = {{64, 64}, {64}};
  Cluster c = ring(4, 100_Mbit, 50_us);
  c.host.core_wait = 2e-3;
  for (const char* name : {"fp16", "acpsgd:2", "powersgd:2"}) {
    CommOp op = whole_layers(p, {0});
    op.encoding = parse_encoding(name, "test");
    const std::vector<std::pair<Seconds, Seconds>> comm =
        comm_spans(simulate(one_period({op}), p, c, {.iterations = 4, .record_iterations = 1}));
    ASSERT_EQ(comm.size(), 1u) << name;
    const WireCost cost = wire_cost(op.encoding, op.chunks, p, c.host);
    EXPECT_EQ(cost.exchanges, std::string(name) == "powersgd:2" ? 2 : 1) << name;
    const Seconds later = (cost.exchanges - 1) * (allreduce_flow(c, cost.bytes).startup + c.host.core_wait);
    EXPECT_NEAR(comm[0].second - comm[0].first, allreduce_time(c, cost.bytes) + later, 1e-12) << name;
  }
}

// Note [Skew]: a collective launched while its cores are all taken (layer 1's,
// during layer 0's backward, four workers computing on two cores) starts
// core_wait later; one launched as they stop (layer 0's) does not. Its messages
// take no core here, so nothing else changes.
TEST(Simulate, CoreWaitHoldsCollectivesLaunchedWhileTheCoresAreTaken) {
  Profile p = make_profile({{1e-3, 10e-3, 10'000}, {1e-3, 1e-3, 25'000}});
  Cluster c = ring(4, 1_Gbit, 50_us);
  c.host.processes = 4;
  c.host.cores = 2;
  c.host.core_wait = 2e-3;
  const Timeline t =
      simulate(one_period(per_layer_backward_order(p, false)), p, c, {.iterations = 4, .record_iterations = 1});
  const std::vector<std::pair<Seconds, Seconds>> comm = comm_spans(t);
  ASSERT_EQ(comm.size(), 2u);
  const Seconds iteration_start = comm[0].first - p.forward_time() - p.layers[1].bp;
  const Seconds compute_end = iteration_start + compute_of(p);
  EXPECT_NEAR(comm[0].second, comm[0].first + c.host.core_wait + allreduce_time(c, p.layers[1].bytes()), 1e-12);
  ASSERT_LT(comm[0].second, compute_end);  // the message before is out of the way
  EXPECT_NEAR(comm[1].first, compute_end, 1e-12);
  EXPECT_NEAR(comm[1].second, compute_end + allreduce_time(c, p.layers[0].bytes()), 1e-12);
  c.host.cores = 4;  // two workers a machine on four cores: never all taken
  c.host.processes = 2;
  EXPECT_NEAR(simulate(one_period(per_layer_backward_order(p, false)), p, c, {.iterations = 4}).summary.iteration,
              simulate(one_period(per_layer_backward_order(p, false)), p, ring(4, 1_Gbit, 50_us), {.iterations = 4})
                      .summary.iteration,
              1e-12);
}

// Note [Skew]: the skew grows by `drift` for the compute beyond an iteration's
// since the workers last passed a forward that needed communication: none under
// S-SGD, two iterations' under local SGD averaging every third iteration.
TEST(Simulate, DriftGrowsTheSkewWithComputeApart) {
  Profile p = make_profile({{1e-3, 2e-3, 250'000}, {1e-3, 2e-3, 250'000}});
  Cluster c = ring(4, 1_Gbit, 50_us);
  c.host.skew = 2e-3;
  c.host.drift = 0.1;
  const Seconds compute = compute_of(p);
  const Seconds message = allreduce_time(c, p.total_bytes());
  const Schedule every = one_period({whole_layers(p, {0, 1})});
  EXPECT_NEAR(simulate(every, p, c, {.iterations = 6}).summary.iteration,
              compute + c.host.skew + message, 1e-12);

  CommOp op = whole_layers(p, {0, 1});
  op.kind = OpKind::kAverageParameters;
  Schedule third = one_period({op});
  third.period = 3;
  third.iterations = {{op}, {}, {}};
  EXPECT_NEAR(simulate(third, p, c, {.iterations = 12}).summary.iteration,
              compute + (c.host.skew + c.host.drift * (3 * compute - compute) + message) / 3, 1e-12);
}

// Note [Symmetric all-reduce workers]: simulating one representative worker gives
// what simulating every worker gives. Offsets that differ by 1e-15 s force the full
// simulation without changing the physics.
TEST(Simulate, RepresentativeWorkerEqualsFullSimulation) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    Profile p = random_profile(rng);
    Cluster c = random_ring(rng);
    if (trial % 4 >= 2) {  // Note [Shared cores]
      c.host.processes = c.workers;
      c.host.cores = std::max(1, c.workers / 2);
      c.host.comm_cores = trial % 4 == 3 ? 0.6 : 0.1;
    }
    if (trial % 5 >= 3) c.host.skew = 2e-3;
    if (trial % 5 == 4) c.host.back_to_back_skew = 1e-3;
    if (trial % 7 >= 4) c.host.drift = 0.2;
    std::vector<CommOp> ops = per_layer_backward_order(p, trial % 2 == 0);
    DispatchPolicy dispatch;
    if (trial % 3 == 1) dispatch = {.kind = DispatchPolicy::Kind::kCredit, .credit = 1_MiB, .windows = {}};
    if (trial % 3 == 2) {
      dispatch = {.kind = DispatchPolicy::Kind::kWindows, .credit = 0, .windows = {2_MiB, 1_MiB, 3_MiB}};
    }
    const Timeline symmetric = simulate(one_period(ops, dispatch), p, c, {.iterations = 5, .record_iterations = 1});
    std::vector<Seconds> offsets(static_cast<size_t>(c.workers), 0);
    offsets.back() = 1e-15;
    for (CommOp& op : ops) op.release_offset = offsets;
    if (decided_by_timing(dispatch)) {  // validate() refuses offsets by worker there: nothing to compare
      EXPECT_THROW(simulate(one_period(ops, dispatch), p, c), std::logic_error);
      continue;
    }
    const Timeline full = simulate(one_period(ops, dispatch), p, c, {.iterations = 5, .record_iterations = 1});
    EXPECT_NEAR(symmetric.summary.iteration, full.summary.iteration, 1e-9) << "trial " << trial;
    EXPECT_NEAR(symmetric.summary.link_utilisation, full.summary.link_utilisation, 1e-6);
    EXPECT_EQ(symmetric.events.size(), full.events.size());
  }
}

TEST(Simulate, RecordsTheFirstIterationsOfEveryWorker) {
  const Profile p = make_profile({{1e-3, 2e-3, 1000}, {1e-3, 2e-3, 1000}, {1e-3, 2e-3, 1000}});
  const Cluster c = ring(3, 1_Gbit, 50_us);
  const Schedule s = one_period(per_layer_backward_order(p, false));
  const Timeline t = simulate(s, p, c, {.iterations = 10, .record_iterations = 2});
  // Per worker and iteration: 3 forward, 3 backward, 3 messages.
  EXPECT_EQ(t.events.size(), 3u * 2 * 9);
  EXPECT_EQ(t.process_names.size(), 3u);
  EXPECT_EQ(t.source, "simulated");
  EXPECT_TRUE(simulate(s, p, c, {.iterations = 10}).events.empty());
  const auto fp0 = std::find_if(t.events.begin(), t.events.end(), [](const Event& e) { return e.name == "fp layer0"; });
  ASSERT_NE(fp0, t.events.end());
  EXPECT_EQ(fp0->lane, "compute");
  EXPECT_EQ(fp0->layer, 0);
}

Cluster parameter_server(int workers, BytesPerSecond bandwidth, Seconds latency) {
  Cluster c = ring(workers, bandwidth, latency);
  c.arch = Arch::kParameterServer;
  c.servers = 1;
  return c;
}

CommOp ps_op(const Profile& p, std::vector<int> layers) {
  CommOp op = whole_layers(p, std::move(layers));
  op.kind = OpKind::kParameterServer;
  return op;
}

// (g) Simultaneous pushes into one server share its link (incast); the answers
// leave it one after another, to workers 0..P−1 (Note [Parameter-server
// transport]). Staggering the pushes by one push time each removes the incast.
TEST(Simulate, ParameterServerIncastAndStaggering) {
  const Profile p = make_profile({{1e-3, 2e-3, 250'000}});
  const int workers = 4;
  const Cluster c = parameter_server(workers, 1_Gbit, 50_us);
  const Seconds one = 1e6 / c.bandwidth;  // one transfer of the layer, alone
  const auto first_iteration = [&](const CommOp& op) {
    return simulate(one_period({op}), p, c, {.iterations = 1, .record_iterations = 1});
  };
  const auto ends = [&](const Timeline& t, std::string_view kind) {
    std::vector<Seconds> out(static_cast<size_t>(workers), -1);
    for (const Event& e : t.events) {
      if (e.name.starts_with(kind)) out[static_cast<size_t>(e.worker)] = e.end;
    }
    return out;
  };

  const Timeline together = first_iteration(ps_op(p, {0}));
  EXPECT_EQ(together.summary.peak_server_incast, workers);
  const Seconds pushed = compute_of(p) + c.latency + workers * one;
  for (int w = 0; w < workers; ++w) {
    EXPECT_NEAR(ends(together, "push")[static_cast<size_t>(w)], pushed, 1e-12) << w;
    EXPECT_NEAR(ends(together, "pull")[static_cast<size_t>(w)], pushed + (w + 1) * (c.latency + one), 1e-12) << w;
  }

  CommOp staggered = ps_op(p, {0});
  for (int w = 0; w < workers; ++w) staggered.release_offset.push_back(w * (c.latency + one));
  const Timeline apart = first_iteration(staggered);
  EXPECT_EQ(apart.summary.peak_server_incast, 1);
  for (int w = 0; w < workers; ++w) {
    EXPECT_NEAR(ends(apart, "push")[static_cast<size_t>(w)], compute_of(p) + (w + 1) * (c.latency + one), 1e-12) << w;
  }
  // The server updates once the last push has arrived.
  EXPECT_NEAR(ends(apart, "pull")[0], compute_of(p) + (workers + 1) * (c.latency + one), 1e-12);

  // Over many iterations the answers' order staggers the pushes by itself: each
  // worker computes and pushes while the next is answered.
  const Timeline steady = simulate(one_period({ps_op(p, {0})}), p, c, {.iterations = 8});
  EXPECT_NEAR(steady.summary.iteration, compute_of(p) + (workers + 1) * (c.latency + one), 1e-12);
  EXPECT_GT(steady.summary.server_busy, 0);
  EXPECT_LE(steady.summary.server_busy, 1);
}

// Note [Parameter-server transport]: a worker's pushes to one server take turns,
// in the order sent.
TEST(Simulate, PushesToOneServerTakeTurns) {
  const Profile p = make_profile({{1e-3, 2e-3, 250'000}, {1e-3, 2e-3, 250'000}});
  const Cluster c = parameter_server(1, 1_Gbit, 50_us);
  std::vector<CommOp> ops{ps_op(p, {1}), ps_op(p, {0})};
  for (CommOp& op : ops) op.ready_after = 0;  // both leave after the whole backward
  const Timeline t = simulate(one_period(ops, kAnyNumber), p, c, {.iterations = 1, .record_iterations = 1});
  const Seconds one = c.latency + 1e6 / c.bandwidth;
  std::vector<Seconds> push_ends;
  for (const Event& e : t.events) {
    if (e.name.starts_with("push")) push_ends.push_back(e.end);
  }
  std::ranges::sort(push_ends);
  ASSERT_EQ(push_ends.size(), 2u);
  EXPECT_NEAR(push_ends[0], compute_of(p) + one, 1e-12);
  EXPECT_NEAR(push_ends[1], compute_of(p) + 2 * one, 1e-12);  // not both at 2 · one − latency
}

// Note [Parameter-server transport]: the server answers its ops in the schedule's
// order, even one whose pushes all arrived first.
TEST(Simulate, TheServerAnswersInTheSchedulesOrder) {
  const Profile p = make_profile({{1e-3, 2e-3, 250'000}, {1e-3, 2e-3, 2'500}});
  const Cluster c = parameter_server(2, 1_Gbit, 50_us);
  // Op 0 (layer 0) is ready at the end of the backward, op 1 (layer 1) 2 ms before.
  const Timeline t = simulate(one_period({ps_op(p, {0}), ps_op(p, {1})}, kAnyNumber), p, c,
                              {.iterations = 1, .record_iterations = 1});
  // The last end of each op's pushes, the first start and end of its pulls, the last end.
  struct Ends {
    Seconds pushed = 0, first_answer = 1e9, first_answered = 1e9, last_answered = 0;
  };
  std::array<Ends, 2> op;
  for (const Event& e : t.events) {
    Ends& o = op[e.name.find("layer1") != std::string::npos ? 1 : 0];
    if (e.name.starts_with("push")) o.pushed = std::max(o.pushed, e.end);
    if (e.name.starts_with("pull")) {
      o.first_answer = std::min(o.first_answer, e.start);
      o.first_answered = std::min(o.first_answered, e.end);
      o.last_answered = std::max(o.last_answered, e.end);
    }
  }
  EXPECT_LT(op[1].pushed, op[0].pushed);
  EXPECT_NEAR(op[1].first_answer, op[0].pushed, 1e-12);  // answered when op 0 is
  EXPECT_GT(op[1].first_answered, op[0].last_answered);  // and after it
}

TEST(Simulate, ParameterServerRecordsPushAndPull) {
  const Profile p = make_profile({{1e-3, 2e-3, 1000}, {1e-3, 2e-3, 1000}});
  const Cluster c = parameter_server(2, 1_Gbit, 50_us);
  const Timeline t = simulate(one_period({ps_op(p, {1}), ps_op(p, {0})}), p, c,
                              {.iterations = 3, .record_iterations = 1});
  int pushes = 0, pulls = 0;
  for (const Event& e : t.events) {
    pushes += e.name.starts_with("push layer");
    pulls += e.name.starts_with("pull layer");
  }
  EXPECT_EQ(pushes, 2 * 2);
  EXPECT_EQ(pulls, 2 * 2);
}

// Note [Skew]: the push that completes an exchange's P launches leaves `skew`
// late. Where the server waits for it, every answer is that much later; where it
// queues behind the others' pushes at the server, it costs nothing.
TEST(Simulate, SkewDelaysThePushThatCompletesAnExchange) {
  const Profile p = make_profile({{1e-3, 2e-3, 250'000}});
  const int workers = 4;
  const Cluster in_step = parameter_server(workers, 1_Gbit, 50_us);
  Cluster skewed = in_step;
  skewed.host.skew = 0.3e-3;
  const Seconds one = in_step.latency + 1e6 / in_step.bandwidth;  // one transfer of the layer, alone
  ASSERT_GT((workers - 1) * one, skewed.host.skew + one);  // the late push can hide in the queue
  const auto ends = [&](const CommOp& op, const Cluster& c, std::string_view kind) {
    std::vector<Seconds> out(static_cast<size_t>(workers), -1);
    for (const Event& e : simulate(one_period({op}), p, c, {.iterations = 1, .record_iterations = 1}).events) {
      if (e.name.starts_with(kind)) out[static_cast<size_t>(e.worker)] = e.end;
    }
    return out;
  };

  CommOp staggered = ps_op(p, {0});  // each push arrives as the next leaves
  for (int w = 0; w < workers; ++w) staggered.release_offset.push_back(w * one);
  const auto pushed = ends(staggered, in_step, "push"), pulled = ends(staggered, in_step, "pull");
  const auto pushed_late = ends(staggered, skewed, "push"), pulled_late = ends(staggered, skewed, "pull");
  for (size_t w = 0; w < workers; ++w) {
    const Seconds late = w == workers - 1 ? skewed.host.skew : 0;  // only the last push waits
    EXPECT_NEAR(pushed_late[w], pushed[w] + late, 1e-12) << w;
    EXPECT_NEAR(pulled_late[w], pulled[w] + skewed.host.skew, 1e-12) << w;
  }

  const CommOp together = ps_op(p, {0});
  EXPECT_EQ(ends(together, skewed, "pull"), ends(together, in_step, "pull"));
}

// Local SGD shape: ops only in some iterations of the period; the summary averages
// whole periods.
TEST(Simulate, PeriodAveragesWholePeriods) {
  const Profile p = make_profile({{1e-3, 2e-3, 250'000}, {1e-3, 2e-3, 250'000}});
  const Cluster c = ring(4, 1_Gbit, 50_us);
  CommOp op = whole_layers(p, {0, 1});
  op.kind = OpKind::kAverageParameters;
  Schedule s = one_period({op});
  s.period = 3;
  s.iterations = {{op}, {}, {}};
  const Timeline t = simulate(s, p, c, {.iterations = 10});
  EXPECT_EQ(t.summary.iterations, 6);  // periods 2 and 3; the 10th iteration is partial
  EXPECT_NEAR(t.summary.iteration, compute_of(p) + allreduce_time(c, p.total_bytes()) / 3, 1e-12);
}

// Note [Collectives across sites] (cost/cluster.h): 2 sites x 2 workers at
// 1 Gbit, 0.05 ms inside and 20 Mbit, 20 ms between, written out by hand.
Cluster two_sites_of_two() {
  Cluster c = ring(4, 1_Gbit, 0.05_ms);
  c.topology.sites = sites_shorthand("2x2", 4, 1_Gbit, 0.05_ms);
  c.topology.wan = {.bandwidth = 20_Mbit, .latency = 20_ms};
  return c;
}

TEST(Simulate, AHierarchicalAllReduceTakesItsClosedForm) {
  const Profile p = make_profile({{1e-3, 2e-3, 250'000}, {1e-3, 2e-3, 250'000}});
  const Cluster c = two_sites_of_two();
  const double n = static_cast<double>(p.total_bytes());
  const BytesPerSecond B = 1_Gbit, W = 20_Mbit;
  const Seconds a = 0.05_ms, aw = 20_ms;
  // A step costs a round trip. Each site's ring of two, its leader's broadcast
  // to the other, the two leaders' swap over the WAN: after the backward, behind
  // the barrier.
  const Seconds by_sites = (2 * (2 * a) + n / B) + (2 * a + n / B) + (2 * aw + n / W);
  CommOp op = whole_layers(p, {0, 1});
  op.reach = Reach::kBySites;
  const Timeline t = simulate(one_period({op}), p, c, {.iterations = 6});
  EXPECT_NEAR(t.summary.iteration, compute_of(p) + by_sites, 1e-9);
  // The same over one ring of four crosses the WAN twice per step.
  op.reach = Reach::kAll;
  const Timeline flat = simulate(one_period({op}), p, c, {.iterations = 6});
  EXPECT_NEAR(flat.summary.iteration, compute_of(p) + 6 * (2 * aw) + 1.5 * n / W, 1e-9);
  // Uniform links as before: the cluster without its sites prices the ring at B.
  Cluster uniform = c;
  uniform.topology = {};
  const Timeline before = simulate(one_period({op}), p, uniform, {.iterations = 6});
  EXPECT_NEAR(before.summary.iteration, compute_of(p) + 6 * a + 1.5 * n / B, 1e-12);
}

TEST(Simulate, SiteAveragesBetweenAveragesAcrossSitesTakeTheirClosedForm) {
  const Profile p = make_profile({{1e-3, 2e-3, 250'000}, {1e-3, 2e-3, 250'000}});
  const Cluster c = two_sites_of_two();
  const double n = static_cast<double>(p.total_bytes());
  const BytesPerSecond B = 1_Gbit, W = 20_Mbit;
  const Seconds a = 0.05_ms, aw = 20_ms;
  // Hierarchical local SGD with H = 3: a site average in iterations 0 and 1, an
  // average of every worker by sites in iteration 2.
  CommOp across = whole_layers(p, {0, 1});
  across.kind = OpKind::kAverageParameters;
  across.reach = Reach::kBySites;
  CommOp site = across;
  site.reach = Reach::kSite;
  Schedule s = one_period({});
  s.period = 3;
  s.iterations = {{site}, {site}, {across}};
  ASSERT_NO_THROW(validate(s, p, c.workers));
  const Timeline t = simulate(s, p, c, {.iterations = 12});
  const Seconds in_site = 2 * (2 * a) + n / B;
  const Seconds by_sites = (2 * (2 * a) + n / B) + (2 * a + n / B) + (2 * aw + n / W);
  EXPECT_NEAR(t.summary.iteration, compute_of(p) + (2 * in_site + by_sites) / 3, 1e-9);
}

// Note [Shared cores]: four workers profiled on two cores, whose messages ask
// 0.2 of a core each: beside a message each, a layer has (2 − 4·0.2)/4 = 0.3 of a
// core where it was profiled with 0.5, so it takes s = 5/3 of its time while the
// messages have theirs. wfbp on two layers: layer 1's message (m < bp0) runs
// during the first part of layer 0's backward, which does m/s of its work then
// and the rest at the profile's pace; layer 0's message follows.
TEST(Simulate, MessagesTakeTheirCoresFromTheLayersTheyOverlap) {
  Profile p = make_profile({{1e-3, 2e-3, 10'000}, {1e-3, 2e-3, 10'000}});
  Cluster c = ring(4, 1_Gbit, 10_us);
  c.host.processes = 4;
  c.host.cores = 2;
  c.host.comm_cores = 0.2;
  const Seconds m = allreduce_time(c, p.layers[0].bytes());
  ASSERT_LT(m, p.layers[0].bp);
  const Timeline t = simulate(one_period(per_layer_backward_order(p, false)), p, c,
                              {.iterations = 4, .record_iterations = 2});
  const double s = 5.0 / 3;
  const Seconds bp0 = p.layers[0].bp - m / s + m;
  EXPECT_NEAR(t.summary.iteration, p.forward_time() + p.layers[1].bp + bp0 + m, 1e-12);
  EXPECT_NEAR(t.summary.compute, compute_of(p), 1e-12);  // the profile's, unstretched
  EXPECT_NEAR(t.summary.slowed_compute, compute_of(p) + m - m / s, 1e-12);  // as run
  const auto bp_layer0 = std::find_if(t.events.begin(), t.events.end(),
                                      [](const Event& e) { return e.name == "bp layer0"; });
  ASSERT_NE(bp_layer0, t.events.end());
  EXPECT_NEAR(bp_layer0->end - bp_layer0->start, bp0, 1e-12);
  EXPECT_EQ(t.events.size(), 4u * 2 * 6);  // one event per layer and message, as on a host of no cores
  c.host.comm_cores = 0;
  EXPECT_NEAR(simulate(one_period(per_layer_backward_order(p, false)), p, c, {.iterations = 4}).summary.slowed_compute,
              compute_of(p), 1e-12);
}

// Note [Shared cores], where the cores run out: four workers on four cores whose
// messages ask a whole core each share them evenly, so a layer and a message
// overlapping both advance at half speed. wfbp on two layers: layer 1's message
// (m < bp0) ends at 2m, having let layer 0's backward do m of its work, which
// then ends at full speed, m later than alone; layer 0's message follows, alone
// on idle workers.
TEST(Simulate, LayersAndMessagesShareTheCoresEvenlyWhenTheyRunOut) {
  Profile p = make_profile({{1e-3, 2e-3, 10'000}, {1e-3, 2e-3, 10'000}});
  Cluster c = ring(4, 1_Gbit, 10_us);
  c.host.processes = 4;
  c.host.cores = 4;
  c.host.comm_cores = 1;
  const Seconds m = allreduce_time(c, p.layers[0].bytes());
  ASSERT_LT(m, p.layers[0].bp);
  const Timeline t = simulate(one_period(per_layer_backward_order(p, false)), p, c,
                              {.iterations = 4, .record_iterations = 2});
  EXPECT_NEAR(t.summary.iteration, p.forward_time() + p.layers[1].bp + p.layers[0].bp + m + m, 1e-12);
  EXPECT_NEAR(end_of_last_comm(t, 0), t.summary.iteration, 1e-12);
}

// Note [Shared cores]: where no layer overlaps a message (ssgd's barrier) and
// the cores never run out (a parameter server's one message per worker beside
// the others' layers), nothing changes; where they run out, the iteration grows.
TEST(Simulate, SharedCoresStretchOnlyWhatOverlaps) {
  std::mt19937 rng(4);
  for (int trial = 0; trial < 100; ++trial) {
    Profile p = random_profile(rng);
    const Cluster c = random_ring(rng);
    Host shared;
    shared.processes = shared.cores = c.workers;
    shared.comm_cores = std::uniform_real_distribution(0.0, 1.0)(rng);
    const auto on = [&](Cluster cluster) {
      cluster.host = shared;
      return cluster;
    };
    const Schedule ssgd = one_period({whole_layers(p, all_layers(p))});
    EXPECT_NEAR(simulate(ssgd, p, on(c)).summary.iteration, simulate(ssgd, p, c).summary.iteration, 1e-9);
    const Schedule ps = one_period({ps_op(p, all_layers(p))});
    const Cluster server = parameter_server(c.workers, c.bandwidth, c.latency);
    EXPECT_NEAR(simulate(ps, p, on(server)).summary.iteration, simulate(ps, p, server).summary.iteration, 1e-9);
    const Schedule wfbp = one_period(per_layer_backward_order(p, trial % 4 < 2));
    EXPECT_GE(simulate(wfbp, p, on(c)).summary.iteration, simulate(wfbp, p, c).summary.iteration - 1e-9)
        << "trial " << trial;
  }
}

// Note [Shared cores]: two workers profiled together on one core. Both compute
// the first iteration at the profile's pace; then the server answers worker 0
// first, which computes alone, at twice that pace, until worker 1's answer
// arrives 0.85 ms later (having done 1.7 ms of its 3), then beside worker 1 at
// the profile's pace; worker 1 finishes its last 1.7 ms alone, again at twice it.
TEST(Simulate, AWorkerWaitingForTheNetworkLeavesItsCoreToTheOthers) {
  Profile p = make_profile({{1e-3, 2e-3, 25'000}});
  Cluster c = parameter_server(2, 1_Gbit, 50_us);
  const auto run = [&](const Profile& profile) {
    return simulate(one_period({ps_op(profile, {0})}), profile, c, {.iterations = 2, .record_iterations = 2});
  };
  // Worker w's compute in iteration 1: its first start and last end.
  const auto second_iteration = [](const Timeline& t, int worker) {
    std::pair<Seconds, Seconds> span{1e9, 0};
    for (const Event& e : t.events) {
      if (e.worker != worker || e.iteration != 1 || e.lane != "compute") continue;
      span = {std::min(span.first, e.start), std::max(span.second, e.end)};
    }
    return span;
  };
  const Seconds apart = 50e-6 + 100'000 / c.bandwidth;  // between the two answers' ends
  ASSERT_NEAR(apart, 0.85e-3, 1e-12);

  c.host.processes = 2;
  c.host.cores = 1;
  const Timeline shared = run(p);
  const auto [start0, end0] = second_iteration(shared, 0);
  const auto [start1, end1] = second_iteration(shared, 1);
  EXPECT_NEAR(start1 - start0, apart, 1e-12);
  EXPECT_NEAR(end0 - start0, apart + (compute_of(p) - 2 * apart), 1e-12);
  EXPECT_NEAR(end1 - start1, (end0 - start1) + (compute_of(p) - (end0 - start1)) / 2, 1e-12);
  EXPECT_LT(shared.summary.slowed_compute, compute_of(p));

  c.host.cores = 2;  // a core each: the profile's pace throughout
  const Timeline own = run(p);
  EXPECT_NEAR(second_iteration(own, 0).second - second_iteration(own, 0).first, compute_of(p), 1e-12);
  EXPECT_NEAR(own.summary.slowed_compute, compute_of(p), 1e-12);
}

// Note [Shared cores]: symmetric workers compute in step, so all of them share
// the cores as the profiled processes did, unless there are fewer of them.
TEST(Simulate, FewerWorkersThanProfiledTogetherComputeFaster) {
  Profile p = make_profile({{1e-3, 2e-3, 25'000}, {1e-3, 2e-3, 25'000}});
  Cluster c = ring(4, 1_Gbit, 10_us);
  c.host.processes = 4;
  c.host.cores = 2;
  const Schedule ssgd = one_period({whole_layers(p, all_layers(p))});
  Cluster alone = c;
  alone.host.processes = 0;
  EXPECT_NEAR(simulate(ssgd, p, c).summary.iteration, simulate(ssgd, p, alone).summary.iteration, 1e-12);
  Cluster two = ring(2, 1_Gbit, 10_us);
  two.host = c.host;
  EXPECT_NEAR(simulate(ssgd, p, two).summary.slowed_compute, compute_of(p) / 2, 1e-12);
}

// (h) Invalid schedules are bugs of the scheduler: std::logic_error, never exit.
// Note [Dependencies of an operation] (schedule/index.h): a forward waits for the
// ops that carry its layer whatever their needed_by says, so every valid schedule
// simulates as the one whose needed_by is each op's needed layer; and each runs to
// the end.
TEST(Simulate, EveryValidScheduleFollowsTheIndexsDependencies) {
  std::mt19937 rng(44);
  for (int trial = 0; trial < 60; ++trial) {
    const Profile p = test_support::random_model(rng, 6);
    const Cluster c = ring(std::uniform_int_distribution(2, 4)(rng), std::uniform_real_distribution(1e7, 1e9)(rng),
                           std::uniform_real_distribution(0.0, 1e-4)(rng));
    const Schedule s = test_support::random_valid_schedule(p, c.workers, rng);
    Schedule normalised = s;
    for (auto& ops : normalised.iterations) {
      for (CommOp& op : ops) op.needed_by = needed_layer(op);
    }
    const Timeline as_given = simulate(s, p, c, {.iterations = 2 * s.period + 2});
    const Timeline as_needed = simulate(normalised, p, c, {.iterations = 2 * s.period + 2});
    EXPECT_TRUE(std::isfinite(as_given.summary.iteration)) << "trial " << trial;
    EXPECT_GE(as_given.summary.iteration, as_given.summary.compute - 1e-12) << "trial " << trial;
    EXPECT_DOUBLE_EQ(as_given.summary.iteration, as_needed.summary.iteration) << "trial " << trial;
  }
}

TEST(Simulate, RejectsInvalidSchedules) {
  const Profile p = make_profile({{1e-3, 2e-3, 1000}, {1e-3, 2e-3, 1000}});
  const Cluster c = ring(2, 1_Gbit, 50_us);
  Schedule missing_layer = one_period({whole_layers(p, {0})});
  EXPECT_THROW(simulate(missing_layer, p, c), std::logic_error);
  Schedule bad_period = one_period({whole_layers(p, {0, 1})});
  bad_period.period = 2;
  EXPECT_THROW(simulate(bad_period, p, c), std::logic_error);
  EXPECT_THROW(simulate(one_period({ps_op(p, {0, 1})}), p, c), std::logic_error);  // PS op, ring cluster
  CommOp far_server = ps_op(p, {0, 1});
  far_server.server = 3;
  EXPECT_THROW(simulate(one_period({far_server}), p, parameter_server(2, 1_Gbit, 0)), std::logic_error);
}

TEST(Simulate, BadClusterOrEmptyProfileIsAUsageError) {
  const Profile p = make_profile({{1e-3, 2e-3, 1000}});
  EXPECT_THROW(simulate(one_period({whole_layers(p, {0})}), p, ring(2, 0, 0)), UsageError);
  EXPECT_THROW(simulate(one_period({}), make_profile({}), ring(2, 1_Gbit, 0)), UsageError);
}

}  // namespace
}  // namespace weft
