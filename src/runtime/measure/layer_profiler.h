// Measures the per-layer forward and backward times of a runtime model on this
// machine (`weft profile --model`, docs/design.md §1.1 source 2), giving a profile the
// planner reads like any other (docs/formats.md §6).
//
// Method: each iteration runs the forward layer by layer, every layer's input a
// fresh leaf that requires grad (the batch input for layer 0), timing each
// layer's forward (the last layer's includes the loss); then the backward layer
// by layer in reverse, each layer's autograd run alone from its output gradient
// (the loss for the last layer) to its parameters' and input's gradients. The
// first `warmup` iterations are discarded; a layer's time is the median of the
// next `iterations`, scaled so that the layers add up to the median iteration
// (Note [Time slices]).
//
// Note [Time slices]
// Rule: each layer's median is scaled by (median iteration) / (sum of the
// layers' medians). Why: with more processes than cores a short layer mostly
// runs within one time slice, so its median is its uncontended time, while the
// waits for a core are real; the scaling puts them back in proportion to each
// layer's length and keeps the medians' robustness. Alone, the factor is ~1.
//
// Note [One thread per worker]
// Rule: one LibTorch intra-op thread unless `threads` says otherwise. Why: the
// K workers of `weft train --nproc K` share the cores; a worker profiled with all
// of them would be profiled faster than it runs.
//
// Note [Profiling together]
// Rule: K processes profile at once; they meet at a barrier before the first
// timed iteration, and each keeps computing, untimed, until all have finished.
// Invariant: every timed iteration runs beside K−1 computing processes. Why: a
// process still loading LibTorch, or already done, leaves its cores to the
// others, which then measure too fast.
//
// Note [Profiled as trained]
// Rule: a job that measures its own profile (weft train, weft.DataParallel
// without a profile file) has every worker profile together (Note [Profiling
// together], ProfilingTogether below) and plans from the median, layer by layer,
// of every worker's profile (ProfilingTogether::median). Invariant: every timed
// iteration runs beside workers − 1 computing processes, as training's do.
// Why: workers that share cores compute each layer slower than one alone (the
// ViT's four workers on two cores, profiled by rank 0 alone, were predicted at
// 211 ms per iteration and ran at 412); and they share them unevenly, so one
// worker's profile is a draw (in one start two ran a pass in 260 ms, two in 430),
// while a synchronous step waits for all of them.
//
// Note [Measuring the cores]
// With ModelProfileJob::interference, on a Gloo group of its own, under the
// job's links, a buffer of the model's size all-reduced back to back: while the
// processes only wait, comm_cores = this process's CPU time over the wall time
// of ten rounds, within [0, 1] (the share of a core a message keeps busy); then
// the layers timed again beside it, and comm_weight the weight under which the
// shared cores give that slowdown (cost/host.h's comm_weight_of). A flag summed
// with the data stops every rank's stream at once.
//
// Note [Measuring skew]
// Then the processes meet at all-reduces of one float and time their waits in
// each. The last to arrive waits least, so per all-reduce the mean wait less the
// least is how much later than the average process the last one came: `skew`
// (its median after each of whole iterations, nothing else running, as S-SGD's
// workers reach the gradients' sum), `back_to_back_skew` (right after another
// all-reduce). A collective of the median layer's size, issued as each backward
// starts (the processes met after the forward) and again while all wait, gives
// core_wait = computing − waiting · (its stretch by the shared cores), at least
// 0. Computing 5 iterations apart before each meeting gives `drift`: the extra
// skew per second computed apart beyond an iteration. Every rank computes these
// from every rank's waits, so all agree. Not `skew` from the in-step meetings:
// the one after the backward follows the collective aside's end, itself a
// meeting (it reads a fraction of a millisecond, a whole iteration several).
//
// Thread-safety: sets LibTorch's global intra-op thread count; run one at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "cost/host.h"
#include "runtime/comm/process_group.h"
#include "profile/profile.h"
#include "runtime/model/data.h"
#include "runtime/model/model.h"
#include "units/cores.h"

namespace weft::runtime {

struct LayerProfilerOptions {
  std::string model = "cnn";  // a name of model_names()
  int batch = 32;             // per worker, as in training
  int warmup = 3;
  int iterations = 20;
  int threads = 1;            // Note [One thread per worker]
  std::uint64_t seed = 0;
  // Called after each timed or warm-up iteration with (done, warmup + iterations);
  // may be empty.
  std::function<void(int done, int total)> progress;
  // Profiling together (Note [Profiling together]); both may be empty. Called
  // once, between the warm-up and the first timed iteration:
  std::function<void()> before_timing;
  // Called after the timed iterations, and after every untimed iteration that
  // follows: while it returns true, another untimed iteration runs.
  std::function<bool()> keep_computing;
};

// The meeting of Note [Profiling together] for ranks 0..ranks−1 of a group, in
// its store under `name` (a name no other meeting of the job uses): no
// collective, so that a parameter-server job's servers need not take part.
// Every one of those ranks calls arrive() then keep_computing() until it returns
// false, or leave() once (a rank that failed: the others go on without it).
class ProfilingTogether {
 public:
  ProfilingTogether(const Group& group, int ranks, std::string name);
  // Returns once every rank has arrived or left.
  void arrive();
  // Counts this rank done (once); true while another is not.
  bool keep_computing();
  // arrive() and done, without waiting, and no profile for median(); idempotent.
  void leave();
  // Note [Profiled as trained]: every rank calls it once, after its profiling
  // (or leave() instead); rank 0 gets the median of every rank's `mine` (of
  // those that did not leave), the others nullopt. THROWS std::invalid_argument
  // where ranks profiled different layers.
  std::optional<Profile> median(const Profile& mine);
  // `options` with before_timing and keep_computing set to this meeting's; it
  // must outlive the profiling.
  LayerProfilerOptions hooked(LayerProfilerOptions options);

 private:
  void count(const std::string& what, bool& counted);
  void publish(const std::string& profile_json);

  c10::intrusive_ptr<c10d::Store> store_;
  int rank_;
  int ranks_;
  std::string name_;
  bool arrived_ = false;
  bool done_ = false;
  bool published_ = false;
};

// `weft profile --model M [--nproc K]`: profile_model, or K local processes
// profiling together (Note [Profiling together]), launched and supervised like
// `weft train --nproc K`; inside a job started otherwise (MASTER_ADDR, RANK, ...
// set), this process is one of them. `report` gets the profile and the host —
// on rank 0 the median of every rank's, field by field (the profile's by
// ProfilingTogether::median). Returns the exit status. THROWS
// UsageError for interference in a job of one process.
struct ModelProfileJob {
  LayerProfilerOptions profiler;
  std::optional<int> nproc;
  bool interference = false;  // Notes [Measuring the cores] and [Measuring skew]; 2 or more processes
  Seconds failure_timeout = 60;  // as TrainOptions::failure_timeout
  CorePlacement cores = CorePlacement::kAuto;  // as TrainOptions::cores
  // Gets the profile and the host it was measured on: processes and cores where
  // several processes profiled together, the rest with `interference`.
  std::function<void(const Profile&, const Host&)> report;
};
int run_model_profile(const ModelProfileJob& job);

// How many processes a profile with `nproc` (--nproc) runs on: those of the job
// this process is one of (launched by weft, or started by hand with the torchrun
// variables), else nproc, else 1. THROWS UsageError for invalid job variables.
int profiled_processes(std::optional<int> nproc);

// Builds `options.model` and a synthetic batch of its shape and measures it.
// THROWS UsageError for an unknown model, a batch, warmup, iterations or threads
// out of range (naming the field and what is accepted).
Profile profile_model(const LayerProfilerOptions& options);

// Measures `model` on `batch`; options.model only names the profile, whose batch
// is the batch's size. Leaves the model's gradients set. REQUIRES: the batch fits
// the model.
Profile profile_model(LayeredModel& model, const Batch& batch, const LayerProfilerOptions& options);

}  // namespace weft::runtime
