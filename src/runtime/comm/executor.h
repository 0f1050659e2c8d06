// What the engine (runtime/comm/engine.h) asks of the executor of one kind of
// operation, and what it gives every executor: the mean all-reduce of gradients
// or parameters (runtime/comm/averaging.h) and the parameter server's exchange
// (runtime/comm/parameter_server.h) implement OpExecutor; the engine makes one per
// OpKind of its schedule (make_executor) and drives them all alike.
//
// Note [Executors per OpKind]
// ---------------------------
// What an operation's bytes are and how they travel depends only on its OpKind,
// never on the strategy: an OpExecutor per kind says which tensors a chunk packs
// and which it receives, whether the layer's optimizer step is taken before
// communication, after it, or elsewhere (by the parameter server), and how a packed
// message is communicated. kAverageGradients and kAverageParameters are a mean
// all-reduce (a sum over the workers, then division by their number) of gradients or
// parameters — with an outer optimizer (EngineOptions::outer), each averaged chunk
// of parameters is stepped by it before it is written back (docs/local-sgd.md);
// kParameterServer is push, server update, pull over Gloo point-to-point
// (runtime/comm/parameter_server.h). A message's encoding (CommOp::encoding) is carried
// out inside its kind's executor, by a Codec (runtime/comm/codecs.h): the engine packs
// and unpacks float32 whatever travels. Adding a kind means adding an
// OpExecutor, not a branch here. A mean over a single worker changes nothing: the
// executor says so (identity) and the engine completes such a message on the spot,
// without packing, so that one process trains at the speed of a plain loop.
//
// Thread-safety: an executor is driven by the engine's one communication thread.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/torch.h>

#include "runtime/model/optimizer.h"
#include "runtime/model/outer_optimizer.h"
#include "schedule/dispatcher.h"
#include "schedule/schedule.h"
#include "timeline/recorder.h"

namespace weft::runtime {

class SiteCollectives;

// How the operations of one OpKind move their bytes (Note [Executors per OpKind]).
class OpExecutor {
 public:
  enum class Step {
    kBeforeCommunication,  // local step when the layer's backward ends, then send parameters
    kAfterCommunication,   // send gradients, step once all the layer's bytes are back
    kElsewhere,            // send gradients; the parameters come back already updated
  };
  // A message started: `done` completes (or fails) when `result` holds the bytes to
  // unpack. `result` may be the packed buffer itself.
  struct Started {
    c10::intrusive_ptr<c10::ivalue::Future> done;
    torch::Tensor result;
  };
  virtual ~OpExecutor() = default;
  // The tensors a chunk of `layer` packs, in layer_parameters order.
  virtual std::vector<torch::Tensor> operands(int layer) = 0;
  // The tensors the result of a chunk of `layer` is written to.
  virtual std::vector<torch::Tensor> results(int layer) { return operands(layer); }
  // When the layer's optimizer step is taken relative to this kind's communication.
  virtual Step step() const = 0;
  // True when every rank must issue the same messages in the same order (a
  // collective; Note [Collective order]); false for point-to-point exchanges,
  // which are matched by tag.
  virtual bool ordered_across_ranks() const = 0;
  // True when communicating would leave every byte as it is (a mean over one
  // worker): the engine then completes the message at once, without packing.
  virtual bool identity() const { return false; }
  // Starts communicating `packed`, the chunks of `message`'s operations.
  virtual Started start(const Schedule& schedule, const Message& message, torch::Tensor packed) = 0;
  // Turns the communicated result of `message` into the float32 values to unpack
  // (e.g. sum -> mean, fp16 -> float32); `packed` is what was sent.
  virtual void complete(const Schedule& schedule, const Message& message, const torch::Tensor& packed,
                        torch::Tensor& result) = 0;
  // Then, per chunk of the message: `values` (a view of the completed result) are
  // about to be written to the chunk's results; the executor may rewrite them in
  // place (the outer optimizer, runtime/model/outer_optimizer.h). Default: as they are.
  virtual void complete_chunk(const Chunk& /*chunk*/, torch::Tensor /*values*/) {}
  // For the timeline: what a message of this kind does, e.g. "allreduce".
  virtual std::string describe(const Schedule& schedule, const Message& message) const = 0;
  // What the executor carries from one message to the next (its codecs' state,
  // runtime/comm/codecs.h), by name, for a checkpoint. REQUIRES: no message in flight.
  virtual std::map<std::string, torch::Tensor> state() const { return {}; }
  // Sets what state() returned. REQUIRES: no message in flight. THROWS
  // std::invalid_argument naming an entry this executor does not keep.
  virtual void load_state(const std::map<std::string, torch::Tensor>& state);
  // Layer `layer`'s parameters as the workers agree on them, flat, where this
  // executor holds such a value (EASGD: the servers' centre as last answered);
  // none otherwise. REQUIRES: no message in flight.
  virtual std::optional<torch::Tensor> agreed(int /*layer*/) const { return std::nullopt; }
};

struct EngineOptions {
  const Schedule* schedule = nullptr;  // REQUIRES: validated; outlives the engine
  // layers[l] = LayeredModel::layer_parameters(l); float32, contiguous, requires_grad.
  std::vector<std::vector<torch::Tensor>> layers;
  std::vector<std::string> layer_names;  // for timeline events; may be empty
  LayerOptimizer* optimizer = nullptr;   // REQUIRES: over the same layers; outlives the engine
  c10::intrusive_ptr<c10d::ProcessGroup> collectives;
  // Opens a second group of the same ranks for rank 0's announcements (Note
  // [Collective order]). Called once, on every rank, by the constructor, and only
  // when the schedule's policy needs a leader; required then.
  std::function<c10::intrusive_ptr<c10d::ProcessGroup>()> open_announcements;
  // Ranks 0..workers-1 of `collectives` train; the others, if any, are parameter
  // servers (runtime/comm/parameter_server.h). 0 = every rank trains.
  int workers = 0;
  // Averaging messages of at most this many bytes are summed by all-gather rather
  // than ring all-reduce (Note [Small all-reduces by all-gather], process_group.h).
  Bytes gather_below = 0;
  Recorder* recorder = nullptr;          // optional; outlives the engine
  // A wait of the training thread that sees no progress for this long fails. The
  // group's own timeout normally fires first; this catches anything else.
  Seconds stall_timeout = 120;
  // Parameter averaging steps this outer optimizer with each averaged chunk instead
  // of setting the parameters to the average (docs/local-sgd.md). Optional
  // (nullptr = the plain average); REQUIRES: over the same layers; outlives the engine.
  OuterOptimizer* outer = nullptr;
  // This worker's sites (runtime/comm/sites.h): REQUIRED when an operation's reach
  // is not Reach::kAll (uses_sites), which its averaging executor sums on; else
  // unused. Outlives the engine.
  SiteCollectives* sites = nullptr;
  // The first iteration this engine trains (a job resumed from a checkpoint,
  // docs/checkpoints.md): iteration t runs the schedule's t mod period.
  int first_iteration = 0;
  // A parameter that got no gradient in a backward (its forward did not use it):
  // when true, end_backward gives it a zero gradient (allocated if it has none) and
  // its layer becomes ready; when false, end_backward throws (see there).
  bool zero_missing_gradients = false;
};

// The executor of `kind`'s operations. THROWS std::logic_error for a kind
// without one.
std::unique_ptr<OpExecutor> make_executor(OpKind kind, const EngineOptions& options);

}  // namespace weft::runtime
