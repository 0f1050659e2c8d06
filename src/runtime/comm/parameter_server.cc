#include "runtime/comm/parameter_server.h"

#include <algorithm>
#include <deque>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "runtime/comm/codecs.h"
#include "runtime/comm/process_group.h"

namespace weft::runtime {
namespace {

using Work = c10::intrusive_ptr<c10d::Work>;

// Gloo point-to-point tags are 32-bit; exchanges far apart in time may share one.
constexpr std::int64_t kTagSpace = std::int64_t{1} << 30;

int max_ops(const Schedule& schedule) {
  std::size_t most = 1;
  for (const auto& ops : schedule.iterations) most = std::max(most, ops.size());
  return static_cast<int>(most);
}

const CommOp& single_op(const Schedule& schedule, const Message& message) {
  if (message.ops.size() != 1) {
    throw std::logic_error(fmt::format("parameter server: a message fuses {} operations; a parameter-server "
                                       "exchange carries one (use a policy that does not fuse)",
                                       message.ops.size()));
  }
  const OpRef& ref = message.ops.front();
  return schedule.ops(ref.iteration)[static_cast<size_t>(ref.index)];
}

// The layers an operation carries, each whole; THROWS std::logic_error otherwise.
std::vector<int> whole_layers(const CommOp& op, const std::vector<std::vector<torch::Tensor>>& layers,
                              std::int64_t iteration, int index) {
  std::vector<int> out;
  for (const Chunk& c : op.chunks) {
    Bytes bytes = 0;
    for (const auto& p : layers.at(static_cast<size_t>(c.layer))) bytes += static_cast<Bytes>(p.nbytes());
    if (c.offset != 0 || c.length != bytes) {
      throw std::logic_error(fmt::format("parameter server: iteration {} operation {} carries bytes {}..{} of layer "
                                         "{} ({} bytes); parameter-server operations carry whole layers",
                                         iteration, index, c.offset, c.offset + c.length, c.layer, bytes));
    }
    out.push_back(c.layer);
  }
  return out;
}

// The layers' parameters, flattened and concatenated in the engine's packing
// order (Layout in engine.cc).
torch::Tensor pack_parameters(const std::vector<std::vector<torch::Tensor>>& layers, const std::vector<int>& which) {
  std::vector<torch::Tensor> flat;
  for (int l : which) {
    for (const auto& p : layers[static_cast<size_t>(l)]) flat.push_back(p.detach().reshape(-1));
  }
  return torch::cat(flat);
}

// Writes `flat` (packed as above) into the layers' parameters or gradients.
void unpack(const torch::Tensor& flat, std::vector<std::vector<torch::Tensor>>& layers, const std::vector<int>& which,
            bool gradients) {
  torch::NoGradGuard no_grad;
  std::int64_t offset = 0;
  for (int l : which) {
    for (auto& p : layers[static_cast<size_t>(l)]) {
      const auto part = flat.narrow(0, offset, p.numel()).view_as(p);
      if (gradients) {
        p.mutable_grad() = part.clone();
      } else {
        p.copy_(part);
      }
      offset += p.numel();
    }
  }
}

using State = std::map<std::string, torch::Tensor>;

// Flat float32 values per layer, as pack_parameters packs them (Note [Compressed
// exchanges]: the answered values r, the pushes' error feedback).
class LayerValues {
 public:
  // Sets layer l to `values` (copied).
  void set(int l, const torch::Tensor& values) { values_[l] = values.clone(); }
  bool has(int l) const { return values_.contains(l); }
  // Adds each layer's values to `out` as "<prefix><layer>" (not copied).
  void save(std::string_view prefix, State& out) const {
    for (const auto& [l, v] : values_) out[fmt::format("{}{}", prefix, l)] = v;
  }
  // Sets each layer from `state`'s "<prefix><layer>" and removes that entry.
  // THROWS std::invalid_argument naming an entry that is missing or of another size.
  void load(std::string_view prefix, State& state) {
    for (auto& [l, v] : values_) {
      const std::string name = fmt::format("{}{}", prefix, l);
      const auto found = state.find(name);
      if (found == state.end() || !found->second.sizes().equals(v.sizes()) ||
          found->second.scalar_type() != v.scalar_type()) {
        throw std::invalid_argument(fmt::format("parameter-server state {}: missing, or of another size", name));
      }
      v.copy_(found->second);
      state.erase(found);
    }
  }
  // The values of `which`, concatenated.
  torch::Tensor gather(const std::vector<int>& which) const {
    std::vector<torch::Tensor> parts;
    for (int l : which) parts.push_back(values_.at(l));
    return torch::cat(parts);
  }
  // Writes `flat` (concatenated as gather returns it) into the layers `which`.
  void scatter(const std::vector<int>& which, const torch::Tensor& flat) {
    std::int64_t at = 0;
    for (int l : which) {
      torch::Tensor& v = values_.at(l);
      v.copy_(flat.narrow(0, at, v.numel()));
      at += v.numel();
    }
  }

 private:
  std::map<int, torch::Tensor> values_;
};

// THROWS std::invalid_argument naming the first of `left` (entries that no
// LayerValues::load took), if any.
void expect_none_left(const State& left) {
  if (!left.empty()) {
    throw std::invalid_argument(fmt::format("parameter-server state {}: not an entry this job's exchanges keep "
                                            "(reference/<layer> and feedback/<layer> of their compressed layers)",
                                            left.begin()->first));
  }
}

// r + dec(wire): the one arithmetic the server and every worker do on an answer
// (Note [Compressed exchanges]), so that all get the same bits.
torch::Tensor advanced(const torch::Tensor& reference, const WireFormat& format, const torch::Tensor& wire) {
  return reference + format.decoded(wire, reference.numel());
}

// The wire formats of the lossy encodings a schedule's operations use, by name.
std::map<std::string, std::unique_ptr<WireFormat>> formats_of(const Schedule& schedule) {
  std::map<std::string, std::unique_ptr<WireFormat>> out;
  for (const auto& ops : schedule.iterations) {
    for (const CommOp& op : ops) {
      if (lossy(op.encoding) && !out.contains(to_string(op.encoding))) {
        out[to_string(op.encoding)] = make_wire_format(op.encoding);
      }
    }
  }
  return out;
}

class ParameterServerExchange : public OpExecutor {
 public:
  explicit ParameterServerExchange(const EngineOptions& options)
      : options_(options), easgd_(options.schedule->easgd), formats_(formats_of(*options.schedule)) {
    // Note [Compressed exchanges]: r starts at the common initial parameters.
    const Schedule& schedule = *options.schedule;
    for (int t = 0; t < schedule.period; ++t) {
      const auto& ops = schedule.ops(t);
      for (std::size_t i = 0; i < ops.size(); ++i) {
        if (!lossy(ops[i].encoding) && !elastic()) continue;
        const int index = static_cast<int>(i);
        const std::vector<int> layers = whole_layers(ops[i], options.layers, t, index);
        layers_of_[{t, index}] = layers;
        if (!lossy(ops[i].encoding)) continue;
        for (int l : layers) {
          if (reference_.has(l)) continue;
          reference_.set(l, pack_parameters(options.layers, {l}));
          feedback_.set(l, torch::zeros_like(pack_parameters(options.layers, {l})));
        }
      }
    }
  }

  std::vector<torch::Tensor> operands(int layer) override {
    const auto& params = options_.layers[static_cast<size_t>(layer)];
    if (elastic()) return params;
    std::vector<torch::Tensor> grads;
    for (const auto& p : params) grads.push_back(p.grad());
    return grads;
  }
  std::vector<torch::Tensor> results(int layer) override { return options_.layers[static_cast<size_t>(layer)]; }
  Step step() const override { return elastic() ? Step::kBeforeCommunication : Step::kElsewhere; }
  bool ordered_across_ranks() const override { return false; }

  Started start(const Schedule& schedule, const Message& message, torch::Tensor packed) override {
    const CommOp& op = single_op(schedule, message);
    const OpRef& ref = message.ops.front();
    const int server = options_.workers + op.server;
    const int tag = exchange_tag(schedule, ref.iteration, ref.index);
    std::vector<torch::Tensor> out{packed};
    std::vector<torch::Tensor> in{torch::empty_like(packed)};
    if (lossy(op.encoding)) {  // Note [Compressed exchanges]
      const WireFormat& format = *formats_.at(to_string(op.encoding));
      const std::vector<int>& layers = layers_of(schedule, ref);
      torch::Tensor x = elastic() ? packed - reference_.gather(layers) : packed.clone();
      x.add_(feedback_.gather(layers));
      out.front() = format.encoded(x);
      feedback_.scatter(layers, x.sub_(format.decoded(out.front(), x.numel())));
      in.front() = torch::empty_like(out.front());
    }
    Work send = options_.collectives->send(out, server, tag);
    Work recv = options_.collectives->recv(in, server, tag);
    auto done = c10::make_intrusive<c10::ivalue::Future>(c10::NoneType::get());
    waiter_.add({std::move(send), std::move(recv)}, done);
    return {.done = std::move(done), .result = in.front()};
  }

  void complete(const Schedule& schedule, const Message& message, const torch::Tensor& packed,
                torch::Tensor& result) override {
    const CommOp& op = single_op(schedule, message);
    if (lossy(op.encoding)) {  // Note [Compressed exchanges]
      const std::vector<int>& layers = layers_of(schedule, message.ops.front());
      result = advanced(reference_.gather(layers), *formats_.at(to_string(op.encoding)), result);
      reference_.scatter(layers, result);
    }
    if (elastic()) {
      std::int64_t at = 0;
      for (int l : layers_of(schedule, message.ops.front())) {
        const std::int64_t n = layer_numel(l);
        centre_.set(l, result.narrow(0, at, n));
        at += n;
      }
      result = elastic_pull(packed, result, easgd_.alpha);
    }
  }

  std::optional<torch::Tensor> agreed(int layer) const override {
    if (!centre_.has(layer)) return std::nullopt;
    return centre_.gather({layer});
  }

  std::string describe(const Schedule& schedule, const Message& message) const override {
    return fmt::format("{}{}", kExchangeEventPrefix, single_op(schedule, message).server);
  }
  // Note [Compressed exchanges]: "reference/<layer>" and "feedback/<layer>".
  State state() const override {
    State out;
    reference_.save("reference/", out);
    feedback_.save("feedback/", out);
    return out;
  }
  void load_state(const State& state) override {
    State left = state;
    reference_.load("reference/", left);
    feedback_.load("feedback/", left);
    expect_none_left(left);
  }

 private:
  bool elastic() const { return easgd_.beta > 0; }
  const std::vector<int>& layers_of(const Schedule& schedule, const OpRef& ref) const {
    return layers_of_.at({ref.iteration % schedule.period, ref.index});
  }
  std::int64_t layer_numel(int layer) const {
    std::int64_t n = 0;
    for (const torch::Tensor& p : options_.layers[static_cast<size_t>(layer)]) n += p.numel();
    return n;
  }

  const EngineOptions& options_;
  const Easgd easgd_;
  // Note [Compressed exchanges], for the operations with a lossy encoding.
  const std::map<std::string, std::unique_ptr<WireFormat>> formats_;
  std::map<std::pair<int, int>, std::vector<int>> layers_of_;  // (period iteration, op) -> whole layers
  LayerValues reference_;  // r: what the servers last answered
  LayerValues feedback_;   // this worker's pushes' error feedback
  // EASGD: the centre the servers last answered, per layer answered in this run
  // (what agreed() reports; not checkpointed: a resumed run starts without it).
  LayerValues centre_;
  // The server answers a worker's exchanges in the order they were pushed, so
  // waiting in that order delays no completion noticeably.
  WorkWaiter waiter_;
};

}  // namespace

int exchange_tag(const Schedule& schedule, std::int64_t iteration, int index) {
  return static_cast<int>((iteration * max_ops(schedule) + index) % kTagSpace);
}

torch::Tensor elastic_pull(const torch::Tensor& local, const torch::Tensor& centre, double alpha) {
  return local - alpha * (local - centre);
}

void move_centre(torch::Tensor& centre, const torch::Tensor& mean, double beta) {
  centre.mul_(1 - beta).add_(mean, beta);
}

std::unique_ptr<OpExecutor> make_parameter_server_executor(const EngineOptions& options) {
  return std::make_unique<ParameterServerExchange>(options);
}

// ---------------------------------------------------------------------------
// The server

namespace {

class Server {
 public:
  explicit Server(const ServerOptions& o)
      : o_(o), schedule_(*o.schedule), layers_(o.layers), formats_(formats_of(*o.schedule)) {
    // Everything the exchanges rely on is checked before the first one.
    for (int t = 0; t < schedule_.period; ++t) {
      const auto& ops = schedule_.ops(t);
      for (std::size_t i = 0; i < ops.size(); ++i) {
        const CommOp& op = ops[i];
        if (op.kind != OpKind::kParameterServer) {
          throw std::logic_error(fmt::format("server {}: iteration {} operation {} is {}, not a parameter-server "
                                             "exchange",
                                             o_.server, t, i, to_string(op.kind)));
        }
        const int index = static_cast<int>(i);
        if (op.server != o_.server) continue;
        layers_of_[{t, index}] = whole_layers(op, layers_, t, index);
        if (!lossy(op.encoding)) continue;
        for (int l : layers_of_[{t, index}]) {  // Note [Compressed exchanges]
          if (!reference_.has(l)) reference_.set(l, pack_parameters(layers_, {l}));
        }
      }
    }
    if (o_.first_iteration > 0) {  // resumed: r as the checkpoint holds it
      State left = o_.state;
      reference_.load("reference/", left);
      expect_none_left(left);
    }
  }

  void run() {
    // Receives are posted one iteration ahead, so that a worker's pushes of the
    // next iteration land as soon as it sends them. Exchanges are served in the
    // schedule's order, which the simulator models (Note [Parameter-server
    // transport] in sim/simulator.cc).
    if (o_.first_iteration < o_.iterations) post(o_.first_iteration);
    for (std::int64_t t = o_.first_iteration; t < o_.iterations; ++t) {
      if (t + 1 < o_.iterations) post(t + 1);
      auto& exchanges = posted_.front();
      for (Exchange& e : exchanges) serve(e);
      for (Exchange& e : exchanges) {
        for (int p = 0; p < o_.workers; ++p) wait(e, e.sends[static_cast<size_t>(p)], p, "answer");
      }
      posted_.pop_front();
      if (o_.after_iteration) {
        State state;
        reference_.save("reference/", state);
        o_.after_iteration(t + 1, state);
      }
    }
  }

 private:
  struct Exchange {
    std::int64_t iteration = 0;
    int index = 0;
    std::vector<int> layers;
    std::vector<torch::Tensor> pushes;  // one per worker
    std::vector<Work> recvs;
    std::vector<Work> sends;
    torch::Tensor answer;
  };

  void post(std::int64_t t) {
    auto& exchanges = posted_.emplace_back();
    const int period_iteration = static_cast<int>(t % schedule_.period);
    const auto& ops = schedule_.ops(period_iteration);
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const CommOp& op = ops[i];
      if (op.server != o_.server) continue;
      Exchange e{.iteration = t, .index = static_cast<int>(i),
                 .layers = layers_of_.at({period_iteration, static_cast<int>(i)})};
      const int tag = exchange_tag(schedule_, t, e.index);
      const std::int64_t values = op.bytes() / static_cast<Bytes>(sizeof(float));
      for (int p = 0; p < o_.workers; ++p) {
        std::vector<torch::Tensor> in{
            lossy(op.encoding)
                ? torch::empty({static_cast<std::int64_t>(format_of(op).bytes(values))}, torch::kUInt8)
                : torch::empty({values}, torch::kFloat32)};
        e.recvs.push_back(o_.group->recv(in, p, tag));
        e.pushes.push_back(in.front());
      }
      exchanges.push_back(std::move(e));
    }
  }

  void wait(const Exchange& e, const Work& work, int worker, const char* what) {
    bool completed = false;
    try {
      completed = work->wait();
    } catch (const std::exception& error) {
      throw std::runtime_error(fmt::format("server {}: the {} of worker {} for iteration {} operation {} failed "
                                           "(the worker died, or did not take part within the timeout): {}",
                                           o_.server, what, worker, e.iteration, e.index, error.what()));
    }
    if (!completed) {
      throw std::runtime_error(fmt::format("server {}: the {} of worker {} for iteration {} operation {} was "
                                           "aborted",
                                           o_.server, what, worker, e.iteration, e.index));
    }
  }

  void serve(Exchange& e) {
    const Seconds waiting = o_.recorder ? o_.recorder->now() : 0;
    for (int p = 0; p < o_.workers; ++p) wait(e, e.recvs[static_cast<size_t>(p)], p, "push");
    const Seconds start = o_.recorder ? o_.recorder->now() : 0;
    torch::NoGradGuard no_grad;
    const CommOp& op = schedule_.ops(static_cast<int>(e.iteration))[static_cast<size_t>(e.index)];
    const bool encoded = lossy(op.encoding);  // Note [Compressed exchanges]
    torch::Tensor mean;
    if (encoded) {
      std::vector<torch::Tensor> pushes;
      for (const torch::Tensor& wire : e.pushes) {
        pushes.push_back(format_of(op).decoded(wire, op.bytes() / static_cast<Bytes>(sizeof(float))));
      }
      mean = torch::stack(pushes).mean(0);
      if (schedule_.easgd.beta > 0) mean = reference_.gather(e.layers) + mean;
    } else {
      mean = torch::stack(e.pushes).mean(0);
    }
    if (schedule_.easgd.beta > 0) {
      torch::Tensor centre = pack_parameters(layers_, e.layers);
      move_centre(centre, mean, schedule_.easgd.beta);
      if (o_.outer != nullptr) step_outer(e.layers, centre);
      unpack(centre, layers_, e.layers, /*gradients=*/false);
      e.answer = centre;
    } else {
      unpack(mean, layers_, e.layers, /*gradients=*/true);
      for (int l : e.layers) {
        o_.optimizer->step(l);
        o_.optimizer->zero_grad(l);
      }
      e.answer = pack_parameters(layers_, e.layers);
    }
    if (encoded) {
      const torch::Tensor reference = reference_.gather(e.layers);
      e.answer = format_of(op).encoded(e.answer - reference);
      reference_.scatter(e.layers, advanced(reference, format_of(op), e.answer));
    }
    const int tag = exchange_tag(schedule_, e.iteration, e.index);
    for (int p = 0; p < o_.workers; ++p) {
      std::vector<torch::Tensor> out{e.answer};
      e.sends.push_back(o_.group->send(out, p, tag));
    }
    if (o_.recorder) {
      const int iteration = static_cast<int>(e.iteration);
      const auto bytes = static_cast<Bytes>(e.answer.nbytes());
      o_.recorder->add({.lane = "pushes", .name = fmt::format("waiting for {} pushes ({})", o_.workers,
                                                              format_bytes(bytes)),
                        .start = waiting, .end = start, .iteration = iteration, .layer = e.layers.back(),
                        .bytes = bytes * o_.workers});
      o_.recorder->add({.lane = "update", .name = schedule_.easgd.beta > 0 ? "centre update" : "optimizer step",
                        .start = start, .end = o_.recorder->now(), .iteration = iteration,
                        .layer = e.layers.back()});
    }
  }

  const WireFormat& format_of(const CommOp& op) const { return *formats_.at(to_string(op.encoding)); }

  // ServerOptions::outer: `moved` (the layers packed, as move_centre left them) is
  // the target of each layer's outer step, and becomes the stepped centre.
  void step_outer(const std::vector<int>& layers, torch::Tensor& moved) {
    std::int64_t offset = 0;
    for (int l : layers) {
      const std::int64_t n = o_.outer->agreed().flat(l).numel();
      o_.outer->step({.layer = l, .offset = 0, .length = n * static_cast<Bytes>(sizeof(float))},
                     moved.narrow(0, offset, n));
      offset += n;
    }
  }

  const ServerOptions& o_;
  const Schedule& schedule_;
  std::vector<std::vector<torch::Tensor>> layers_;
  std::map<std::pair<int, int>, std::vector<int>> layers_of_;  // (period iteration, op) -> whole layers
  // Note [Compressed exchanges], for this server's operations with a lossy encoding.
  const std::map<std::string, std::unique_ptr<WireFormat>> formats_;
  LayerValues reference_;  // r: what this server last answered
  std::deque<std::vector<Exchange>> posted_;  // iterations whose receives are posted
};

}  // namespace

void run_server(const ServerOptions& options) {
  if (options.schedule == nullptr || !options.group || options.workers < 1 || options.first_iteration < 0 ||
      (options.schedule->easgd.beta == 0 && options.optimizer == nullptr)) {
    throw std::logic_error("run_server: ServerOptions needs a schedule, a group, workers >= 1, "
                           "first_iteration >= 0 and, for synchronous PS, an optimizer");
  }
  if (options.group->getRank() != options.workers + options.server) {
    throw std::logic_error(fmt::format("run_server: server {} of a job with {} workers must be rank {}, not {}",
                                       options.server, options.workers, options.workers + options.server,
                                       options.group->getRank()));
  }
  Server(options).run();
}

}  // namespace weft::runtime
