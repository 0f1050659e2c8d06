// `weft bench` (docs/cli.md §5): every strategy trained for real under emulated links,
// measured against its prediction and against PyTorch DDP.
//
// For the whole bench, once:
//  1. which strategies `weft train` accepts (Note [Probing strategies]);
//  2. the model's layer times, measured under the training's contention (Note
//     [Profiling under contention]) → <out>/profile.json.
// Then for each link (one emulated bandwidth, or plain loopback):
//  3. the all-reduce fit a + b·n, measured by P processes over that link
//     (`weft profile --network`) → <out>/net-<link>.json, and the layer times,
//     how much compute and communication slow each other and how far the workers
//     are out of step over it (Note [Interference per link])
//     → <out>/profile-<link>.json and <out>/host-<link>.json;
//  4. the planner's prediction of every strategy from that profile, host and fit
//     (`weft plan --json`, once per architecture) → <out>/plan-<link>.json, and
//     <out>/plan-<link>-ps.json for the parameter-server strategies;
//  5. each strategy trained by P workers over the link (`weft train` with the same
//     profile, fit and tuned options, so that it executes the schedule that was
//     predicted), in each --compression encoding (a parameter-server strategy in
//     each element-wise one, or none) →
//     <out>/runs/<link>-<run>.jsonl, and each PyTorch peer (--peers) the same way;
//     a parameter-server strategy with Training::servers servers beside the
//     workers, each behind a link like a worker's;
//  6. the steady-state iteration time of each run (Note [Steady-state iteration
//     time], statistics.h) against the prediction, against the prediction on
//     the layers re-timed just before the run (Note [Re-timed before each run]),
//     and against the prediction on the run's own compute (Note [Predicted on
//     the run's own compute]).
// Steps 5 and 6 are repeated --repeats times (Note [Repeated runs]).
// Results are rewritten after every run (<out>/bench.json, results.h), so an
// interrupted bench keeps what it measured; then the plots and one chosen run's
// predicted and measured traces (<out>/trace-{predicted,measured}.json).
//
// Every child process is supervised (child.h): a failed run is recorded and the
// bench goes on; SIGINT/SIGTERM end the running child (which removes its emulated
// links) and the bench with BenchInterrupted.
//
// Note [Profiling under contention]
// Rule: the model is profiled by P processes timing their layers together
// (`weft profile --model --nproc P`; Notes [Profiling together] and [Time
// slices] in runtime/measure/layer_profiler.h), the median over them layer by layer.
// Why: the P workers of a run share the cores; P processes started apart
// profiled 25% fast. Known bias: a worker waiting for the network leaves its
// core to the others, so on slow links training sees less contention than this.
//
// Note [Interference per link]
// Rule: each link gets its own profile and host, measured over that link by
// `weft profile --interference --host` (runtime/measure/layer_profiler.h): its layers,
// timed by the workers inside their namespaces, the share of a core the link's
// traffic keeps busy and the workers' skew (docs/cost-model.md §7.3). The
// link's predictions, simulated trace and training runs all read those two
// files (profile-LINK.json, host-LINK.json). Why: on shared cores a layer beside
// a message runs slower, and so does the message, by amounts that depend on the
// link; layers timed on loopback minutes earlier ran 6–16% faster than the same
// layers in the namespaces, where training computed as the latter did.
//
// Note [Repeated runs]
// Rule: with --repeats N every strategy of a link (and each peer) is trained N
// times in rounds — all once, then all again — and the results keep each run's
// time and, for the rest, the median run (the lower median for even N; in
// accuracy mode the median by time to the target, a run that never reaches it
// counting as slowest). Why: two runs a minute apart differ by up to ±8% here;
// rounds spread a slow spell over every strategy, and a real median run keeps
// its metrics, loss and accuracy together. Metrics go to
// runs/<link>-<strategy>.<k>.jsonl; --seeds s1,s2,... varies the seed by round.
//
// Note [Predicted on the run's own compute]
// Rule: each weft run is predicted again with every layer scaled by its measured
// compute over the plan's (`predicted_on_own_compute_s`), simulating the
// schedule the run executed (runs/<link>-<strategy>.schedule.json, `weft
// simulate --schedule`), not the strategy planned again on the scaled layers.
// Why: the machine's speed drifts within minutes; an error that vanishes here
// was the machine's, one that remains is the cost model's or the network's. The
// scaling is uniform, so uneven slowdowns are only approximately put right; the
// PyTorch peer reports no compute and gets no such prediction.
//
// Note [Re-timed before each run]
// Rule: right before each run, P processes time the layers again for 100
// iterations (`weft profile --nproc P`), and the run's schedule is simulated on
// the link's profile scaled by that compute (`predicted_retimed_s`): a full
// prediction on the machine as it is then. Why 100: which processes share a core
// lasts long enough to bias 30 iterations (one re-timing in eight came out 50%
// slow); 100 kept eight within 13% of each other.

// Note [Probing strategies]
// `weft train` has no "list what you can train" flag. Its option check looks at
// --strategy before --steps, so `weft train --strategy S --steps 0` is rejected in
// any case, within a process start and without training: if the message names
// --strategy, S cannot be trained (the message says why, and the bench repeats it);
// otherwise it objected only to --steps 0, and S can. A parameter-server strategy
// is probed with the --servers it would be trained with. A strategy weft train
// accepts but cannot yet run (a runtime still being written) fails its run, which
// is recorded in `failed`, and the bench goes on. A site mode (--site-averaging)
// is probed the same way, with its flags and the sites: a message that names
// --strategy, --hierarchical or --site-every (an objection, or a flag weft train
// does not know yet) skips that strategy in that mode.
//
// Note [Sites in the bench]
// Rule: with sites (--sites AxB --wan-bandwidth W --wan-latency D, or --topology
// FILE), every command of a link runs under `weft netem` with the same sites:
// the network fit, the interference profile, every weft run and every PyTorch
// peer (which reads its site from WEFT_SITE and WEFT_SITES). A flat run (one
// ring over every worker, as without sites) is planned, simulated and trained on
// the fit measured across the sites, as on a uniform link: the fit is that ring's
// measured cost, WAN hop included. A run averaging by sites (--site-averaging:
// `weft train --hierarchical`, `--site-every N`) is planned, simulated and
// trained with the sites' links instead (the planner refuses a fit beside sites:
// it measured one flat ring), one `weft plan` per mode and encoding, whose failure
// leaves those runs without a prediction rather than ending the bench. Parameter
// servers are left out with sites: the sites hold the workers only.
// Why: a comparison is fair only on one network; and the fit, where it applies,
// is what made the flat predictions agree with their runs on uniform links.
//
// Thread-safety: run_bench runs one bench per process (it owns the children it
// starts, and the signals object is process-wide).
#pragma once

#include <filesystem>
#include <iosfwd>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/commands.h"
#include "bench/results.h"
#include "netem/supervisor.h"

namespace weft::bench {

struct BenchOptions {
  Tools tools;        // the programs, P and the base port
  Training training;  // model, batch, lr, optimizer, seed, H, steps, eval_every
  std::vector<Link> links;  // one round each; {"loopback", 0} when not emulating
  std::vector<std::string> strategies;  // empty: every strategy `weft train` accepts
  // Wire encodings (--compression): each all-reduce strategy runs in each; the
  // parameter-server ones in each element-wise one (none if there is none).
  std::vector<std::string> compression = {"none"};
  // PyTorch peers (--peers: ddp, fp16, powersgd:R, postlocalsgd:H, hierarchical:H), run like weft's.
  std::vector<std::string> peers = {"ddp"};
  // How weft's runs average across sites (--site-averaging, Note [Sites in the
  // bench]): each strategy runs in each mode it takes. Modes other than flat
  // need links with sites.
  std::vector<SiteMode> site_modes = {SiteMode{}};
  Mode mode = Mode::kIterations;
  double target_accuracy = 0.85;  // accuracy mode: runs stop once rank 0 reaches it
  int warmup = 5;                 // iterations left out of the steady state
  int repeats = 1;                // runs of each strategy (Note [Repeated runs])
  // Non-empty: one run of each strategy per seed, in rounds (replaces repeats and
  // Training::seed); accuracy mode then reports the median time to accuracy
  // and its range, and plots every run.
  std::vector<std::uint64_t> seeds;
  std::filesystem::path out = "build/weft-bench";
  // The run whose predicted and measured traces are kept: this strategy on the
  // first link (or, should it fail, the next that succeeds). Empty: the fastest
  // predicted of those trained.
  std::string trace_strategy;
  Seconds run_timeout = 1800;  // per child process
  // Progress: one short line per step; with `verbose` also each link's measured
  // host and each run's compute and second predictions (re-timed, own compute).
  bool verbose = false;
};

// The bench was interrupted by a signal; what it measured so far is in
// <out>/bench.json.
class BenchInterrupted : public std::runtime_error {
 public:
  BenchInterrupted(int signal, const std::string& what) : std::runtime_error(what), signal_(signal) {}
  int signal() const { return signal_; }

 private:
  int signal_;
};

// Runs the bench described at the top, writing progress lines to `progress`, and
// returns the results (also written to <out>/bench.json).
// REQUIRES: tools.workers >= 2, !links.empty(), warmup >= 0, training.steps > warmup.
// THROWS UsageError for invalid options (naming the flag), an unknown or untrainable
// strategy named explicitly, or a step shared by all runs failing (profiling the
// model; no run can be predicted without it); BenchInterrupted on SIGINT/SIGTERM;
// std::runtime_error if <out> cannot be written.
BenchResults run_bench(const BenchOptions& options, const netem::TerminationSignals& signals,
                       std::ostream& progress);

}  // namespace weft::bench
