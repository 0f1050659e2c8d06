#include "sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <numeric>
#include <optional>
#include <queue>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

#include "schedule/dispatcher.h"
#include "schedule/index.h"
#include "schedule/wire_cost.h"
#include "sim/network.h"
#include "units/limits.h"

namespace weft {

// Note [Compute segments]
// -----------------------
// Rule: a worker's stream runs ahead without consulting the clock — the forward
// of a layer whose operations are complete and the whole backward are laid out
// back to back in one segment with one event at its end; only a forward still
// waiting for communication, and an iteration's start, need an event. The
// backward's releases are still queued at their exact times, so the network and
// the Dispatchers see them in order. Why: a barrier schedule costs about one event
// per iteration instead of 2L. Anything that changes a layer's pace mid-segment
// (the Notes below) makes a segment one layer long.

// Note [Shared cores]
// -------------------
// Rule (docs/cost-model.md §7.3): each machine's `cores` are shared weighted
// max-min fairly among its computing workers (one core asked each, weight 1)
// and its messages in flight (comm_cores asked each at comm_weight, one per
// worker of a collective, one per push or answer on the network); core_shares
// (cost/host.h) turns that into how slowly layers and messages advance. Invariant: the shares change only when a
// worker starts or stops computing or a message starts or ends, so a layer in
// progress is re-timed then (the work left is kept, a generation count makes
// the old end stale), and every flow of the machine re-stretched; a collective
// advances at its slowest machine's pace. Why: where the same cores compute and
// move the bytes (TCP, Gloo's copies and sums) each slows the other, and a
// worker waiting for the network leaves its core to the others.

// Note [Skew]
// ------------
// Rule (docs/cost-model.md §7.3): a collective starts no earlier than `skew`
// after the last of its ops became ready; where rank 0 announces it
// (decided_by_timing, schedule/schedule.h), no earlier than `back_to_back_skew`
// after it was launched; and never before the collective launched before it (the
// late worker issues them in order). The skew grows by `drift` times the compute
// beyond an iteration's a worker did since the workers were last held together
// (local SGD's periods), and a collective launched while its cores are all
// taken (cores_taken, cost/host.h) starts `core_wait` later still: the
// scheduler wakes its steps late. The push that completes a parameter server's exchange
// leaves `skew` after its launch (no drift: the workers meet at every exchange).
// The wait uses no bytes and no cores; the trace shows it inside the
// collective, as a measured trace does. Why: the simulated workers are in step
// (one stands for all, Note [Symmetric all-reduce workers]) where real ones
// sharing cores are not. `skew` is measured after a whole iteration, S-SGD's
// distance between meetings, and stands for less compute too: processes that
// outnumber their cores leave a meeting in turns, so the last is late after a
// forward alone nearly as much as after an iteration.

// Note [Collectives in flight]
// ----------------------------
// Rule (docs/cost-model.md §7.2): under a measured fit at most
// FittedAllReduce::concurrent collectives move at once; one due beyond that waits,
// in issue order, for the first to end, and the moving ones share the link in
// proportion to their bytes (allreduce_flow's weights: each ring step moves n/P
// bytes in turn), and the cores (Note [Shared cores]). The α–β model, for other
// transports, keeps plain fair sharing and no limit. Why: Gloo runs each
// collective of a group on one of its few threads, to its end. Messages in a
// lossy encoding, and sums by sites, move one at a time under any model: the
// runtime runs them one after another on their codec's thread
// (runtime/comm/codecs.h) or the sites' (Note [Sum by sites] in
// runtime/comm/sites.h).

// Note [Parameter-server transport]
// ----------------------------------
// Rule (docs/cost-model.md §7.2): a worker's pushes to one server take turns in
// the order sent; a server answers its ops in the schedule's order, an op once all
// P pushes of it are in and the ops before it are answered; its answers leave one
// after another, each paying its own start-up after the one before. Why: that is
// what runtime/comm/parameter_server.cc does over Gloo's one connection per pair, and
// tbf is one FIFO; an early-answered worker computes while the others wait.

// Note [Symmetric all-reduce workers]
// -----------------------------------
// In an all-reduce cluster every worker runs the same profile, and a collective
// starts only when every worker has launched it and ends for all at once. If, in
// addition, every operation releases at the same offset on every worker, then all
// workers make the same ops ready at the same instants, their Dispatchers (a
// deterministic function of that input) launch the same messages at the same
// instants, and every worker's compute stream runs in lock-step. The simulator then
// runs one representative worker, whose launch alone starts a collective, and copies
// its recorded events to the others. The result is identical to simulating all P
// workers, at 1/P of the cost. This is a property of the executor, decided from the
// schedule's data (architecture and release offsets), never from the strategy name:
// see Note [One schedule, two executors] in schedule/schedule.h.

namespace {

// Note [No spinning]: network advances in a row that may change nothing.
constexpr int kMaxIdleRounds = 16;

enum class EventKind : std::uint8_t {
  kSegmentDone,  // the worker's compute stream is free
  kBackwardEnd,  // `op` = {iteration, layer}: release that layer's ops without offset
  kRelease,      // `op`: its release offset has passed
  kCollectiveDue,  // `op.iteration`: the collective of that sequence number may start (Note [Skew])
  kPushDue,        // `op.iteration`: the part whose push may now leave (Note [Skew])
};

struct QueuedEvent {
  Seconds time;
  std::uint64_t seq;  // FIFO among equal times, so runs are deterministic
  int worker;
  EventKind kind;
  OpRef op;
  std::uint64_t generation;  // kSegmentDone: stale unless the worker's current one
};

struct Later {
  bool operator()(const QueuedEvent& a, const QueuedEvent& b) const {
    return a.time > b.time || (a.time == b.time && a.seq > b.seq);
  }
};

bool symmetric_workers(const Schedule& schedule, const Cluster& cluster) {
  if (cluster.arch != Arch::kAllReduce) return false;
  for (const auto& ops : schedule.iterations) {
    for (const CommOp& op : ops) {
      const auto& r = op.release_offset;
      if (std::adjacent_find(r.begin(), r.end(), std::not_equal_to<>()) != r.end()) return false;
    }
  }
  return true;
}

const Cluster& validated(const Cluster& cluster) {
  validate(cluster);
  return cluster;
}

// The schedule's index, once validate() has accepted the schedule for the model.
ScheduleIndex validated_index(const Schedule& schedule, const Profile& profile, int workers) {
  if (profile.size() == 0) throw UsageError(fmt::format("profile '{}': no layers to simulate", profile.model));
  validate(schedule, profile, workers);
  return ScheduleIndex(schedule, profile.size());
}

// Whether the schedule averages parameters (local SGD; Note [The workers' own step]).
bool averages_parameters(const Schedule& schedule) {
  for (int t = 0; t < schedule.period; ++t) {
    for (const CommOp& op : schedule.ops(t)) {
      if (op.kind == OpKind::kAverageParameters) return true;
    }
  }
  return false;
}

// Default length of a run: one warm-up period, then whole periods for at least ~10
// iterations, and never fewer than two measured periods.
// Note [Bounded simulation]
// A run handles about iterations × (operations + layers) events per simulated
// worker (one when the workers are symmetric, else every worker). Each bound on
// its own (limits.h) allows products that would run for days, so the product is
// bounded too, before anything is allocated: a minute or so of work at most.

int default_iterations(int period) { return period * (1 + std::max(2, (10 + period - 1) / period)); }

class Simulation {
 public:
  Simulation(const Schedule& schedule, const Profile& profile, const Cluster& cluster,
             const SimOptions& options);
  Timeline run();

 private:
  // THROWS UsageError if the run would handle more than limits::kMaxSimulatedEvents
  // events (Note [Bounded simulation]).
  void check_work(const Schedule& schedule, const Profile& profile) const;
  // ---- compute stream ----
  struct Worker {
    explicit Worker(const Schedule& schedule) : dispatcher(schedule) {}
    Dispatcher dispatcher;
    int iteration = 0;
    int step = 0;  // 0..L-1: forward of layer `step`; L..2L-1: backward of 2L-1-step
    bool computing = false;
    bool finished = false;  // reached the start of iteration `iterations_`
    // unfinished[t % 2][layer]: ops of iteration t needed by that layer's forward
    // (Note [Dependencies of an operation], schedule/index.h) not complete here.
    std::vector<int> unfinished[2];
    int collectives_launched = 0;
    // Note [Skew]: when each op not yet launched became ready, and how long the
    // worker had been computing out of step then; by op_key().
    struct Ready {
      Seconds at;
      Seconds apart;
    };
    std::unordered_map<std::int64_t, Ready> ready_at;
    Seconds in_step_since = 0;  // Note [Skew]: it last started a forward that needed communication
    std::vector<bool> comm_lane_busy;
    bool holds_core = false;  // Note [Shared cores]: counted in its machine's `computing`
    std::uint64_t generation = 0;  // of the kSegmentDone that ends the current segment
    struct {                       // the layer of a one-layer segment
      int iteration = 0;
      int layer = 0;
      bool forward = true;
      Seconds start = 0;
      Seconds work_left = 0;  // its profiled time not yet done
      Seconds since = 0;      // when work_left was last brought up to date
    } running;
  };

  // ---- all-reduce ----
  struct Collective {
    std::vector<Message> messages;  // per simulated worker
    int launched = 0;
    bool done = false;
    Seconds start = 0;
    std::vector<int> lane;  // per simulated worker
    Network::FlowId flow = -1;  // once started
  };

  // ---- parameter server ----
  // A message a worker sent to the servers: one Part per server it touches.
  struct PsMessage {
    int worker = 0;
    Message message;
    int parts_left = 0;
    int lane = 0;
  };
  struct Part {
    int message = 0;  // index into ps_messages_
    int server = 0;
    Bytes bytes = 0;
    std::vector<OpRef> ops;
    int waiting = 0;  // ops whose P pushes have not all arrived
    Seconds start = 0;
    Seconds leaves = 0;  // its push leaves no earlier (Note [Skew])
    Network::FlowId flow = -1;  // its push or pull, while one is on the network
  };
  struct ServerOp {
    int launched = 0;                // its pushes launched so far
    std::vector<int> waiting_parts;  // the parts holding it whose pushes arrived, one per worker
  };
  // Note [Parameter-server transport]: messages that take turns, in order.
  struct Channel {
    std::deque<int> queued;  // parts
    bool busy = false;
  };

  struct FlowTag {
    enum class Kind : std::uint8_t { kCollective, kPush, kPull } kind;
    int id;
  };

  void push_event(Seconds time, int worker, EventKind kind, OpRef op = {}, std::uint64_t generation = 0) {
    queue_.push({time, next_seq_++, worker, kind, op, generation});
  }

  int worker_id(int w) const { return w; }  // simulated worker w is rank w
  bool forward_may_start(const Worker& w) const;
  // Whether the forward of `layer` waits for some op of iteration t.
  bool needs_communication(int t, int layer) const { return blockers(t)[static_cast<size_t>(layer)] > 0; }
  // Layer -> how many ops of iteration t the forward of that layer is the first to wait for.
  const std::vector<int>& blockers(int t) const { return blockers_[static_cast<size_t>(t) % blockers_.size()]; }
  void try_start(int w, Seconds now);
  // Step s of an iteration's stream (0..2L−1) computes the forward of layer s, then
  // the backward of layer 2L−1−s.
  int layer_at(int step) const { return step < layers_ ? step : 2 * layers_ - 1 - step; }
  Seconds layer_time(int layer, bool forward) const {
    const Layer& spec = profile_.layers[static_cast<size_t>(layer)];
    return forward ? spec.fp : spec.bp;
  }
  void layer_done(int w, int iteration, int layer, bool forward, Seconds start, Seconds end);
  void start_layer(int w, Seconds now);
  void end_layer(int w, Seconds now);
  void retime_layer(int w, double before, double after, Seconds now);
  // Note [Shared cores]
  int machine_of(int w) const { return w / machine_workers_; }
  double compute_stretch(int w) const { return machines_[static_cast<size_t>(machine_of(w))].shares.compute; }
  double message_stretch(int w) const { return machines_[static_cast<size_t>(machine_of(w))].shares.message; }
  double collective_stretch() const;
  void count_computing(int w, Seconds now);
  void count_in_flight(int w, int delta, Seconds now);
  void reshare(int machine, Seconds now);
  bool room_for_collective(int seq) const;
  bool serial(int seq) const;
  void start_held_collectives(Seconds now);
  void on_iteration_start(int w, int iteration, Seconds now);
  void schedule_releases(int w, int iteration, int layer, Seconds backward_end);
  void on_backward_end(int w, int iteration, int layer, Seconds now);
  void release(int w, OpRef op, Seconds now);
  static std::int64_t op_key(OpRef op) { return (std::int64_t{op.iteration} << 32) | op.index; }
  void pump(int w, Seconds now);
  void complete_op(int w, OpRef op, Seconds now);

  void launch_collective(int w, Message message, Seconds now);
  Seconds skew_due(int seq, Collective& c, Seconds launched);
  void start_collective(int seq, Seconds now);
  Flow encoded_flow(const Message& message) const;
  Flow encoded_ps_flow(const Part& part, bool push) const;
  void on_collective_done(int seq, Seconds now);
  void launch_ps(int w, Message message, Seconds now);
  Channel& push_channel(const Part& part);
  Channel& answer_channel(const Part& part);
  void send(Channel& channel, int part, void (Simulation::*start)(int, Seconds), Seconds now);
  void next_in_turn(Channel& channel, void (Simulation::*start)(int, Seconds), Seconds now);
  void push_when_due(int part, Seconds now);
  void start_push(int part, Seconds now);
  void on_push_done(int part, Seconds now);
  void answer_in_order(int server, Seconds now);
  OpRef next_op_of(int server, OpRef op) const;
  void start_pull(int part, Seconds now);
  void on_pull_done(int part, Seconds now);

  void tag_flow(Network::FlowId id, FlowTag tag);
  ServerOp& server_op(OpRef op);
  int take_lane(int w);
  const std::string& lane_name(int lane);
  bool recording(int iteration) const { return iteration < options_.record_iterations; }
  std::string describe(const Message& message) const;
  int single_layer(const Message& message) const;
  void record(int w, std::string lane, std::string name, Seconds start, Seconds end,
              const Message& message);
  std::vector<Seconds> link_busy(Seconds now) const;
  [[noreturn]] void deadlock(Seconds now) const;
  Summary summarise() const;

  const Schedule& schedule_;
  const Profile& profile_;
  const Cluster& cluster_;
  const Host& host_;  // cluster_.host
  SimOptions options_;
  int layers_;
  int iterations_;
  int workers_;      // P
  int sim_workers_;  // P, or 1 under Note [Symmetric all-reduce workers]
  // Note [Shared cores]: workers per machine; each machine's computing workers
  // and messages in flight (a simulated worker counting for those it stands for),
  // and the shares they have.
  struct Machine {
    int computing = 0;
    int messages = 0;
    CoreShares shares;
  };
  int machine_workers_;
  int stands_for_;  // workers of its machine each simulated worker stands for
  std::vector<Machine> machines_;
  bool one_layer_segments_;  // Note [Shared cores]
  bool skewed_;              // Note [Skew]: some skew, and collectives to delay
  Seconds iteration_compute_;  // Note [Skew]: the compute over which `skew` was measured
  int warmup_end_;   // the measured span is [start of warmup_end_, start of measure_end_)
  int measure_end_;
  // What each op waits for and each forward needs (schedule/index.h).
  ScheduleIndex index_;

  std::vector<Worker> workers_state_;
  Network network_;
  std::priority_queue<QueuedEvent, std::vector<QueuedEvent>, Later> queue_;
  std::uint64_t next_seq_ = 0;
  std::vector<FlowTag> flow_tags_;

  std::deque<Collective> collectives_;
  int collective_base_ = 0;
  Seconds last_due_ = 0;  // Note [Skew]
  bool announced_ = false;  // Note [Skew]: rank 0 announces each collective
  // Note [The workers' own step]
  bool averages_after_step_ = false;
  bool drains_ = false;
  std::vector<std::vector<int>> blockers_;  // [iteration of the period]: index_'s, or all at layer 0 where drains_
  // Note [Collectives in flight]
  int transport_limit_ = 0;  // collectives the transport runs at once; 0 = any number
  int collectives_moving_ = 0;
  int serial_moving_ = 0;  // of them, run one at a time (serial())
  std::deque<int> collectives_held_;  // sequence numbers, in issue order

  std::vector<PsMessage> ps_messages_;
  std::vector<int> free_ps_messages_;
  std::vector<Part> parts_;
  std::vector<int> free_parts_;
  std::vector<std::vector<ServerOp>> server_ops_;  // [global iteration][op index]
  std::vector<OpRef> next_answer_;          // [server]: the op it answers next
  std::vector<Channel> push_channels_;      // [worker × servers + server]
  std::vector<Channel> answer_channels_;    // [server]

  std::vector<Seconds> iteration_start_;  // max over workers
  std::vector<int> started_;              // workers that started each iteration
  std::vector<Seconds> busy_at_warmup_end_;
  std::vector<Seconds> busy_at_measure_end_;
  int finished_workers_ = 0;
  Seconds measured_compute_ = 0;  // the simulated workers' layers in the measured span
  std::vector<std::string> lane_names_;
  std::vector<Event> events_;
};

Simulation::Simulation(const Schedule& schedule, const Profile& profile, const Cluster& cluster,
                       const SimOptions& options)
    : schedule_(schedule),
      profile_(profile),
      cluster_(cluster),
      host_(cluster.host),
      options_(options),
      layers_(profile.size()),
      workers_(cluster.workers),
      machine_workers_(std::max(1, cluster.host.processes)),
      one_layer_segments_(cluster.host.cores > 0 && cluster.host.processes > 0),
      skewed_((cluster.host.skew > 0 || cluster.host.back_to_back_skew > 0 || cluster.host.drift > 0 ||
               cluster.host.core_wait > 0) &&
              cluster.arch == Arch::kAllReduce),
      iteration_compute_(profile.forward_time() + profile.backward_time()),
      index_(validated_index(schedule, profile, cluster.workers)),
      network_(links_of(validated(cluster))) {
  if (cluster.fitted) transport_limit_ = cluster.fitted->concurrent;
  announced_ = decided_by_timing(schedule.dispatch);
  const bool outside = cluster.steps_outside && cluster.arch == Arch::kAllReduce;
  averages_after_step_ = outside && averages_parameters(schedule);
  drains_ = outside && !averages_after_step_;
  for (int t = 0; t < schedule.period; ++t) {
    std::vector<int> b = index_.at(t).blockers;
    if (drains_) {
      const int all = std::accumulate(b.begin(), b.end(), 0);
      b.assign(b.size(), 0);
      b.front() = all;
    }
    blockers_.push_back(std::move(b));
  }
  if (options.iterations < 0 || options.record_iterations < 0) {
    throw UsageError(fmt::format("--iterations {} / record {}: need >= 0", options.iterations,
                                 options.record_iterations));
  }
  const int period = schedule.period;
  iterations_ = options.iterations > 0 ? options.iterations : default_iterations(period);
  // Average over whole periods after one warm-up period, when there is room for both;
  // short runs average over what they have.
  warmup_end_ = iterations_ >= 2 * period ? period : 0;
  measure_end_ = iterations_ >= period ? iterations_ / period * period : iterations_;

  sim_workers_ = symmetric_workers(schedule, cluster) ? 1 : workers_;
  check_work(schedule, profile);
  stands_for_ = sim_workers_ == 1 ? std::min(workers_, machine_workers_) : 1;
  machines_.resize(static_cast<size_t>((sim_workers_ + machine_workers_ - 1) / machine_workers_));
  for (Machine& m : machines_) m.shares = core_shares(host_, 0, 0);

  for (int i = 0; i < period; ++i) {
    const auto& ops = schedule.iterations[static_cast<size_t>(i)];
    for (int k = 0; k < static_cast<int>(ops.size()); ++k) {
      const CommOp& op = ops[static_cast<size_t>(k)];
      const bool ps = op.kind == OpKind::kParameterServer;
      if (ps != (cluster.arch == Arch::kParameterServer)) {
        throw std::logic_error(fmt::format(
            "schedule '{}': iteration {} op {} is {} but the cluster is {}", schedule.strategy, i,
            k, to_string(op.kind), to_string(cluster.arch)));
      }
      if (ps && (op.server < 0 || op.server >= cluster.servers)) {
        throw std::logic_error(fmt::format("schedule '{}': iteration {} op {} uses server {} of {}",
                                           schedule.strategy, i, k, op.server, cluster.servers));
      }
    }
  }

  workers_state_.reserve(static_cast<size_t>(sim_workers_));
  for (int w = 0; w < sim_workers_; ++w) {
    workers_state_.emplace_back(schedule);
    for (auto& slot : workers_state_.back().unfinished) slot.assign(static_cast<size_t>(layers_), 0);
  }
  iteration_start_.assign(static_cast<size_t>(iterations_) + 1, 0);
  started_.assign(static_cast<size_t>(iterations_) + 1, 0);
  if (cluster.arch == Arch::kParameterServer) {
    server_ops_.resize(static_cast<size_t>(iterations_));
    push_channels_.resize(static_cast<size_t>(workers_) * static_cast<size_t>(cluster.servers));
    answer_channels_.resize(static_cast<size_t>(cluster.servers));
    for (int s = 0; s < cluster.servers; ++s) next_answer_.push_back(next_op_of(s, {.iteration = 0, .index = -1}));
  }
}

void Simulation::check_work(const Schedule& schedule, const Profile& profile) const {
  double operations = 0;
  for (const std::vector<CommOp>& ops : schedule.iterations) operations += static_cast<double>(ops.size());
  operations /= static_cast<double>(std::max<std::size_t>(schedule.iterations.size(), 1));
  const double per_iteration = (operations + profile.size()) * sim_workers_;
  const double events = per_iteration * iterations_;
  if (events <= limits::kMaxSimulatedEvents) return;
  throw UsageError(fmt::format(
      "{} iterations of {} operations and {} layers{} are about {:.3g} events to simulate, more than the {:.3g} "
      "weft simulates (about a minute); give fewer iterations (at most {}), or fewer layers or messages "
      "(a coarser --partition) (docs/limits.md)",
      iterations_, operations, profile.size(),
      sim_workers_ > 1 ? fmt::format(" on each of {} workers", sim_workers_) : "", events,
      limits::kMaxSimulatedEvents, static_cast<std::int64_t>(limits::kMaxSimulatedEvents / per_iteration)));
}

Timeline Simulation::run() {
  for (int w = 0; w < sim_workers_; ++w) try_start(w, 0);
  // Note [No spinning]: each round pops an event or advances the network; a
  // network advance that finishes no flow, at a time that its next event then
  // equals, makes no progress. A few in a row are flows beginning their transfer
  // at that instant; more mean times the doubles cannot tell apart (the inputs'
  // bounds, docs/limits.md, keep them from arising): an error, not a hang.
  int idle_rounds = 0;
  while (finished_workers_ < sim_workers_) {
    const Seconds net_time = network_.next_event();
    if (net_time == Network::kNever && queue_.empty()) deadlock(network_.time());
    // Network events first on ties: a message ending at the instant a layer ends is
    // seen by whatever that layer's end decides.
    if (queue_.empty() || net_time <= queue_.top().time) {
      const std::vector<Network::FlowId>& done = network_.advance(net_time);
      idle_rounds = done.empty() && !(network_.next_event() > net_time) ? idle_rounds + 1 : 0;
      if (idle_rounds > kMaxIdleRounds) {
        throw std::runtime_error(fmt::format(
            "schedule '{}': the simulation stopped advancing at {} s (times too large or too close for a double)",
            schedule_.strategy, net_time));
      }
      for (Network::FlowId id : done) {
        const FlowTag tag = flow_tags_[static_cast<size_t>(id)];
        switch (tag.kind) {
          case FlowTag::Kind::kCollective: on_collective_done(tag.id, net_time); break;
          case FlowTag::Kind::kPush: on_push_done(tag.id, net_time); break;
          case FlowTag::Kind::kPull: on_pull_done(tag.id, net_time); break;
        }
      }
      continue;
    }
    const QueuedEvent e = queue_.top();
    queue_.pop();
    idle_rounds = 0;
    switch (e.kind) {
      case EventKind::kSegmentDone: {
        Worker& w = workers_state_[static_cast<size_t>(e.worker)];
        if (e.generation != w.generation) break;  // re-timed since
        w.computing = false;
        if (one_layer_segments_) end_layer(e.worker, e.time);
        try_start(e.worker, e.time);
        count_computing(e.worker, e.time);  // if it stays idle
        break;
      }
      case EventKind::kBackwardEnd:
        on_backward_end(e.worker, e.op.iteration, e.op.index, e.time);
        pump(e.worker, e.time);
        break;
      case EventKind::kRelease:
        release(e.worker, e.op, e.time);
        pump(e.worker, e.time);
        break;
      case EventKind::kCollectiveDue:
        start_collective(e.op.iteration, e.time);
        break;
      case EventKind::kPushDue:
        start_push(e.op.iteration, e.time);
        break;
    }
  }

  Timeline timeline;
  timeline.source = "simulated";
  timeline.strategy = schedule_.strategy;
  for (int w = 0; w < workers_; ++w) timeline.process_names.push_back(fmt::format("worker {}", w));
  if (sim_workers_ == 1 && workers_ > 1 && !events_.empty()) {
    // Note [Symmetric all-reduce workers]: every worker did what worker 0 did.
    const size_t n = events_.size();
    events_.reserve(n * static_cast<size_t>(workers_));
    for (int w = 1; w < workers_; ++w) {
      for (size_t i = 0; i < n; ++i) {
        events_.push_back(events_[i]);
        events_.back().worker = w;
      }
    }
  }
  timeline.events = std::move(events_);
  timeline.summary = summarise();
  return timeline;
}

// ---- compute stream ----

bool Simulation::forward_may_start(const Worker& w) const {
  if (w.iteration == 0) return true;
  return w.unfinished[(w.iteration - 1) % 2][static_cast<size_t>(w.step)] == 0;
}

// Lays out the next segment of the stream (Note [Compute segments]).
void Simulation::try_start(int wi, Seconds now) {
  Worker& w = workers_state_[static_cast<size_t>(wi)];
  if (w.computing || w.finished) return;
  if (w.step < layers_ && !forward_may_start(w)) return;
  const int t = w.iteration;
  if (w.step == 0) {
    on_iteration_start(wi, t, now);
    if (t == iterations_) {
      w.finished = true;
      ++finished_workers_;
      return;
    }
  }
  if (one_layer_segments_) return start_layer(wi, now);
  Seconds time = now;
  do {
    const bool forward = w.step < layers_;
    const int layer = layer_at(w.step);
    const Seconds end = time + layer_time(layer, forward);
    layer_done(wi, t, layer, forward, time, end);
    time = end;
    ++w.step;
  } while (w.step < 2 * layers_ && (w.step >= layers_ || forward_may_start(w)));
  if (w.step == 2 * layers_) {
    w.step = 0;
    ++w.iteration;
  }
  w.computing = true;
  push_event(time, wi, EventKind::kSegmentDone, {}, ++w.generation);
}

// A segment of one layer (Note [Shared cores]).
void Simulation::start_layer(int wi, Seconds now) {
  Worker& w = workers_state_[static_cast<size_t>(wi)];
  const bool forward = w.step < layers_;
  const int layer = layer_at(w.step);
  w.running = {.iteration = w.iteration, .layer = layer, .forward = forward, .start = now,
               .work_left = layer_time(layer, forward), .since = now};
  if (++w.step == 2 * layers_) {
    w.step = 0;
    ++w.iteration;
  }
  w.computing = true;
  count_computing(wi, now);
  push_event(now + w.running.work_left * compute_stretch(wi), wi, EventKind::kSegmentDone, {}, ++w.generation);
}

void Simulation::end_layer(int wi, Seconds now) {
  const auto& r = workers_state_[static_cast<size_t>(wi)].running;
  layer_done(wi, r.iteration, r.layer, r.forward, r.start, now);
}

// A layer's compute spans [start, end]: its trace event, and after a backward the
// releases of the ops it makes ready.
void Simulation::layer_done(int wi, int t, int layer, bool forward, Seconds start, Seconds end) {
  if (t >= warmup_end_ && t < measure_end_) measured_compute_ += end - start;
  if (forward && t > 0 && needs_communication(t - 1, layer)) {
    workers_state_[static_cast<size_t>(wi)].in_step_since = start;  // Note [Skew]
  }
  if (recording(t)) {
    events_.push_back({.worker = worker_id(wi), .lane = "compute",
                       .name = (forward ? "fp " : "bp ") + profile_.layers[static_cast<size_t>(layer)].name,
                       .start = start, .end = end, .iteration = t, .layer = layer, .bytes = 0});
  }
  if (forward) return;
  // Note [The workers' own step]
  // -----------------------------
  // Rule: with cluster.steps_outside (all-reduce), a schedule of parameter
  // averages has every layer's operations released when layer 0's backward
  // ends, in the backward's order; a schedule of gradients has its operations
  // released as each layer's backward ends, as ever, but the next iteration's
  // first forward waits for all of them (every op's needed layer counts as 0).
  // Why: there the workers' own optimizer steps once the backward has returned
  // (weft.DataParallel's update="ddp"). The runtime makes every layer ready
  // after that step (Engine::stepped_outside) under local SGD; under S-SGD the
  // backward returns only when every gradient is averaged, so the next forward
  // overlaps none of its messages, whatever order they left in.
  if (!averages_after_step_) {
    schedule_releases(wi, t, layer, end);
  } else if (layer == 0) {
    for (int l = layers_ - 1; l >= 0; --l) schedule_releases(wi, t, l, end);
  }
}

// A layer in progress whose rate changes from 1/before to 1/after of its profiled
// time: the work left is kept, its new end queued, the old one made stale.
void Simulation::retime_layer(int wi, double before, double after, Seconds now) {
  Worker& w = workers_state_[static_cast<size_t>(wi)];
  auto& r = w.running;
  r.work_left = std::max(0.0, r.work_left - (now - r.since) / before);
  r.since = now;
  push_event(now + r.work_left * after, wi, EventKind::kSegmentDone, {}, ++w.generation);
}

// Note [Shared cores]: worker wi may have started or stopped computing.
void Simulation::count_computing(int wi, Seconds now) {
  Worker& w = workers_state_[static_cast<size_t>(wi)];
  if (w.computing == w.holds_core) return;
  w.holds_core = w.computing;
  machines_[static_cast<size_t>(machine_of(wi))].computing += w.computing ? stands_for_ : -stands_for_;
  reshare(machine_of(wi), now);
}

// Note [Shared cores]: worker wi's messages on the network change by `delta`.
void Simulation::count_in_flight(int wi, int delta, Seconds now) {
  machines_[static_cast<size_t>(machine_of(wi))].messages += delta * stands_for_;
  reshare(machine_of(wi), now);
}

// Note [Shared cores]: the machine's shares follow its counts; its layers in
// progress are re-timed and its flows re-stretched where they change.
void Simulation::reshare(int machine, Seconds now) {
  Machine& m = machines_[static_cast<size_t>(machine)];
  const CoreShares before = m.shares;
  m.shares = core_shares(host_, m.computing, m.messages);
  if (m.shares.compute != before.compute) {
    const int first = machine * machine_workers_;
    for (int v = first; v < std::min(sim_workers_, first + machine_workers_); ++v) {
      const Worker& w = workers_state_[static_cast<size_t>(v)];
      if (w.holds_core) retime_layer(v, before.compute, m.shares.compute, now);
    }
  }
  if (m.shares.message == before.message) return;
  if (cluster_.arch == Arch::kAllReduce) {
    const double stretch = collective_stretch();
    for (const Collective& c : collectives_) {
      // A flow that ended at `now` may not have been handled yet; one held has none.
      if (!c.done && network_.in_flight(c.flow)) network_.set_stretch(c.flow, stretch, now);
    }
    return;
  }
  for (const Part& part : parts_) {
    const int worker = ps_messages_[static_cast<size_t>(part.message)].worker;
    if (network_.in_flight(part.flow) && machine_of(worker) == machine) {
      network_.set_stretch(part.flow, m.shares.message, now);
    }
  }
}

// A collective moves at the pace of its slowest machine.
double Simulation::collective_stretch() const {
  double stretch = 1;
  for (const Machine& m : machines_) stretch = std::max(stretch, m.shares.message);
  return stretch;
}

// Note [Collectives in flight]: whether one more collective may move now.
bool Simulation::room_for_collective(int seq) const {
  if (serial_moving_ > 0 && serial(seq)) return false;
  return transport_limit_ == 0 || collectives_moving_ < transport_limit_;
}

// Note [Collectives in flight]: in a lossy encoding, or summed by sites.
bool Simulation::serial(int seq) const {
  const Message& m = collectives_[static_cast<size_t>(seq - collective_base_)].messages[0];
  const CommOp& op = schedule_.ops(m.ops.front().iteration)[static_cast<size_t>(m.ops.front().index)];
  return lossy(op.encoding) || op.reach == Reach::kBySites;
}

// Note [Collectives in flight]: those held start, in issue order, while there is room.
void Simulation::start_held_collectives(Seconds now) {
  while (!collectives_held_.empty() && room_for_collective(collectives_held_.front())) {
    const int next = collectives_held_.front();
    collectives_held_.pop_front();
    start_collective(next, now);
  }
}

void Simulation::on_iteration_start(int wi, int t, Seconds now) {
  Worker& w = workers_state_[static_cast<size_t>(wi)];
  // The slot last held iteration t-2, whose ops all completed before the forward of
  // t-1 could finish.
  w.unfinished[t % 2] = blockers(t);
  iteration_start_[static_cast<size_t>(t)] = std::max(iteration_start_[static_cast<size_t>(t)], now);
  if (++started_[static_cast<size_t>(t)] == sim_workers_) {
    if (t == warmup_end_) busy_at_warmup_end_ = link_busy(now);
    if (t == measure_end_) busy_at_measure_end_ = link_busy(now);
  }
}

void Simulation::schedule_releases(int wi, int t, int layer, Seconds backward_end) {
  bool without_offset = false;
  for (int index : index_.at(t).ready_at[static_cast<size_t>(layer)]) {
    const Seconds offset = schedule_.ops(t)[static_cast<size_t>(index)].release(worker_id(wi));
    if (offset > 0) {
      push_event(backward_end + offset, wi, EventKind::kRelease, {t, index});
    } else {
      without_offset = true;
    }
  }
  // One event for all of them, so that a window policy sees them ready together.
  if (without_offset) push_event(backward_end, wi, EventKind::kBackwardEnd, {t, layer});
}

void Simulation::on_backward_end(int wi, int t, int layer, Seconds now) {
  for (int index : index_.at(t).ready_at[static_cast<size_t>(layer)]) {
    if (schedule_.ops(t)[static_cast<size_t>(index)].release(worker_id(wi)) == 0) release(wi, {t, index}, now);
  }
}

// REQUIRES (Dispatcher): iterations become ready in non-decreasing order. A release
// offset longer than an iteration would break it; schedulers keep offsets within
// the iteration (docs/strategies.md §4.4 slots end by end_comp + half a slot).
void Simulation::release(int wi, OpRef op, Seconds now) {
  Worker& w = workers_state_[static_cast<size_t>(wi)];
  w.dispatcher.ready(op);
  if (skewed_) w.ready_at[op_key(op)] = {.at = now, .apart = now - w.in_step_since};
}

void Simulation::pump(int wi, Seconds now) {
  for (Message& message : workers_state_[static_cast<size_t>(wi)].dispatcher.launch()) {
    if (cluster_.arch == Arch::kAllReduce) {
      launch_collective(wi, std::move(message), now);
    } else {
      launch_ps(wi, std::move(message), now);
    }
  }
}

void Simulation::complete_op(int wi, OpRef op, Seconds now) {
  Worker& w = workers_state_[static_cast<size_t>(wi)];
  const int needed = drains_ ? 0 : index_.at(op.iteration).needed[static_cast<size_t>(op.index)];
  --w.unfinished[op.iteration % 2][static_cast<size_t>(needed)];
  try_start(wi, now);
}

// ---- all-reduce ----

void Simulation::launch_collective(int wi, Message message, Seconds now) {
  Worker& w = workers_state_[static_cast<size_t>(wi)];
  const int seq = w.collectives_launched++;
  while (static_cast<int>(collectives_.size()) <= seq - collective_base_) {
    collectives_.emplace_back();
    collectives_.back().messages.resize(static_cast<size_t>(sim_workers_));
    collectives_.back().lane.resize(static_cast<size_t>(sim_workers_));
  }
  Collective& c = collectives_[static_cast<size_t>(seq - collective_base_)];
  c.messages[static_cast<size_t>(wi)] = std::move(message);
  if (++c.launched < sim_workers_) return;

  // Collectives match by launch order, as in Gloo and NCCL; a worker that fused
  // different ops into its k-th all-reduce would corrupt data in the runtime.
  for (int v = 1; v < sim_workers_; ++v) {
    if (c.messages[static_cast<size_t>(v)].ops != c.messages[0].ops) {
      throw std::logic_error(fmt::format(
          "schedule '{}': all-reduce #{} is [{}] on worker 0 but [{}] on worker {}; all workers "
          "must launch the same collectives in the same order",
          schedule_.strategy, seq, describe(c.messages[0]), describe(c.messages[static_cast<size_t>(v)]), v));
    }
  }
  c.start = now;
  if (recording(c.messages[0].ops.front().iteration)) {
    for (int v = 0; v < sim_workers_; ++v) c.lane[static_cast<size_t>(v)] = take_lane(v);
  }
  const Seconds due = skew_due(seq, c, now);
  if (due > now) {
    push_event(due, 0, EventKind::kCollectiveDue, {.iteration = seq, .index = 0});
  } else {
    start_collective(seq, now);
  }
}

// Note [Skew]: when the last worker has reached collective `c`, which the
// simulated workers launched at `launched`.
Seconds Simulation::skew_due(int seq, Collective& c, Seconds launched) {
  if (!skewed_) return 0;
  Seconds due = launched + (announced_ ? host_.back_to_back_skew : 0);
  for (int v = 0; v < sim_workers_; ++v) {
    auto& ready_at = workers_state_[static_cast<size_t>(v)].ready_at;
    for (OpRef op : c.messages[static_cast<size_t>(v)].ops) {
      const auto it = ready_at.find(op_key(op));
      if (it == ready_at.end()) throw std::logic_error("simulator: a collective launched an op never made ready");
      const auto [ready, apart] = it->second;
      due = std::max(due, ready + host_.skew + host_.drift * std::max(0.0, apart - iteration_compute_));
      ready_at.erase(it);
    }
  }
  if (std::any_of(machines_.begin(), machines_.end(),
                  [&](const Machine& m) { return cores_taken(host_, m.computing, m.messages); })) {
    due += host_.core_wait;
  }
  last_due_ = std::max(last_due_, due);
  return last_due_;
}

// A collective moves its message's wire bytes, after encoding it and before
// decoding it, and pays a start-up per exchange (Note [A message's collectives]
// in schedule/wire_cost.h; docs/compression.md).
Flow Simulation::encoded_flow(const Message& message) const {
  const CommOp& first = schedule_.ops(message.ops.front().iteration)[static_cast<size_t>(message.ops.front().index)];
  // Note [Collectives across sites] (cost/cluster.h): on the links its reach crosses.
  if (!lossy(first.encoding)) return allreduce_flow(cluster_, message.bytes, first.reach);
  std::vector<Chunk> chunks;
  for (const OpRef& ref : message.ops) {
    const auto& op = schedule_.ops(ref.iteration)[static_cast<size_t>(ref.index)];
    chunks.insert(chunks.end(), op.chunks.begin(), op.chunks.end());
  }
  return encoded_allreduce_flow(cluster_, wire_cost(first.encoding, chunks, profile_, host_), first.reach);
}

void Simulation::start_collective(int seq, Seconds now) {
  if (!room_for_collective(seq)) {
    collectives_held_.push_back(seq);  // Note [Collectives in flight]
    return;
  }
  ++collectives_moving_;
  serial_moving_ += serial(seq) ? 1 : 0;
  Collective& c = collectives_[static_cast<size_t>(seq - collective_base_)];
  for (int v = 0; v < sim_workers_; ++v) count_in_flight(v, +1, now);
  c.flow = network_.start(encoded_flow(c.messages[0]), now, collective_stretch());
  tag_flow(c.flow, {FlowTag::Kind::kCollective, seq});
}

void Simulation::on_collective_done(int seq, Seconds now) {
  Collective& c = collectives_[static_cast<size_t>(seq - collective_base_)];
  c.done = true;
  --collectives_moving_;
  serial_moving_ -= serial(seq) ? 1 : 0;
  start_held_collectives(now);
  const bool record_it = recording(c.messages[0].ops.front().iteration);
  for (int v = 0; v < sim_workers_; ++v) {
    const Message& message = c.messages[static_cast<size_t>(v)];
    count_in_flight(v, -1, now);
    if (record_it) {
      const int lane = c.lane[static_cast<size_t>(v)];
      // Named as the runtime names it (Note [Small all-reduces by all-gather] in
      // runtime/comm/process_group.h), so that predicted and measured traces match.
      const bool gathered = cluster_.fitted && summed_by_allgather(message.bytes, cluster_.fitted->gather_below);
      record(v, lane_name(lane), (gathered ? "allgather " : "allreduce ") + describe(message), c.start, now,
             message);
      workers_state_[static_cast<size_t>(v)].comm_lane_busy[static_cast<size_t>(lane)] = false;
    }
    workers_state_[static_cast<size_t>(v)].dispatcher.done(message);
    for (OpRef op : message.ops) complete_op(v, op, now);
  }
  for (int v = 0; v < sim_workers_; ++v) pump(v, now);
  while (!collectives_.empty() && collectives_.front().done) {
    collectives_.pop_front();
    ++collective_base_;
  }
}

// ---- parameter server ----

void Simulation::launch_ps(int wi, Message message, Seconds now) {
  int index;
  if (free_ps_messages_.empty()) {
    index = static_cast<int>(ps_messages_.size());
    ps_messages_.emplace_back();
  } else {
    index = free_ps_messages_.back();
    free_ps_messages_.pop_back();
  }
  PsMessage& m = ps_messages_[static_cast<size_t>(index)];
  m.worker = wi;
  m.message = std::move(message);
  m.parts_left = 0;
  if (recording(m.message.ops.front().iteration)) m.lane = take_lane(wi);

  // One push per server the message touches, in order of first appearance.
  std::vector<int> part_of_server(static_cast<size_t>(cluster_.servers), -1);
  for (OpRef op : m.message.ops) {
    const CommOp& comm = schedule_.ops(op.iteration)[static_cast<size_t>(op.index)];
    int& p = part_of_server[static_cast<size_t>(comm.server)];
    if (p < 0) {
      if (free_parts_.empty()) {
        p = static_cast<int>(parts_.size());
        parts_.emplace_back();
      } else {
        p = free_parts_.back();
        free_parts_.pop_back();
      }
      Part& part = parts_[static_cast<size_t>(p)];
      part = Part{.message = index, .server = comm.server, .bytes = 0, .ops = {}, .waiting = 0,
                  .start = now, .leaves = now};
      ++m.parts_left;
    }
    Part& part = parts_[static_cast<size_t>(p)];
    part.ops.push_back(op);
    part.bytes += comm.bytes();
    // Note [Skew]: the last worker to reach an exchange is late.
    if (++server_op(op).launched == workers_) part.leaves = now + host_.skew;
  }
  for (int p : part_of_server) {
    if (p >= 0) send(push_channel(parts_[static_cast<size_t>(p)]), p, &Simulation::push_when_due, now);
  }
}

Simulation::Channel& Simulation::push_channel(const Part& part) {
  const int worker = ps_messages_[static_cast<size_t>(part.message)].worker;
  return push_channels_[static_cast<size_t>(worker * cluster_.servers + part.server)];
}

Simulation::Channel& Simulation::answer_channel(const Part& part) {
  return answer_channels_[static_cast<size_t>(part.server)];
}

// A part goes on the network at once if its channel is free, else after those
// sent before it.
void Simulation::send(Channel& channel, int p, void (Simulation::*start)(int, Seconds), Seconds now) {
  if (channel.busy) {
    channel.queued.push_back(p);
    return;
  }
  channel.busy = true;
  (this->*start)(p, now);
}

void Simulation::next_in_turn(Channel& channel, void (Simulation::*start)(int, Seconds), Seconds now) {
  if (channel.queued.empty()) {
    channel.busy = false;
    return;
  }
  const int next = channel.queued.front();
  channel.queued.pop_front();
  (this->*start)(next, now);
}

// The channel stays the part's while it waits, so a worker's pushes keep their order.
void Simulation::push_when_due(int p, Seconds now) {
  const Seconds leaves = parts_[static_cast<size_t>(p)].leaves;
  if (leaves > now) {
    push_event(leaves, ps_messages_[static_cast<size_t>(parts_[static_cast<size_t>(p)].message)].worker,
               EventKind::kPushDue, {.iteration = p, .index = 0});
  } else {
    start_push(p, now);
  }
}

// A push or an answer moves its part's wire bytes (Note [Compressed exchanges] in
// runtime/comm/parameter_server.h), and each direction pays the codec's compute for
// its values as start-up: one encode and the decodes, as for a collective
// (schedule/wire_cost.h).
Flow Simulation::encoded_ps_flow(const Part& part, bool push) const {
  const int worker = worker_id(ps_messages_[static_cast<size_t>(part.message)].worker);
  const CommOp& first = schedule_.ops(part.ops.front().iteration)[static_cast<size_t>(part.ops.front().index)];
  WireCost cost{.bytes = part.bytes};
  if (lossy(first.encoding)) {
    std::vector<Chunk> chunks;
    for (const OpRef& ref : part.ops) {
      const auto& op = schedule_.ops(ref.iteration)[static_cast<size_t>(ref.index)];
      chunks.insert(chunks.end(), op.chunks.begin(), op.chunks.end());
    }
    cost = wire_cost(first.encoding, chunks, profile_, host_);
  }
  Flow flow = push ? push_flow(cluster_, worker, part.server, cost.bytes)
                   : pull_flow(cluster_, part.server, worker, cost.bytes);
  flow.startup += cost.compute;
  return flow;
}

void Simulation::start_push(int p, Seconds now) {
  Part& part = parts_[static_cast<size_t>(p)];
  const int worker = ps_messages_[static_cast<size_t>(part.message)].worker;
  count_in_flight(worker, +1, now);
  part.flow = network_.start(encoded_ps_flow(part, /*push=*/true), now, message_stretch(worker));
  tag_flow(part.flow, {FlowTag::Kind::kPush, p});
}

// The server updates an op once all P pushes of it have arrived (instantly, docs/design.md
// §1.2) and it has answered the ops before it; a worker's pull of a part starts
// when every op in it is answered.
void Simulation::on_push_done(int p, Seconds now) {
  Part& part = parts_[static_cast<size_t>(p)];
  part.flow = -1;
  const PsMessage& m = ps_messages_[static_cast<size_t>(part.message)];
  count_in_flight(m.worker, -1, now);
  next_in_turn(push_channel(part), &Simulation::push_when_due, now);
  if (recording(part.ops.front().iteration)) {
    record(m.worker, lane_name(m.lane), fmt::format("push {} to server {}", describe(m.message), part.server),
           part.start, now, Message{part.ops, part.bytes});
  }
  for (OpRef op : part.ops) {
    ++part.waiting;
    server_op(op).waiting_parts.push_back(p);
  }
  answer_in_order(part.server, now);
}

// Note [Parameter-server transport]: the server answers its ops in the schedule's
// order, each to workers 0..P−1.
void Simulation::answer_in_order(int server, Seconds now) {
  OpRef& next = next_answer_[static_cast<size_t>(server)];
  while (next.iteration < iterations_) {
    ServerOp& s = server_op(next);
    if (static_cast<int>(s.waiting_parts.size()) < workers_) return;  // not all pushes are in
    std::ranges::sort(s.waiting_parts, {}, [&](int q) {
      return ps_messages_[static_cast<size_t>(parts_[static_cast<size_t>(q)].message)].worker;
    });
    for (int q : s.waiting_parts) {
      Part& part = parts_[static_cast<size_t>(q)];
      if (--part.waiting > 0) continue;
      part.start = now;
      send(answer_channel(part), q, &Simulation::start_pull, now);
    }
    s.waiting_parts = {};
    next = next_op_of(server, next);
  }
}

// The op of `server` after `op`, in the schedule's order; one past the last
// iteration when there is none.
OpRef Simulation::next_op_of(int server, OpRef op) const {
  for (int t = op.iteration, k = op.index + 1; t < iterations_; ++t, k = 0) {
    const auto& ops = schedule_.ops(t);
    for (; k < static_cast<int>(ops.size()); ++k) {
      if (ops[static_cast<size_t>(k)].server == server) return {.iteration = t, .index = k};
    }
  }
  return {.iteration = iterations_, .index = 0};
}

void Simulation::start_pull(int p, Seconds now) {
  Part& part = parts_[static_cast<size_t>(p)];
  const int worker = ps_messages_[static_cast<size_t>(part.message)].worker;
  count_in_flight(worker, +1, now);
  part.flow = network_.start(encoded_ps_flow(part, /*push=*/false), now, message_stretch(worker));
  tag_flow(part.flow, {FlowTag::Kind::kPull, p});
}

void Simulation::on_pull_done(int p, Seconds now) {
  Part& part = parts_[static_cast<size_t>(p)];
  part.flow = -1;
  const int index = part.message;
  PsMessage& m = ps_messages_[static_cast<size_t>(index)];
  const int wi = m.worker;
  count_in_flight(wi, -1, now);
  if (recording(part.ops.front().iteration)) {
    record(wi, lane_name(m.lane), fmt::format("pull {} from server {}", describe(m.message), part.server),
           part.start, now, Message{part.ops, part.bytes});
  }
  next_in_turn(answer_channel(part), &Simulation::start_pull, now);
  const std::vector<OpRef> ops = std::move(part.ops);
  free_parts_.push_back(p);
  for (OpRef op : ops) complete_op(wi, op, now);
  if (--m.parts_left > 0) return;
  Worker& w = workers_state_[static_cast<size_t>(wi)];
  if (recording(m.message.ops.front().iteration)) w.comm_lane_busy[static_cast<size_t>(m.lane)] = false;
  w.dispatcher.done(m.message);
  free_ps_messages_.push_back(index);
  pump(wi, now);
}

Simulation::ServerOp& Simulation::server_op(OpRef op) {
  auto& ops = server_ops_[static_cast<size_t>(op.iteration)];
  if (ops.empty()) ops.resize(schedule_.ops(op.iteration).size());
  return ops[static_cast<size_t>(op.index)];
}

// ---- bookkeeping ----

void Simulation::tag_flow(Network::FlowId id, FlowTag tag) {
  if (static_cast<size_t>(id) >= flow_tags_.size()) flow_tags_.resize(static_cast<size_t>(id) + 1);
  flow_tags_[static_cast<size_t>(id)] = tag;
}

// Messages in flight at once (credit policy) go on separate lanes, "comm", "comm 2",
// ..., so that trace viewers never see partially overlapping slices on one thread.
int Simulation::take_lane(int wi) {
  auto& busy = workers_state_[static_cast<size_t>(wi)].comm_lane_busy;
  auto free = std::find(busy.begin(), busy.end(), false);
  const int lane = static_cast<int>(free - busy.begin());
  if (free == busy.end()) busy.push_back(true);
  else *free = true;
  return lane;
}

const std::string& Simulation::lane_name(int lane) {
  while (static_cast<int>(lane_names_.size()) <= lane) {
    const size_t k = lane_names_.size();
    lane_names_.push_back(k == 0 ? "comm" : fmt::format("comm {}", k + 1));
  }
  return lane_names_[static_cast<size_t>(lane)];
}

int Simulation::single_layer(const Message& message) const {
  int layer = -1;
  for (OpRef op : message.ops) {
    for (const Chunk& c : schedule_.ops(op.iteration)[static_cast<size_t>(op.index)].chunks) {
      if (layer >= 0 && c.layer != layer) return -1;
      layer = c.layer;
    }
  }
  return layer;
}

// "conv1", "conv1 (4MiB at 8MiB)", "fc..conv1 (12 layers)" or "3 ops".
std::string Simulation::describe(const Message& message) const {
  const int layer = single_layer(message);
  if (layer >= 0) {
    const Layer& l = profile_.layers[static_cast<size_t>(layer)];
    if (message.bytes == l.bytes()) return l.name;
    const Chunk& first = schedule_.ops(message.ops[0].iteration)[static_cast<size_t>(message.ops[0].index)].chunks[0];
    return fmt::format("{} ({} at {})", l.name, format_bytes(message.bytes), format_bytes(first.offset));
  }
  if (message.ops.size() > 1) return fmt::format("{} ops", message.ops.size());
  int lo = layers_, hi = -1;
  for (const Chunk& c : schedule_.ops(message.ops[0].iteration)[static_cast<size_t>(message.ops[0].index)].chunks) {
    lo = std::min(lo, c.layer);
    hi = std::max(hi, c.layer);
  }
  return fmt::format("{}..{} ({} layers)", profile_.layers[static_cast<size_t>(hi)].name,
                     profile_.layers[static_cast<size_t>(lo)].name, hi - lo + 1);
}

void Simulation::record(int wi, std::string lane, std::string name, Seconds start, Seconds end,
                        const Message& message) {
  events_.push_back({.worker = worker_id(wi), .lane = std::move(lane), .name = std::move(name),
                     .start = start, .end = end, .iteration = message.ops.front().iteration,
                     .layer = single_layer(message), .bytes = message.bytes});
}

std::vector<Seconds> Simulation::link_busy(Seconds now) const {
  std::vector<Seconds> busy(network_.links().capacity.size());
  for (size_t l = 0; l < busy.size(); ++l) busy[l] = network_.busy_time(static_cast<int>(l), now);
  return busy;
}

void Simulation::deadlock(Seconds now) const {
  std::string where;
  for (int wi = 0; wi < sim_workers_; ++wi) {
    const Worker& w = workers_state_[static_cast<size_t>(wi)];
    if (w.finished) continue;
    where += fmt::format(" worker {} waits before {} of layer {} in iteration {};", wi,
                         w.step < layers_ ? "the forward" : "the backward",
                         layer_at(w.step), w.iteration);
  }
  throw std::logic_error(fmt::format(
      "schedule '{}' deadlocks at {} s: nothing in flight and{} its ops never complete",
      schedule_.strategy, now, where));
}

Summary Simulation::summarise() const {
  Summary s;
  s.compute = profile_.forward_time() + profile_.backward_time();
  s.iterations = measure_end_ - warmup_end_;
  const Seconds begin = iteration_start_[static_cast<size_t>(warmup_end_)];
  const Seconds span = iteration_start_[static_cast<size_t>(measure_end_)] - begin;
  s.iteration = s.iterations > 0 ? span / s.iterations : 0;
  // Cores a waiting worker leaves to the others (Note [Shared cores]) and rounding
  // can make an iteration shorter than the profile's compute: none exposed then.
  s.exposed_comm = std::max(0.0, s.iteration - s.compute);
  if (s.iterations > 0) s.slowed_compute = measured_compute_ / (s.iterations * sim_workers_);
  if (span > 0) {
    const LinkSet& links = network_.links();
    for (size_t l = 0; l < links.capacity.size(); ++l) {
      const double busy = (busy_at_measure_end_[l] - busy_at_warmup_end_[l]) / span;
      s.link_utilisation = std::max(s.link_utilisation, busy);
      if (cluster_.arch == Arch::kParameterServer && l >= 2 * static_cast<size_t>(workers_)) {
        s.server_busy = std::max(s.server_busy, busy);
      }
    }
  }
  if (cluster_.arch == Arch::kParameterServer) {
    for (int srv = 0; srv < cluster_.servers; ++srv) {
      s.peak_server_incast = std::max(s.peak_server_incast, network_.peak_flows(2 * workers_ + 2 * srv + 1));
    }
  }
  return s;
}

}  // namespace

Timeline simulate(const Schedule& schedule, const Profile& profile, const Cluster& cluster,
                  const SimOptions& options) {
  return Simulation(schedule, profile, cluster, options).run();
}

}  // namespace weft
