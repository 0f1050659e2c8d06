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
// When more processes compute than there are cores, the kernel gives each a few
// milliseconds at a time. A layer of a millisecond mostly runs within one slice,
// at full speed, and only now and then spans the wait for the next one: its
// median is its uncontended time. The waits are real — the iteration as a whole
// takes about twice as long with 4 processes on 2 cores — so the medians alone
// profiled a contended worker as if it were alone (4 processes measured forwards
// of 4.5–9 ms where training ran 11–12). Scaling every layer by the
// median iteration over the sum of the layers' medians keeps the layers'
// proportions robust to outliers and puts the waits back, spread over the layers
// in proportion to their length; alone, the factor is about 1.
//
// Note [One thread per worker]
// By default LibTorch runs with one intra-op thread (torch::set_num_threads(1)):
// the K local workers of `weft train --nproc K` share this machine's 2 cores, and
// a worker that measured itself with both cores would be profiled faster than it
// will run. `threads` changes it for machines with a core per worker to spare.
//
// Note [Profiling together]
// The workers of a run share this machine's cores, so they must be profiled while
// they share them: K processes, each timing its own layers. Started one by one,
// they would not all compute at once — a process loading LibTorch or already done
// leaves its share of the cores to the others, which then measure too fast (a
// bench of 4 free-running processes profiled 30 ms of compute per iteration where
// its training computed 39). So the processes meet at a barrier before their
// first timed iteration, and each keeps computing, untimed, until every one has
// finished its timed iterations: every timed iteration runs beside K−1 others.
//
// Note [Measuring interference]
// With ModelProfileJob::interference, the processes go on, after profiling as
// above, to all-reduce a buffer of the model's size back to back on a second Gloo
// group (so that its collectives never interleave with the first group's
// barriers), under whatever links the job runs on: first alone, timing ten
// all-reduces (after one that warms the connections up), then while profiling
// again, for as many iterations as ten of those all-reduces take, and half a
// second, if that is more than asked (the timed iterations must hold whole
// all-reduces, which take longer while computing: with three all-reduces' worth,
// mlp's 2-process profile held none in 2 of 11 runs, with ten in 1 of 14).
// The profile keeps the first phase's layers, and sets compute_slowdown =
// (compute per iteration while all-reducing) / (compute alone) − 1 and
// comm_slowdown = (median all-reduce while computing) / (median all-reduce alone)
// − 1, each at least 0: what the simulator needs to slow the layers and messages
// that overlap (Note [Interference], sim/simulator.cc). The stream stops when any
// rank asks, in a flag summed with the data, so every rank runs the same number
// of all-reduces. Then the same for point-to-point transfers, on a group of their
// own: each rank sends a buffer of the model's size to the next rank while
// receiving one from the one before, alone and then while profiling as long
// again, and transfer_slowdown = (median transfer while computing) / (median
// alone) − 1, what a parameter server's pushes and answers follow (the stop
// flag goes in a small all-reduce after each timed transfer).
//
// Note [Measuring collectives at once]
// Next, still with ModelProfileJob::interference, the processes profile once more,
// for as many iterations as the phase before, beside a stream on a third group
// that alternates one all-reduce of 256 bytes
// with two issued together (the group has the runtime's threads, so the two can
// run at once), timing each round from issue to the end of its last all-reduce;
// the medians are averaged over the ranks. 256 bytes move in 0.2 ms even behind
// 20 Mbit/s: the times are start-ups, a, plus the wait for the last rank, which
// both rounds pay once and which the skew measurement below times as
// `back_to_back_skew` (the rounds follow one another). One round takes
// skew + a; two start-ups that overlap take about as long, two paid in turn
// skew + 2a. So the profile's `pair_slowdown` is (pair − single) / (single −
// back_to_back_skew): about 0 where they overlap, about 1 where they are paid
// one after the other, as when every core is busy. 4 processes on 2 cores,
// beside cnn's layers behind 1Gbit links: single 6.8–7.3 ms, pair 11.8–13.1,
// back-to-back skew 1.4–1.5: 0.91–0.97. (The plain ratio, pair / single, was
// 1.49–1.88 in nine such profiles over 20Mbit, 100Mbit and 1Gbit, and 1.49 sat on
// the wrong side of the midpoint 1.5 though that bench's runs said "in turn" too.)
// Two smallest sums timed on idle cores (`weft profile --network`) had taken
// 1.26–2.05 times one: how collectives share the cores is decided by what else
// runs on them. The layers of this phase are not kept. So the skew phase below
// ends by timing the same rounds, alternately, while the processes wait, each
// right after a meeting (which they leave back_to_back_skew apart):
// `waiting_pair_slowdown`, by the same formula, is what collectives moving at
// the end of a backward follow.
//
// Note [Measuring skew]
// Then, still with ModelProfileJob::interference, the processes train in step as
// S-SGD does: forward, an all-reduce of one float, backward, another, and a third
// right after it. Each times its waits in those all-reduces. The last process to
// arrive waits only for the all-reduce itself, the others also for it; so, per
// all-reduce, the mean of the waits less the least is how much later than the
// average process the last one arrived. Every rank computes it from every rank's
// waits, so all agree. The profile's `skew` is its median over the all-reduces
// that follow compute, `back_to_back_skew` over the third ones, which the
// processes reach as they leave the one before: what the simulator adds before
// each collective (Note [Skew], sim/simulator.cc).
// As each in-step backward starts, the processes also issue an all-reduce of the
// size of the model's median layer on a group of its own, its end timed by a
// callback while the backward runs; and once they have trained, the same
// all-reduce as often again, each right after a meeting, while they all wait.
// The last process to issue one waits least, and only for the collective
// itself: the least wait over the ranks is how long the collective takes after
// its last worker reaches it, while they compute and while they wait. The
// simulator stretches a collective by 1 + comm_slowdown while its workers
// compute, and starts it `start_delay` later (Note [Start delay],
// sim/simulator.cc); so start_delay is the median computing less the median
// waiting times 1 + comm_slowdown, at least 0: the cores a collective needs
// are busy with the layers. The median layer's size, not one float: the delay
// grows with the collective's steps.
// Last, the processes compute 5 iterations apart (as full local SGD does with
// H = 5) before each meeting: the median skew there less `skew`, over how much
// longer they computed before those meetings than before the in-step ones, is
// `drift` (at least 0): how much further behind the last process falls per
// second computed apart.
//
// Thread-safety: sets LibTorch's global intra-op thread count; run one at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "profile/profile.h"
#include "runtime/data.h"
#include "runtime/model.h"
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

// `weft profile --model M [--nproc K]`: profile_model, or K local processes
// profiling together (Note [Profiling together]), launched and supervised like
// `weft train --nproc K`; inside a job started otherwise (MASTER_ADDR, RANK, ...
// set), this process is one of them. `report` gets the profile — on rank 0 the
// median of every rank's, layer by layer. Returns the exit status. THROWS
// UsageError for interference in a job of one process.
struct ModelProfileJob {
  LayerProfilerOptions profiler;
  std::optional<int> nproc;
  bool interference = false;  // Notes [Measuring interference] to [Measuring skew]; 2 or more processes
  Seconds failure_timeout = 60;  // as TrainOptions::failure_timeout
  CorePlacement cores = CorePlacement::kAuto;  // as TrainOptions::cores
  std::function<void(const Profile&)> report;
};
int run_model_profile(const ModelProfileJob& job);

// How many processes a profile with `nproc` (--nproc) runs on: those of the job
// this process is one of (launched by weft, or started by hand with the torchrun
// variables), else nproc, else 1. THROWS UsageError for invalid job variables.
int profiled_processes(std::optional<int> nproc);

// Note [Measuring collectives at once]: (pair − single) / (single −
// back_to_back_skew), within [0, 1]; over `single` alone where the skew is not
// less than it, and 0 where single is not positive. Beyond 1 is noise: the skew,
// timed in another phase, can be nearly all of a round (2 processes on 2 cores
// measured 20.9), and in turn is the most the simulator models.
double pair_slowdown(Seconds single, Seconds pair, Seconds back_to_back_skew);

// Note [Measuring skew]: how much later than Note [Interference]'s stretch a
// collective ends that took `computing` while its processes computed and
// `waiting` while they waited: computing − waiting · (1 + comm_slowdown), at
// least 0.
Seconds start_delay(Seconds computing, Seconds waiting, double comm_slowdown);

// Builds `options.model` and a synthetic batch of its shape and measures it.
// THROWS UsageError for an unknown model, a batch, warmup, iterations or threads
// out of range (naming the field and what is accepted).
Profile profile_model(const LayerProfilerOptions& options);

// Measures `model` on `batch`; options.model only names the profile, whose batch
// is the batch's size. Leaves the model's gradients set. REQUIRES: the batch fits
// the model.
Profile profile_model(LayeredModel& model, const Batch& batch, const LayerProfilerOptions& options);

}  // namespace weft::runtime
