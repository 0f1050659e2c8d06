// The communication engine: one worker's executor of a Schedule (docs/design.md §1.3, docs/runtime.md §3),
// the runtime counterpart of the simulator; how each kind of operation moves its
// bytes is its OpExecutor's (runtime/comm/executor.h). It reads nothing but the Schedule and
// drives the same Dispatcher (schedule/dispatcher.h) with real events: a layer's
// gradients becoming available, a collective completing.
//
// Per iteration t the training thread does
//   for l in 0..L-1: engine.wait_for_forward(l); x = model.forward_layer(l, x);
//   loss = ...; engine.start_backward(); loss.backward(); engine.end_backward();
// and once at the end engine.finish(). Meanwhile the engine's communication thread
//   - learns from gradient hooks (Note [Gradient hooks]) that layer l's backward
//     ended, makes the operations with ready_after == l ready (after the worker's
//     release offset) and asks the Dispatcher which messages to send;
//   - packs the chunks of each message into one flat buffer (a chunk is a byte range
//     of a layer's parameters or gradients, the layer's tensors flattened and
//     concatenated in layer_parameters order) and runs ONE collective for it;
//   - unpacks the result and applies the layer-wise update: an averaged gradient is
//     written back and the layer's optimizer stepped as soon as all its bytes are
//     averaged; for parameter averaging the local step was taken when the layer
//     became ready and the parameters are overwritten with the average.
// wait_for_forward(l) in iteration t returns once every operation of t−1 that
// layer l's forward depends on has completed and layer l has been updated.
//
// Note [One worker inline]
// ------------------------
// When every message of the schedule would complete on the spot (one worker, only
// means, no release offsets), there is nothing to wait for and so no reason for a
// communication thread: the engine starts none, and the training thread handles
// each event itself the moment it happens — a layer's last gradient runs its
// update inside the backward, as the thread would have. A thread would only add a
// hand-off per layer and updates competing with the backward for a core (a 1 ms
// iteration took 1.2× a plain loop's time with it, 1.01× without).
//
// Note [Collective order]
// -----------------------
// Gloo matches collectives by the order in which each rank issues them, so every
// rank must issue the same messages — the same operations fused, in the same
// order. With the in-order policy the sequence is a function of the schedule alone
// (one operation at a time, in list order) and every rank runs its own Dispatcher.
// The credit and window policies decide from which operations happen to be ready
// when a message completes — a race whose outcome differs between ranks (one rank's
// layer 3 is ready when its message finishes, another's is not), which would
// deadlock Gloo or, worse, add up different layers' bytes. There rank 0 leads: it
// alone runs the Dispatcher, on its own events, and announces each message it
// starts (sequence number, iteration, operation indices) just before the
// message's all-reduce; the other ranks always have the next announcement's
// receive posted, and issue each announced message, in order, as soon as its
// operations are ready locally. The policy then runs exactly as the simulator
// runs it, on rank 0's clock; the cost is one small message per message and
// follower, and a follower must not wait longer than the group's timeout for rank
// 0's next decision (an iteration, or rank 0's evaluation, longer than the
// timeout is reported as a failure). Rank 0 ends the stream with a stop
// announcement in finish().
// How the announcements travel decides how late the followers are:
//   - on a group of their own (EngineOptions::open_announcements), not on
//     `collectives`: Gloo runs each collective to its end on one of a group's few
//     threads, so a follower's pending announcement held a thread for good — its
//     messages ran one at a time while rank 0 ran several — and rank 0's next
//     announcement queued behind the all-reduces already running;
//   - sent by rank 0 to each follower directly, not by broadcast: Gloo's is a
//     binomial tree, where a follower waits for another to pass it on;
//   - each one listened for as soon as the one before arrived, not once its
//     message was issued: rank 0 announces several messages at an instant.
// Rejected alternative: making every rank decide only at
// ready events, deferring completions to the next one — deterministic without
// messages, but it changes the policy (credit released late, the link idles) so
// measurements would no longer test the predictions.
//
// Note [Next message before the update]
// -------------------------------------
// When a message completes, the engine first copies its result out of the flat
// buffer, then hands the completion to the Dispatcher and starts whatever that
// frees (the next window, the credit just returned), and only then steps the
// layers that are now whole and wakes the forwards waiting for them. The link is
// the bottleneck this engine exists to keep busy: it must not idle while the
// optimizer steps, nor race the woken forward for the core. It is also what the
// simulator does — a message's successor starts at its end, whatever the updates
// cost — so measured and predicted timelines agree on when the next message goes.
//
// Note [Local SGD under the user's step]
// --------------------------------------
// Local SGD averages parameters after a layer's local step, and the engine
// takes that step itself inside the backward. A user's own optimizer.step()
// (weft.DataParallel's update="ddp": any optimizer, clipping, accumulation)
// runs after the backward instead, so there the engine sees no backward at all
// and learns of the step from stepped_outside(): the layers become ready then,
// in the backward's order, with nothing left for the engine to step, and the
// averages start from the stepped parameters — PyTorch's PostLocalSGD (step,
// then average every H) for flsgd, the same rule per layer set for the others.
// The simulator prices it where told (Note [The workers' own step] in
// sim/simulator.cc).
//
// Note [Gradient hooks]
// ---------------------
// Readiness comes from a post-hook on each parameter's gradient accumulator (the
// autograd node that writes .grad; what DDP's Reducer uses), not from a hook
// registered with Tensor::register_hook: such a tensor hook runs before the
// gradient is written to .grad, so a communication thread reading .grad at that
// moment would race with the write. Per-parameter hooks are enough to know that a
// layer's gradient is final because (1) autograd runs a leaf's accumulator once per
// backward, after summing every use's contribution — and our layers use each
// parameter once per forward anyway — and (2) gradients are zeroed after each
// update (the engine calls LayerOptimizer::zero_grad), so .grad holds exactly this
// iteration's gradient. When the last parameter of layer l has its gradient, no
// pending backward node needs layer l's parameters any more (autograd runs a
// leaf's accumulator only after every node that used the leaf), so the engine may
// update them in place while the backward continues below.
//
// Thread-safety: the public methods are for the one training thread; the hooks
// run on it too (CPU autograd runs the backward on the calling thread), and so does
// everything when the engine runs inline (Note [One worker inline]). No other
// collective may be issued on the process group while the engine exists.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/torch.h>

#include "runtime/comm/executor.h"
#include "schedule/dispatcher.h"
#include "schedule/schedule.h"

namespace weft::runtime {

class Engine {
 public:
  // Installs the gradient hooks and starts the communication thread.
  // THROWS std::logic_error if a chunk does not fit its layer's tensors or is not
  // a whole number of float32 elements, a parameter has no gradient accumulator,
  // the schedule mixes step kinds within one layer's operations, or it needs a
  // leader and open_announcements is empty or opens a group of other ranks.
  explicit Engine(EngineOptions options);
  // Removes the hooks and stops the thread; does not wait for collectives in
  // flight (their buffers are kept alive by the process group). Never throws.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Blocks until layer `layer` may run its forward in the current iteration (see
  // the header comment). THROWS std::runtime_error naming this rank, the message
  // and the elapsed time if a collective failed (a peer died or timed out).
  void wait_for_forward(int layer);

  // Brackets loss.backward() of the current iteration. end_backward THROWS
  // std::logic_error naming the layer if one of its parameters got no gradient
  // (the layer would never become ready) unless EngineOptions::zero_missing_gradients,
  // and rethrows a communication failure.
  void start_backward();
  void end_backward();

  // An iteration whose backward the engine did not see, and whose layers the
  // caller's own optimizer has just stepped (Note [Local SGD under the user's
  // step]): every layer is ready now, L-1 down to 0 as a backward makes them,
  // so the parameter averages the schedule starts after a layer's update
  // average the stepped parameters. The engine's optimizer must not step (its
  // layers' options "none"). THROWS as end_backward.
  void stepped_outside();

  // Blocks until every operation started so far has completed and every layer
  // is updated (e.g. before an evaluation). THROWS as wait_for_forward.
  void drain();

  // drain(), then closes the message stream (Note [Collective order]) so that the
  // process group can be destroyed. Call once, after the last iteration.
  void finish();

  // Iterations whose backward has ended.
  int iterations_done() const { return iteration_; }

  // What the executors carry between messages (codecs' error feedback and
  // factors, the agreed values compressed parameter averages start from, the
  // compressed parameter-server exchanges' answered values and feedback), named
  // "<kind>/<entry>" (e.g. "average-gradients/int8/feedback/3"), for a checkpoint
  // (docs/checkpoints.md). REQUIRES: drained, or no iteration started yet.
  std::map<std::string, torch::Tensor> state() const;
  // Sets what state() of an engine of the same schedule and layers returned.
  // REQUIRES: before the first iteration. THROWS std::invalid_argument naming an
  // entry this engine does not keep, or one of another size.
  void load_state(const std::map<std::string, torch::Tensor>& state);

  // Every layer's agreed parameters (OpExecutor::agreed), flat in layer order;
  // none unless an executor holds them for every layer (EASGD: before each
  // layer's first answer of this run, it does not). REQUIRES: drained.
  std::optional<torch::Tensor> agreed_parameters() const;

 private:
  struct Event;
  struct EventQueue;
  struct Layout;
  struct InFlight;
  struct Progress;
  struct CommState;
  class Comm;

  bool runs_inline(const Schedule& schedule) const;
  void on_gradient(int layer, std::size_t parameter);
  void post(Event event);  // to the communication thread, or handled at once when inline
  void communication_loop();
  void fail(std::exception_ptr error);
  void wait_until(std::unique_lock<std::mutex>& lock, const char* what, const std::function<bool()>& done);

  EngineOptions options_;
  int rank_ = 0;
  int world_ = 1;
  std::vector<std::unique_ptr<OpExecutor>> executors_;  // indexed by OpKind; only the kinds used
  c10::intrusive_ptr<c10d::ProcessGroup> announcements_;  // only under a leader
  bool ordered_ = false;  // some operation is a collective (Note [Collective order])
  std::unique_ptr<Layout> layout_;

  // Training thread only.
  int iteration_ = 0;
  std::vector<int> gradients_missing_;  // per layer, in the current backward
  bool in_backward_ = false;
  Seconds last_gradient_time_ = 0;
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, std::uintptr_t>> hooks_;

  // Shared between the training and the communication thread.
  std::mutex mutex_;
  std::condition_variable progress_changed_;
  std::unique_ptr<Progress> progress_;
  std::exception_ptr error_;
  bool finished_ = false;

  std::shared_ptr<EventQueue> events_;  // also held by collective callbacks
  std::unique_ptr<CommState> comm_;     // communication thread only (the training thread when inline_)
  bool inline_ = false;                 // Note [One worker inline]; then there is no thread_
  std::thread thread_;
};

}  // namespace weft::runtime
