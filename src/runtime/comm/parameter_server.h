// The parameter-server runtime (docs/strategies.md §2, §4.4, docs/runtime.md §3; seed 000): the workers' side of
// a kParameterServer operation — an OpExecutor for the engine — and the server
// processes that answer them.
//
// Ranks. A job of P workers and S servers is one Gloo group of P + S ranks:
// ranks 0..P−1 train, rank P + s is server s (the contract `weft netem --servers`
// and `weft train --servers` set up). A schedule names the server of each
// operation (CommOp::server); every worker and every server builds the same
// schedule, so no one has to tell the server what is coming.
//
// The exchange of operation i of global iteration t between worker p and its
// server: p sends the packed chunks (tag exchange_tag(t, i)) and posts the receive
// of the answer with the same tag; the server receives the P pushes, updates, and
// sends each worker the answer. Gloo matches point-to-point messages by (peer,
// tag), so workers need not agree on an order, and no leader is needed (the
// engine runs each worker's own Dispatcher; Note [Collective order] in engine.h).
//
// Note [What the server does] (schedulers/ps.h) decides the update from
// Schedule::easgd:
// - easgd.beta == 0 (`ps`): workers push gradients; the server averages them into
//   its copy's gradients, steps its optimizer for those layers (synchronous PS:
//   the optimizer state lives on the server) and answers with the parameters; the
//   worker overwrites its own (OpExecutor::Step::kElsewhere).
// - easgd.beta > 0 (`ps-interleaved`): workers take their local step when the
//   layer's backward ends and push w_k; the server, holding all P copies, moves
//   the centre, w̃ ← (1−β)·w̃ + β·mean_k(w_k), and answers with w̃; the worker
//   applies the elastic term w_k ← w_k − α·(w_k − w̃) before the layer's next
//   forward. The elastic term uses the centre just computed, so with α = β = 1
//   every worker ends the exchange at mean_k(w_k): per-step model averaging when
//   T = 1, which the tests check against `flsgd --H 1`.
//
// Operations must carry whole layers (the PS schedulers fuse whole layers) and one
// operation per message (their dispatch policy never fuses); both are checked.
//
// Note [Compressed exchanges]
// ---------------------------
// Rule: an operation whose encoding (CommOp::encoding) is fp16, bf16 or int8
// pushes enc(x + e): x the worker's gradients (ps) or its parameters minus r
// (ps-interleaved), e the worker's error feedback, then e ← x + e − dec(enc(x + e)).
// The server decodes the pushes and averages them in worker order (adding r back
// for parameters). r, per layer, is the value last answered. The server encodes
// each answer once, relative to r, as enc(v − r) (v: its new parameters or
// centre), sends those same bytes to every worker, and it and every worker set
// r ← r + dec(bytes); a ps worker's parameters become r.
// Invariant: after each exchange the server and every worker hold bit-identical
// r (the same bytes decoded, the same float32 addition), starting from the common
// initial parameters.
// Why: error feedback per destination would send each worker other bytes and the
// workers' models would drift apart; relative to r, what an answer loses (v − r
// after it) is carried by the next answer, with no buffer of its own.
// Checkpoints: e and r are all a compressed exchange carries from one iteration to
// the next. A worker's are its executor's state ("reference/<layer>",
// "feedback/<layer>"), a server's r is ServerOptions::state (docs/checkpoints.md).
//
// Thread-safety: the executor is used by the engine's communication thread; it
// owns one more thread that waits for its exchanges. run_server runs on the
// calling thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/torch.h>

#include "runtime/comm/executor.h"
#include "runtime/model/optimizer.h"
#include "runtime/model/outer_optimizer.h"
#include "schedule/schedule.h"
#include "timeline/recorder.h"

namespace weft::runtime {

// How a worker's timeline names its exchanges with server s: this prefix, then s.
// The measured summary finds each server's incast by it (runtime/train/trainer.cc).
inline constexpr std::string_view kExchangeEventPrefix = "push/pull server ";

// The Gloo tag of operation `index` of global iteration `iteration`; unique among
// the exchanges a worker and a server can have open at once.
int exchange_tag(const Schedule& schedule, std::int64_t iteration, int index);

// EASGD (docs/strategies.md §4.4) on flat float tensors of the same size.
// The worker's elastic term: returns local − α·(local − centre).
torch::Tensor elastic_pull(const torch::Tensor& local, const torch::Tensor& centre, double alpha);
// The server's centre update, in place: centre ← (1−β)·centre + β·mean.
void move_centre(torch::Tensor& centre, const torch::Tensor& mean, double beta);

// The worker's executor of kParameterServer operations.
// REQUIRES options.collectives has options.workers + (servers named by the
// schedule) ranks; options outlives the executor.
std::unique_ptr<OpExecutor> make_parameter_server_executor(const EngineOptions& options);

struct ServerOptions {
  const Schedule* schedule = nullptr;  // REQUIRES: the workers' schedule; outlives the call
  // The server's copy of the model (same initialisation as the workers'); layers[l]
  // as LayeredModel::layer_parameters(l). The server updates its own layers.
  std::vector<std::vector<torch::Tensor>> layers;
  LayerOptimizer* optimizer = nullptr;  // over `layers`; used when easgd.beta == 0
  // Optional, EASGD only: the centre's move (move_centre) is a pseudo-gradient
  // stepped by this outer optimizer over `layers` (runtime/model/outer_optimizer.h);
  // with lr 1 and momentum 0 that is the plain move, up to rounding.
  OuterOptimizer* outer = nullptr;
  c10::intrusive_ptr<c10d::ProcessGroup> group;
  int workers = 1;            // P; this server is rank P + server
  int server = 0;
  std::int64_t iterations = 0;  // the workers' number of training iterations
  Recorder* recorder = nullptr; // optional
  // The first iteration served: a job resumed from a checkpoint (docs/checkpoints.md).
  std::int64_t first_iteration = 0;
  // What the server carries between exchanges besides `layers` and `optimizer`:
  // for its compressed operations, r per layer, "reference/<layer>" (Note
  // [Compressed exchanges]). Read when first_iteration > 0: the state after_iteration
  // passed when the checkpoint was taken; every entry must be there.
  std::map<std::string, torch::Tensor> state;
  // Optional: called with t + 1 once every exchange of iteration t is answered and
  // its sends have completed — the server's layers and optimizer are then its state
  // after t + 1 iterations (where a checkpoint is taken), and `state` the rest of it
  // (the server's own tensors: valid, and not to be modified, during the call).
  std::function<void(std::int64_t done, const std::map<std::string, torch::Tensor>& state)> after_iteration;
};

// Serves every exchange of `server` for iterations first_iteration..iterations−1,
// then returns.
// THROWS std::runtime_error naming the server, the worker, the iteration and the
// operation when an exchange fails (a worker died, or did not push within the
// group's timeout); std::logic_error if an operation does not carry whole layers;
// std::invalid_argument naming an entry of options.state that is missing, of
// another size, or not one the server keeps.
void run_server(const ServerOptions& options);

}  // namespace weft::runtime
