#include "runtime/comm/engine.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <queue>
#include <set>
#include <stdexcept>

#include <fmt/format.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>

#include "cost/cluster.h"
#include "runtime/comm/process_group.h"
#include "schedule/index.h"

namespace weft::runtime {
namespace {

using Clock = std::chrono::steady_clock;
constexpr Bytes kElement = sizeof(float);

Seconds since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

}  // namespace

// Where each byte of a layer lives: its tensors, flattened and concatenated.
struct Engine::Layout {
  struct Piece {
    std::size_t tensor;  // index into the layer's tensors
    Bytes tensor_offset;
    Bytes chunk_offset;  // offset inside the chunk
    Bytes length;
  };
  std::vector<std::vector<Bytes>> starts;  // starts[l][i]: first byte of tensor i in layer l
  std::vector<Bytes> layer_bytes;

  explicit Layout(const std::vector<std::vector<torch::Tensor>>& layers) {
    for (std::size_t l = 0; l < layers.size(); ++l) {
      Bytes offset = 0;
      starts.emplace_back();
      for (const auto& p : layers[l]) {
        if (p.scalar_type() != torch::kFloat32 || !p.is_contiguous()) {
          throw std::logic_error(fmt::format("engine: layer {} has a parameter of type {} (contiguous: {}); "
                                             "the engine packs contiguous float32 tensors",
                                             l, c10::toString(p.scalar_type()), p.is_contiguous()));
        }
        starts.back().push_back(offset);
        offset += static_cast<Bytes>(p.numel()) * kElement;
      }
      layer_bytes.push_back(offset);
    }
  }

  // The pieces of `chunk`, in byte order.
  std::vector<Piece> pieces(const Chunk& chunk) const {
    const auto& s = starts.at(static_cast<size_t>(chunk.layer));
    std::vector<Piece> out;
    const Bytes end = chunk.offset + chunk.length;
    for (std::size_t i = 0; i < s.size(); ++i) {
      const Bytes t_begin = s[i];
      const Bytes t_end = i + 1 < s.size() ? s[i + 1] : layer_bytes[static_cast<size_t>(chunk.layer)];
      const Bytes begin = std::max(t_begin, chunk.offset);
      const Bytes stop = std::min(t_end, end);
      if (begin < stop) out.push_back({i, begin - t_begin, begin - chunk.offset, stop - begin});
    }
    return out;
  }

  void check(const Chunk& c, int iteration, int index) const {
    const bool inside = c.layer >= 0 && c.layer < static_cast<int>(layer_bytes.size()) && c.offset >= 0 &&
                        c.length > 0 && c.offset + c.length <= layer_bytes[static_cast<size_t>(c.layer)];
    if (!inside || c.offset % kElement != 0 || c.length % kElement != 0) {
      throw std::logic_error(fmt::format(
          "engine: iteration {} operation {} has chunk (layer {}, offset {}, length {}) that is not a whole "
          "number of float32 elements inside the layer's {} bytes",
          iteration, index, c.layer, c.offset, c.length,
          c.layer >= 0 && c.layer < static_cast<int>(layer_bytes.size()) ? layer_bytes[static_cast<size_t>(c.layer)]
                                                                        : Bytes{-1}));
    }
  }
};

// What happens between the two threads: events for the communication thread.
struct Engine::Event {
  enum class Kind { kLayerReady, kCompleted, kFinish, kStop };
  Kind kind = Kind::kStop;
  int iteration = 0;
  int layer = 0;
  std::uint64_t id = 0;  // kCompleted: the in-flight collective
  std::exception_ptr error;
};

struct Engine::EventQueue {
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<Event> events;

  void push(Event e) {
    {
      std::lock_guard lock(mutex);
      events.push_back(std::move(e));
    }
    changed.notify_one();
  }
  // The next event, or nothing when `deadline` passes first.
  std::optional<Event> pop(std::optional<Clock::time_point> deadline) {
    std::unique_lock lock(mutex);
    const auto any = [&] { return !events.empty(); };
    if (deadline) {
      if (!changed.wait_until(lock, *deadline, any)) return std::nullopt;
    } else {
      changed.wait(lock, any);
    }
    Event e = std::move(events.front());
    events.pop_front();
    return e;
  }
};

// What the training thread waits for (guarded by Engine::mutex_). For iteration t,
// outstanding[l] counts the operations of t that layer l's forward in t+1 waits for
// plus one for layer l's own update.
struct Engine::Progress {
  int first = 0;  // iteration of iterations.front()
  std::deque<std::vector<int>> outstanding;

  std::vector<int>* of(int iteration) {
    const int i = iteration - first;
    return i >= 0 && i < static_cast<int>(outstanding.size()) ? &outstanding[static_cast<size_t>(i)] : nullptr;
  }
  bool all_done() const {
    return std::all_of(outstanding.begin(), outstanding.end(),
                       [](const auto& v) { return std::all_of(v.begin(), v.end(), [](int n) { return n == 0; }); });
  }
};

struct Engine::InFlight {
  enum class Role { kData, kAnnouncement, kDecision };
  Role role = Role::kData;
  Message message;
  std::uint64_t sequence = 0;  // message number, as announced
  OpKind kind = OpKind::kAverageGradients;
  torch::Tensor buffer;  // what was sent
  torch::Tensor result;  // kData: where the answer lands (may be `buffer`)
  Clock::time_point started;
  Seconds started_s = 0;
  c10::intrusive_ptr<c10::ivalue::Future> future;
};

// The communication thread's state.
struct Engine::CommState {
  enum class Mode { kLocal, kLeader, kFollower };  // Note [Collective order]

  // Per iteration of the period, computed once; what waits for what is the
  // schedule's index (Note [Dependencies of an operation], schedule/index.h).
  struct Plan {
    std::vector<Bytes> averaged_bytes;             // layer -> bytes communicated before its step (0 = local step)
    std::vector<bool> stepped_elsewhere;           // layer -> updated by the parameter server, not here
  };
  // Per live iteration.
  struct Iteration {
    std::vector<int> waits;
    std::vector<bool> ready;  // locally ready: data exists and the release offset has passed
    std::vector<Bytes> bytes_left;
    int ops_left = 0;
    int updates_left = 0;
  };
  struct Timer {
    Clock::time_point at;
    OpRef op;
    bool operator>(const Timer& o) const { return at > o.at; }
  };

  Mode mode = Mode::kLocal;
  std::optional<ScheduleIndex> index;
  std::vector<Plan> plans;
  std::map<int, Iteration> iterations;
  std::optional<Dispatcher> dispatcher;  // kLocal and kLeader
  std::map<std::uint64_t, InFlight> in_flight;
  std::uint64_t next_id = 0;
  std::uint64_t next_sequence = 0;                 // messages announced (leader) or received (follower)
  std::deque<std::pair<std::uint64_t, Message>> decided;  // follower: announced, not yet issued
  std::priority_queue<Timer, std::vector<Timer>, std::greater<>> timers;
  int header_capacity = 0;  // operation indices an announcement can carry
  bool finish_requested = false;
  bool stop_received = false;
  bool stop_announced = false;
  // kLeader and kFollower: completes the announcements' sends and receives.
  std::unique_ptr<WorkWaiter> announcement_waiter;
};

// ---------------------------------------------------------------------------
// Construction

Engine::Engine(EngineOptions options)
    : options_(std::move(options)),
      progress_(std::make_unique<Progress>()),
      events_(std::make_shared<EventQueue>()),
      comm_(std::make_unique<CommState>()) {
  const Schedule& schedule = *options_.schedule;
  const int layers = static_cast<int>(options_.layers.size());
  if (!options_.collectives || options_.optimizer == nullptr) {
    throw std::logic_error("engine: EngineOptions needs collectives and an optimizer");
  }
  rank_ = options_.collectives->getRank();
  world_ = options_.collectives->getSize();
  if (options_.workers == 0) options_.workers = world_;
  if (options_.workers < 1 || options_.workers > world_ || rank_ >= options_.workers) {
    throw std::logic_error(fmt::format("engine: rank {} of {} with {} workers: an engine runs on a worker",
                                       rank_, world_, options_.workers));
  }
  layout_ = std::make_unique<Layout>(options_.layers);
  if (options_.first_iteration < 0) {
    throw std::logic_error(fmt::format("engine: first_iteration {} is negative", options_.first_iteration));
  }
  iteration_ = options_.first_iteration;
  // Only the kinds the schedule uses: an executor may start a thread of its own.
  executors_.resize(static_cast<size_t>(OpKind::kParameterServer) + 1);
  for (const auto& ops : schedule.iterations) {
    for (const CommOp& op : ops) {
      auto& executor = executors_.at(static_cast<size_t>(op.kind));
      if (!executor) executor = make_executor(op.kind, options_);
    }
  }

  CommState& c = *comm_;
  for (int p = 0; p < schedule.period; ++p) {
    const auto& ops = schedule.iterations[static_cast<size_t>(p)];
    CommState::Plan plan{.averaged_bytes = std::vector<Bytes>(static_cast<size_t>(layers), 0),
                         .stepped_elsewhere = std::vector<bool>(static_cast<size_t>(layers), false)};
    c.header_capacity = std::max(c.header_capacity, static_cast<int>(ops.size()));
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const CommOp& op = ops[i];
      const int index = static_cast<int>(i);
      const OpExecutor& executor = *executors_[static_cast<size_t>(op.kind)];
      if (executor.ordered_across_ranks() && options_.workers != world_) {
        throw std::logic_error(fmt::format("engine: iteration {} operation {} is a {} collective, but only {} of "
                                           "the group's {} ranks are workers",
                                           p, i, to_string(op.kind), options_.workers, world_));
      }
      ordered_ |= executor.ordered_across_ranks();
      for (const Chunk& chunk : op.chunks) {
        layout_->check(chunk, p, index);
        if (executor.step() != OpExecutor::Step::kBeforeCommunication) {
          plan.averaged_bytes[static_cast<size_t>(chunk.layer)] += chunk.length;
          if (executor.step() == OpExecutor::Step::kElsewhere) {
            plan.stepped_elsewhere[static_cast<size_t>(chunk.layer)] = true;
          }
        }
      }
    }
    for (int l = 0; l < layers; ++l) {
      const Bytes averaged = plan.averaged_bytes[static_cast<size_t>(l)];
      if (averaged != 0 && averaged != layout_->layer_bytes[static_cast<size_t>(l)]) {
        throw std::logic_error(fmt::format("engine: iteration {} averages {} of layer {}'s {} gradient bytes; "
                                           "a gradient schedule covers every byte once",
                                           p, averaged, l, layout_->layer_bytes[static_cast<size_t>(l)]));
      }
    }
    c.plans.push_back(std::move(plan));
  }
  c.index.emplace(schedule, layers);  // after the layout has checked every chunk
  // Point-to-point exchanges are matched by tag, and in-order dispatch decides the
  // same on every rank: only collectives under a timing-dependent policy need a
  // leader (Note [Collective order]).
  const bool timing_independent = !decided_by_timing(schedule.dispatch) || !ordered_;
  c.mode = world_ == 1 || timing_independent ? CommState::Mode::kLocal
           : rank_ == 0                      ? CommState::Mode::kLeader
                                             : CommState::Mode::kFollower;
  if (c.mode != CommState::Mode::kFollower) c.dispatcher.emplace(schedule, options_.first_iteration);
  if (c.mode != CommState::Mode::kLocal) {
    if (!options_.open_announcements) {
      throw std::logic_error(fmt::format("engine: the {} policy needs rank 0 to announce each message, and "
                                         "EngineOptions has no open_announcements",
                                         to_string(schedule.dispatch.kind)));
    }
    announcements_ = options_.open_announcements();
    if (!announcements_ || announcements_->getRank() != rank_ || announcements_->getSize() != world_) {
      throw std::logic_error(fmt::format("engine: open_announcements must open a group of the same {} ranks, "
                                         "this one as rank {}",
                                         world_, rank_));
    }
    c.announcement_waiter = std::make_unique<WorkWaiter>();
  }

  // Gradient hooks (Note [Gradient hooks]).
  gradients_missing_.assign(static_cast<size_t>(layers), 0);
  for (int l = 0; l < layers; ++l) {
    const auto& params = options_.layers[static_cast<size_t>(l)];
    for (std::size_t i = 0; i < params.size(); ++i) {
      auto accumulator = torch::autograd::impl::grad_accumulator(params[i]);
      if (!accumulator) {
        throw std::logic_error(
            fmt::format("engine: parameter {} of layer {} does not require a gradient", i, l));
      }
      const auto key = accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
          [this, l, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
            on_gradient(l, i);
            return outputs;
          }));
      hooks_.emplace_back(std::move(accumulator), key);
    }
  }
  inline_ = runs_inline(schedule);
  if (!inline_) thread_ = std::thread([this] { communication_loop(); });
}

Engine::~Engine() {
  for (auto& [node, key] : hooks_) node->del_post_hook(key);
  if (thread_.joinable()) {
    events_->push({.kind = Event::Kind::kStop});
    thread_.join();
  }
}

// Note [One worker inline] in engine.h.
bool Engine::runs_inline(const Schedule& schedule) const {
  for (const auto& ops : schedule.iterations) {
    for (const CommOp& op : ops) {
      if (!executors_[static_cast<size_t>(op.kind)]->identity() || op.release(rank_) > 0) return false;
    }
  }
  return true;
}

// ---------------------------------------------------------------------------
// Training thread

void Engine::wait_until(std::unique_lock<std::mutex>& lock, const char* what, const std::function<bool()>& done) {
  // Collectives time out by themselves (the group's timeout) and fail the engine;
  // this bound only catches an engine that stopped making progress for another
  // reason, so that nothing waits forever.
  const auto limit = std::chrono::duration<double>(options_.stall_timeout);
  const auto start = Clock::now();
  while (!error_ && !done()) {
    if (progress_changed_.wait_for(lock, limit) == std::cv_status::timeout && !error_ && !done()) {
      throw std::runtime_error(fmt::format("rank {}: no progress for {} while waiting for {} in iteration {}",
                                           rank_, format_duration(since(start)), what, iteration_));
    }
  }
  if (error_) std::rethrow_exception(error_);
}

void Engine::wait_for_forward(int layer) {
  std::unique_lock lock(mutex_);
  if (error_) std::rethrow_exception(error_);
  if (iteration_ == 0) return;
  const int previous = iteration_ - 1;
  const std::string what = fmt::format("layer {}'s operations of iteration {}", layer, previous);
  wait_until(lock, what.c_str(), [&] {
    const auto* counts = progress_->of(previous);
    return counts == nullptr || (*counts)[static_cast<size_t>(layer)] == 0;
  });
}

void Engine::start_backward() {
  {
    std::lock_guard lock(mutex_);
    if (error_) std::rethrow_exception(error_);
    // Every layer's forward in this iteration waited for the previous iteration:
    // its counters are all zero and will not change again.
    while (!progress_->outstanding.empty() && progress_->first < iteration_) {
      progress_->outstanding.pop_front();
      ++progress_->first;
    }
    if (progress_->outstanding.empty()) progress_->first = iteration_;
    std::vector<int> counts(comm_->index->at(iteration_).blockers);
    for (int& n : counts) ++n;  // the layer's own update
    progress_->outstanding.push_back(std::move(counts));
  }
  for (std::size_t l = 0; l < gradients_missing_.size(); ++l) {
    gradients_missing_[l] = static_cast<int>(options_.layers[l].size());
  }
  in_backward_ = true;
  if (options_.recorder) last_gradient_time_ = options_.recorder->now();
}

void Engine::on_gradient(int layer, std::size_t parameter) {
  if (!in_backward_) return;  // e.g. a backward outside the training loop
  int& missing = gradients_missing_[static_cast<size_t>(layer)];
  if (--missing != 0) return;
  if (options_.recorder) {
    const Seconds now = options_.recorder->now();
    const std::string name = static_cast<size_t>(layer) < options_.layer_names.size()
                                 ? options_.layer_names[static_cast<size_t>(layer)]
                                 : std::to_string(layer);
    options_.recorder->add({.lane = "compute", .name = "bp " + name, .start = last_gradient_time_, .end = now,
                            .iteration = iteration_, .layer = layer});
    last_gradient_time_ = now;
  }
  post({.kind = Event::Kind::kLayerReady, .iteration = iteration_, .layer = layer});
}

void Engine::end_backward() {
  in_backward_ = false;
  for (std::size_t l = 0; l < gradients_missing_.size(); ++l) {
    if (options_.layers[l].empty()) {
      // A layer without parameters has no hook; it is ready when the backward ends.
      post({.kind = Event::Kind::kLayerReady, .iteration = iteration_, .layer = static_cast<int>(l)});
    } else if (gradients_missing_[l] != 0 && options_.zero_missing_gradients) {
      // The hooks that did not run will not run in this backward: nothing else
      // writes these gradients until the layer's update.
      for (const torch::Tensor& p : options_.layers[l]) {
        if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
      }
      gradients_missing_[l] = 0;
      post({.kind = Event::Kind::kLayerReady, .iteration = iteration_, .layer = static_cast<int>(l)});
    } else if (gradients_missing_[l] != 0) {
      throw std::logic_error(fmt::format("engine: in iteration {}, {} of the {} parameters of layer {} got no "
                                         "gradient; every parameter must be used in every forward",
                                         iteration_, gradients_missing_[l], options_.layers[l].size(), l));
    }
  }
  ++iteration_;
  std::lock_guard lock(mutex_);
  if (error_) std::rethrow_exception(error_);
}

void Engine::stepped_outside() {
  // start_backward forgets the previous iteration, whose every layer a forward
  // has waited for; a step() with no forward since the last one must wait here.
  for (int l = 0; l < static_cast<int>(gradients_missing_.size()); ++l) wait_for_forward(l);
  start_backward();
  in_backward_ = false;  // a backward of the caller's now counts towards nothing
  for (int l = static_cast<int>(gradients_missing_.size()) - 1; l >= 0; --l) {
    if (options_.layers[static_cast<size_t>(l)].empty()) continue;  // end_backward readies those
    gradients_missing_[static_cast<size_t>(l)] = 0;
    post({.kind = Event::Kind::kLayerReady, .iteration = iteration_, .layer = l});
  }
  end_backward();
}

void Engine::drain() {
  std::unique_lock lock(mutex_);
  wait_until(lock, "every operation to complete", [&] { return progress_->all_done(); });
}

std::map<std::string, torch::Tensor> Engine::state() const {
  std::map<std::string, torch::Tensor> out;
  for (std::size_t k = 0; k < executors_.size(); ++k) {
    if (!executors_[k]) continue;
    const std::string kind(to_string(static_cast<OpKind>(k)));
    for (const auto& [name, value] : executors_[k]->state()) out[kind + "/" + name] = value.clone();
  }
  return out;
}

std::optional<torch::Tensor> Engine::agreed_parameters() const {
  std::vector<torch::Tensor> layers;
  for (int l = 0; l < static_cast<int>(options_.layers.size()); ++l) {
    std::optional<torch::Tensor> layer;
    for (const auto& executor : executors_) {
      if (executor && (layer = executor->agreed(l))) break;
    }
    if (!layer) return std::nullopt;
    layers.push_back(*layer);
  }
  return torch::cat(layers);
}

void Engine::load_state(const std::map<std::string, torch::Tensor>& state) {
  std::vector<std::map<std::string, torch::Tensor>> of_kind(executors_.size());
  for (const auto& [name, value] : state) {
    bool placed = false;
    for (std::size_t k = 0; k < executors_.size() && !placed; ++k) {
      const std::string prefix = std::string(to_string(static_cast<OpKind>(k))) + "/";
      if (executors_[k] && name.starts_with(prefix)) {
        of_kind[k][name.substr(prefix.size())] = value;
        placed = true;
      }
    }
    if (!placed) throw std::invalid_argument(fmt::format("engine state {}: this schedule has no such kind", name));
  }
  torch::NoGradGuard no_grad;
  for (std::size_t k = 0; k < executors_.size(); ++k) {
    if (!of_kind[k].empty()) executors_[k]->load_state(of_kind[k]);
  }
}

void Engine::finish() {
  drain();
  post({.kind = Event::Kind::kFinish});
  std::unique_lock lock(mutex_);
  wait_until(lock, "the end of the message stream", [&] { return finished_; });
}

void Engine::fail(std::exception_ptr error) {
  {
    std::lock_guard lock(mutex_);
    if (!error_) error_ = std::move(error);
  }
  progress_changed_.notify_all();
}

// ---------------------------------------------------------------------------
// Communication thread. Everything below runs on it (on the training thread when
// the engine runs inline), except the future callbacks, which only push an event.

namespace {

std::string message_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

constexpr std::uint64_t kStopSequence = ~std::uint64_t{0};
constexpr int kHeaderFields = 3;  // sequence, iteration, count; then operation indices
constexpr int kAnnouncementTag = 0;  // every announcement; the order of sends matches them up

}  // namespace

class Engine::Comm {
 public:
  explicit Comm(Engine& engine) : e_(engine), c_(*engine.comm_), schedule_(*engine.options_.schedule) {}

  void start() {
    if (c_.mode == CommState::Mode::kFollower) post_decision();
  }

  void handle(const Event& event) {
    switch (event.kind) {
      case Event::Kind::kLayerReady: layer_ready(event.iteration, event.layer); break;
      case Event::Kind::kCompleted: completed(event.id, event.error); break;
      case Event::Kind::kFinish:
        c_.finish_requested = true;
        maybe_finish();
        break;
      case Event::Kind::kStop: break;
    }
    retire();
  }

  void release_timers() {
    const auto now = Clock::now();
    while (!c_.timers.empty() && c_.timers.top().at <= now) {
      const OpRef op = c_.timers.top().op;
      c_.timers.pop();
      op_ready(op);
    }
    retire();
  }

 private:
  using Iteration = CommState::Iteration;
  using Plan = CommState::Plan;

  const Plan& plan(int t) const { return c_.plans[static_cast<size_t>(t % schedule_.period)]; }

  Iteration& iteration(int t) {
    auto it = c_.iterations.find(t);
    if (it != c_.iterations.end()) return it->second;
    const Plan& p = plan(t);
    const auto ops = schedule_.ops(t).size();
    std::vector<int> waits;
    for (const auto& layers : c_.index->at(t).waits_on) waits.push_back(static_cast<int>(layers.size()));
    Iteration fresh{.waits = std::move(waits),
                    .ready = std::vector<bool>(ops, false),
                    .bytes_left = p.averaged_bytes,
                    .ops_left = static_cast<int>(ops),
                    .updates_left = static_cast<int>(e_.options_.layers.size())};
    return c_.iterations.emplace(t, std::move(fresh)).first->second;
  }

  void retire() {
    std::erase_if(c_.iterations, [](const auto& entry) {
      return entry.second.ops_left == 0 && entry.second.updates_left == 0;
    });
  }

  // Layer l's backward ended in iteration t.
  void layer_ready(int t, int l) {
    Iteration& it = iteration(t);
    const Plan& p = plan(t);
    if (p.averaged_bytes[static_cast<size_t>(l)] == 0) update(t, l);  // local step, before any averaging
    bool any_ready = false;
    for (int i : c_.index->at(t).waiting_on[static_cast<size_t>(l)]) {
      if (--it.waits[static_cast<size_t>(i)] != 0) continue;
      const Seconds delay = schedule_.ops(t)[static_cast<size_t>(i)].release(e_.rank_);
      if (delay > 0) {
        c_.timers.push({Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(delay)),
                        {t, i}});
      } else {
        mark_ready({t, i});
        any_ready = true;
      }
    }
    // The whole layer's ops are ready before anything is launched
    // (Note [Launch per instant] in schedule/dispatcher.h).
    if (any_ready) launch_ready();
  }

  void op_ready(OpRef op) {
    mark_ready(op);
    launch_ready();
  }

  void mark_ready(OpRef op) {
    iteration(op.iteration).ready[static_cast<size_t>(op.index)] = true;
    if (c_.dispatcher) c_.dispatcher->ready(op);
  }

  void launch_ready() {
    if (c_.dispatcher) {
      dispatch();
    } else {
      issue_decided();
    }
  }

  // kLocal and kLeader: start what the dispatcher says.
  void dispatch() {
    for (Message& m : c_.dispatcher->launch()) {
      const std::uint64_t sequence = c_.next_sequence++;
      if (c_.mode == CommState::Mode::kLeader) announce(m, sequence);
      issue(std::move(m), sequence);
    }
  }

  // kFollower: issue announced messages, in order, once their data is ready here.
  void issue_decided() {
    while (!c_.decided.empty()) {
      auto& [sequence, message] = c_.decided.front();
      for (const OpRef& op : message.ops) {
        if (!iteration(op.iteration).ready[static_cast<size_t>(op.index)]) return;
      }
      issue(std::move(message), sequence);
      c_.decided.pop_front();
    }
  }

  std::uint64_t track(InFlight flight) {
    const std::uint64_t id = c_.next_id++;
    auto future = flight.future;
    c_.in_flight.emplace(id, std::move(flight));
    // The callback may outlive the engine (a collective still in flight when a
    // failure tears it down): it holds the queue, not the engine.
    future->addCallback([queue = e_.events_, id](c10::ivalue::Future& f) {
      queue->push({.kind = Event::Kind::kCompleted, .id = id, .error = f.hasError() ? f.exception_ptr() : nullptr});
    });
    return id;
  }

  torch::Tensor header(std::uint64_t sequence, int t, const std::vector<OpRef>& ops) {
    auto h = torch::full({kHeaderFields + c_.header_capacity}, -1, torch::kInt64);
    auto* d = h.data_ptr<std::int64_t>();
    d[0] = static_cast<std::int64_t>(sequence);
    d[1] = t;
    d[2] = static_cast<std::int64_t>(ops.size());
    for (std::size_t k = 0; k < ops.size(); ++k) d[kHeaderFields + k] = ops[k].index;
    return h;
  }

  // Rank 0 sends `h` to every follower, each directly (a tree broadcast would
  // make some followers wait for another one to pass it on).
  c10::intrusive_ptr<c10::ivalue::Future> send_to_followers(torch::Tensor h) {
    std::vector<c10::intrusive_ptr<c10d::Work>> sends;
    for (int r = 1; r < e_.world_; ++r) {
      std::vector<torch::Tensor> tensors{h};
      sends.push_back(e_.announcements_->send(tensors, r, kAnnouncementTag));
    }
    return wait_for(std::move(sends));
  }

  c10::intrusive_ptr<c10::ivalue::Future> receive_from_leader(torch::Tensor h) {
    std::vector<torch::Tensor> tensors{std::move(h)};
    return wait_for({e_.announcements_->recv(tensors, 0, kAnnouncementTag)});
  }

  c10::intrusive_ptr<c10::ivalue::Future> wait_for(std::vector<c10::intrusive_ptr<c10d::Work>> works) {
    auto done = c10::make_intrusive<c10::ivalue::Future>(c10::NoneType::get());
    c_.announcement_waiter->add(std::move(works), done);
    return done;
  }

  void announce(const Message& m, std::uint64_t sequence) {
    const int t = m.ops.front().iteration;
    for (const OpRef& op : m.ops) {
      if (op.iteration != t || static_cast<int>(m.ops.size()) > c_.header_capacity) {
        throw std::logic_error(fmt::format("engine: message #{} mixes iterations {} and {} or holds more than {} "
                                           "operations",
                                           sequence, t, op.iteration, c_.header_capacity));
      }
    }
    InFlight f{.role = InFlight::Role::kAnnouncement, .sequence = sequence, .buffer = header(sequence, t, m.ops),
               .started = Clock::now()};
    f.future = send_to_followers(f.buffer);
    track(std::move(f));
  }

  void announce_stop() {
    c_.stop_announced = true;
    InFlight f{.role = InFlight::Role::kAnnouncement, .sequence = kStopSequence,
               .buffer = header(c_.next_sequence, -1, {}), .started = Clock::now()};
    f.buffer.data_ptr<std::int64_t>()[2] = -1;
    f.future = send_to_followers(f.buffer);
    track(std::move(f));
  }

  void post_decision() {
    InFlight f{.role = InFlight::Role::kDecision, .sequence = c_.next_sequence,
               .buffer = torch::empty({kHeaderFields + c_.header_capacity}, torch::kInt64), .started = Clock::now()};
    f.future = receive_from_leader(f.buffer);
    track(std::move(f));
  }

  void decided(const InFlight& f) {
    const auto* d = f.buffer.data_ptr<std::int64_t>();
    if (d[2] < 0) {
      c_.stop_received = true;
      maybe_finish();
      return;
    }
    if (static_cast<std::uint64_t>(d[0]) != c_.next_sequence || d[2] > c_.header_capacity) {
      throw std::logic_error(fmt::format("engine: rank {} expected announcement #{} and received #{} with {} "
                                         "operations",
                                         e_.rank_, c_.next_sequence, d[0], d[2]));
    }
    Message m;
    for (std::int64_t k = 0; k < d[2]; ++k) {
      const OpRef op{static_cast<int>(d[1]), static_cast<int>(d[kHeaderFields + k])};
      m.ops.push_back(op);
      m.bytes += schedule_.ops(op.iteration).at(static_cast<size_t>(op.index)).bytes();
    }
    c_.decided.emplace_back(c_.next_sequence++, std::move(m));
    // The next decision is listened for at once, not once this one is issued: rank 0
    // may announce several messages at an instant, and each must arrive while the
    // data it names is still being computed here.
    post_decision();
    issue_decided();
  }

  OpKind kind_of(const Message& m, std::uint64_t sequence) const {
    const OpKind kind = schedule_.ops(m.ops.front().iteration)[static_cast<size_t>(m.ops.front().index)].kind;
    for (const OpRef& op : m.ops) {
      const OpKind other = schedule_.ops(op.iteration)[static_cast<size_t>(op.index)].kind;
      if (other != kind) {
        throw std::logic_error(fmt::format("engine: message #{} fuses {} and {} operations; a message carries one "
                                           "kind",
                                           sequence, to_string(kind), to_string(other)));
      }
    }
    return kind;
  }

  // Packs the message's chunks into one buffer and starts its collective.
  void issue(Message m, std::uint64_t sequence) {
    const OpKind kind = kind_of(m, sequence);
    OpExecutor& executor = *e_.executors_[static_cast<size_t>(kind)];
    if (executor.identity()) {
      // Nothing would change: done now, without packing (Note [Executors per OpKind]).
      InFlight f{.role = InFlight::Role::kData, .message = std::move(m), .sequence = sequence, .kind = kind,
                 .started = Clock::now(), .started_s = e_.options_.recorder ? e_.options_.recorder->now() : 0};
      unpack(f);
      return;
    }
    auto buffer = torch::empty({m.bytes / kElement}, torch::kFloat32);
    auto* out = static_cast<char*>(buffer.data_ptr());
    Bytes position = 0;
    for (const OpRef& ref : m.ops) {
      for (const Chunk& chunk : schedule_.ops(ref.iteration)[static_cast<size_t>(ref.index)].chunks) {
        const auto tensors = executor.operands(chunk.layer);
        for (const auto& piece : e_.layout_->pieces(chunk)) {
          const torch::Tensor& t = tensors[piece.tensor];
          if (!t.defined()) {
            throw std::logic_error(fmt::format("engine: layer {} tensor {} has no {} to send", chunk.layer,
                                               piece.tensor, to_string(kind)));
          }
          std::memcpy(out + position + piece.chunk_offset,
                      static_cast<const char*>(t.data_ptr()) + piece.tensor_offset,
                      static_cast<size_t>(piece.length));
        }
        position += chunk.length;
      }
    }
    if (position != m.bytes) {
      throw std::logic_error(fmt::format("engine: message #{} packs {} bytes but declares {}", sequence, position,
                                         m.bytes));
    }
    OpExecutor::Started started = executor.start(schedule_, m, buffer);
    InFlight f{.role = InFlight::Role::kData, .message = std::move(m), .sequence = sequence, .kind = kind,
               .buffer = buffer, .result = std::move(started.result), .started = Clock::now(),
               .started_s = e_.options_.recorder ? e_.options_.recorder->now() : 0,
               .future = std::move(started.done)};
    track(std::move(f));
  }

  std::string describe(const InFlight& f) const {
    switch (f.role) {
      case InFlight::Role::kData:
        return fmt::format("{} of message #{} ({} operation{}, {}, iteration {})",
                           e_.executors_[static_cast<size_t>(f.kind)]->describe(schedule_, f.message), f.sequence,
                           f.message.ops.size(), f.message.ops.size() == 1 ? "" : "s", format_bytes(f.message.bytes),
                           f.message.ops.front().iteration);
      case InFlight::Role::kAnnouncement:
        return f.sequence == kStopSequence ? std::string("the end-of-stream announcement")
                                           : fmt::format("the announcement of message #{}", f.sequence);
      case InFlight::Role::kDecision:
        return fmt::format("waiting for rank 0's announcement of message #{}", f.sequence);
    }
    return "a collective";
  }

  void completed(std::uint64_t id, const std::exception_ptr& error) {
    auto node = c_.in_flight.extract(id);
    if (node.empty()) throw std::logic_error(fmt::format("engine: completion of unknown collective {}", id));
    InFlight& f = node.mapped();
    if (error) {
      throw std::runtime_error(fmt::format("rank {}: {} failed after {} (a peer died, or did not take part "
                                           "within the timeout): {}",
                                           e_.rank_, describe(f), format_duration(since(f.started)),
                                           message_of(error)));
    }
    switch (f.role) {
      case InFlight::Role::kAnnouncement:
        if (f.sequence == kStopSequence) set_finished();
        break;
      case InFlight::Role::kDecision: decided(f); break;
      case InFlight::Role::kData: unpack(f); break;
    }
  }

  // Writes a completed message's result into its layers (none to write for an
  // identity message), starts what the dispatcher now allows, and then updates
  // the layers that have all their bytes (Note [Next message before the update]).
  void unpack(InFlight& f) {
    // The message's end in the timeline: the updates below wake the training thread,
    // which may run before this thread records anything more.
    const Seconds completed = e_.options_.recorder ? e_.options_.recorder->now() : 0;
    OpExecutor& executor = *e_.executors_[static_cast<size_t>(f.kind)];
    const bool copy = f.result.defined();
    if (copy) executor.complete(schedule_, f.message, f.buffer, f.result);
    const auto* in = copy ? static_cast<const char*>(f.result.data_ptr()) : nullptr;
    const bool then_step = executor.step() != OpExecutor::Step::kBeforeCommunication;
    std::set<int> layers;
    std::vector<std::pair<int, int>> whole;  // (iteration, layer) that now have all their bytes
    Bytes position = 0;
    for (const OpRef& ref : f.message.ops) {
      Iteration& it = iteration(ref.iteration);
      for (const Chunk& chunk : schedule_.ops(ref.iteration)[static_cast<size_t>(ref.index)].chunks) {
        if (copy) {
          executor.complete_chunk(chunk, f.result.narrow(0, position / kElement, chunk.length / kElement));
          const auto tensors = executor.results(chunk.layer);
          for (const auto& piece : e_.layout_->pieces(chunk)) {
            std::memcpy(static_cast<char*>(tensors[piece.tensor].data_ptr()) + piece.tensor_offset,
                        in + position + piece.chunk_offset, static_cast<size_t>(piece.length));
          }
        }
        position += chunk.length;
        layers.insert(chunk.layer);
        if (then_step && (it.bytes_left[static_cast<size_t>(chunk.layer)] -= chunk.length) == 0) {
          whole.emplace_back(ref.iteration, chunk.layer);
        }
      }
    }
    if (c_.dispatcher) {
      c_.dispatcher->done(f.message);
      dispatch();
    }
    for (const auto& [t, l] : whole) update(t, l);
    for (const OpRef& ref : f.message.ops) op_done(ref);
    if (e_.options_.recorder) {
      e_.options_.recorder->add({.lane = "comm",
                                 .name = fmt::format("{} {} ({} ops)", executor.describe(schedule_, f.message),
                                                     format_bytes(f.message.bytes), f.message.ops.size()),
                                 .start = f.started_s,
                                 .end = completed,
                                 .iteration = f.message.ops.front().iteration,
                                 .layer = layers.size() == 1 ? *layers.begin() : -1,
                                 .bytes = f.message.bytes});
    }
  }

  // The layer-wise update of layer l in iteration t.
  void update(int t, int l) {
    const Seconds start = e_.options_.recorder ? e_.options_.recorder->now() : 0;
    {
      torch::NoGradGuard no_grad;
      if (!plan(t).stepped_elsewhere[static_cast<size_t>(l)]) e_.options_.optimizer->step(l);
      e_.options_.optimizer->zero_grad(l);
    }
    if (e_.options_.recorder) {
      const auto& names = e_.options_.layer_names;
      const auto at = static_cast<size_t>(l);
      const std::string layer = at < names.size() ? names[at] : std::to_string(l);
      e_.options_.recorder->add({.lane = "update",
                                 .name = "step " + layer,
                                 .start = start,
                                 .end = e_.options_.recorder->now(),
                                 .iteration = t,
                                 .layer = l});
    }
    --iteration(t).updates_left;
    release(t, {l});
  }

  void op_done(OpRef op) {
    --iteration(op.iteration).ops_left;
    release(op.iteration, {c_.index->at(op.iteration).needed[static_cast<size_t>(op.index)]});
  }

  // One thing the forwards of layers `layers` in iteration t+1 waited for is done.
  void release(int t, const std::vector<int>& layers) {
    {
      std::lock_guard lock(e_.mutex_);
      auto* counts = e_.progress_->of(t);
      if (counts == nullptr) {
        throw std::logic_error(fmt::format("engine: progress of iteration {} is gone (first kept: {})", t,
                                           e_.progress_->first));
      }
      for (int l : layers) --(*counts)[static_cast<size_t>(l)];
    }
    e_.progress_changed_.notify_all();
  }

  void maybe_finish() {
    if (!c_.finish_requested) return;
    switch (c_.mode) {
      case CommState::Mode::kLocal: set_finished(); break;
      case CommState::Mode::kLeader:
        if (!c_.stop_announced) announce_stop();
        break;
      case CommState::Mode::kFollower:
        if (c_.stop_received) set_finished();
        break;
    }
  }

  void set_finished() {
    {
      std::lock_guard lock(e_.mutex_);
      e_.finished_ = true;
    }
    e_.progress_changed_.notify_all();
  }

  Engine& e_;
  CommState& c_;
  const Schedule& schedule_;
};

void Engine::post(Event event) {
  if (!inline_) {
    events_->push(std::move(event));
    return;
  }
  try {
    Comm(*this).handle(event);
  } catch (...) {
    fail(std::current_exception());
  }
}

void Engine::communication_loop() {
  try {
    Comm comm(*this);
    comm.start();
    for (;;) {
      std::optional<Clock::time_point> deadline;
      if (!comm_->timers.empty()) deadline = comm_->timers.top().at;
      std::optional<Event> event = events_->pop(deadline);
      if (!event) {
        comm.release_timers();
        continue;
      }
      if (event->kind == Event::Kind::kStop) return;
      comm.handle(*event);
    }
  } catch (...) {
    fail(std::current_exception());
  }
}

}  // namespace weft::runtime
