// `weft profile --network`: measures real Gloo all-reduces between K processes
// and fits the cost model T(n) = a + b·n (docs/design.md §1.2) by least squares, so that the
// planner can predict with this network's numbers (`weft plan --network FILE`).
// Each size is also summed by all-gather, as long as that is faster, which sets
// the size up to which jobs given the file do so (Note [Small all-reduces by
// all-gather] in runtime/comm/process_group.h).
//
// Like run_train, run_network_profile plays both roles (Note [Launcher and
// workers] in runtime/launch/launcher.h): with `nproc` it spawns that many copies of the
// current command line and supervises them; inside a worker it measures. Rank 0
// prints the fit and writes `out`.
//
// Output file (JSON object; the keys `a_s` and `b_s_per_byte` are what
// `--network FILE` reads):
//   {"a_s": 1.2e-4, "b_s_per_byte": 8.1e-10, "bandwidth_Bps": 1.23e9,
//    "workers": 2, "r2": 0.9998, "max_relative_error": 0.04, "gather_below_bytes": 16384,
//    "points": [{"bytes": 4096, "seconds": 1.1e-4, "fitted_s": 1.2e-4,
//                "allreduce_s": 1.3e-4, "allgather_s": 1.1e-4}, ...]}
// A point's `seconds` is the time of the algorithm used at its size.
// `bandwidth_Bps` is 1/b, the all-reduce's effective rate (for a ring on links of
// bandwidth B it is B·P / (2(P−1))), not the link's own rate.
//
// Thread-safety: run_network_profile once per process; fit_linear is pure.
#pragma once

#include <filesystem>
#include <optional>
#include <vector>

#include "cost/cluster.h"
#include "units/cores.h"
#include "units/units.h"

namespace weft::runtime {

struct NetworkProfileOptions {
  std::optional<int> nproc;         // spawn this many local workers; unset = worker or alone
  Bytes min_bytes = 4 << 10;        // smallest message (4 KiB)
  Bytes max_bytes = 64 << 20;       // largest message (64 MiB); sizes grow by 4x
  int repeats = 5;                  // rounds, each timing every size (after a warm-up round)
  std::filesystem::path out;        // the fit as JSON; empty = print only
  Seconds failure_timeout = 60;     // as TrainOptions::failure_timeout
  CorePlacement cores = CorePlacement::kAuto;  // as TrainOptions::cores
};

// One measured size: the median of its times on rank 0 — what the planner's
// measured curve is made of (cost/cluster.h).
using NetworkPoint = MeasuredAllReduce;

struct NetworkFit {
  Seconds a = 0;                 // startup, seconds
  double b = 0;                  // seconds per byte
  double r2 = 0;                 // coefficient of determination of the fit
  double max_relative_error = 0; // max over points of |fit − measured| / measured
};

// One size summed both ways (Note [Small all-reduces by all-gather] in
// runtime/comm/process_group.h), medians on rank 0. The all-gather is timed only at the
// sizes where it races (still_racing).
struct SumTimes {
  Bytes bytes = 0;
  Seconds allreduce = 0;
  std::optional<Seconds> allgather;
};

// The largest size up to which every size, from the smallest, was summed faster
// by all-gather; 0 if the smallest was not. `timed` ascending by size.
Bytes gather_below(const std::vector<SumTimes>& timed);

// After a round (Note [Sizes in rounds] in network_profile.cc): how many of the
// smallest sizes the all-gather goes on racing at — up to and including the first
// it has lost at so far, never more than the `racing` it raced at (a size dropped
// lacks rounds). `medians` ascending by size.
std::size_t still_racing(const std::vector<SumTimes>& medians, std::size_t racing);

// How many times each size is summed (each way) in a round (Note [Sizes in
// rounds] in network_profile.cc): about as long as one sum of the largest size
// takes, from the warm-up round's times, at most kMostTimesInARound and at least
// once. `warmup` ascending by size.
inline constexpr int kMostTimesInARound = 8;
std::vector<int> times_in_a_round(const std::vector<Seconds>& warmup);

// The time of the algorithm a job would use at each size (all-gather up to
// gather_below(timed), ring all-reduce beyond): the curve the planner reads.
std::vector<NetworkPoint> points_used(const std::vector<SumTimes>& timed);

// Least squares of the relative error, min Σ ((a + b·n_i − t_i) / t_i)²: the sizes
// span four orders of magnitude, and plain least squares would let the largest
// message alone decide a. a is clamped at 0 (a negative startup is noise) and b
// refitted then. r2 is the ordinary coefficient of determination of the fit.
// REQUIRES at least two points with distinct sizes and positive times; THROWS
// std::invalid_argument otherwise.
NetworkFit fit_linear(const std::vector<NetworkPoint>& points);

// THROWS UsageError naming the option: sizes must satisfy 0 < min <= max, repeats
// >= 1, nproc >= 1 when set, failure_timeout > 0.
void validate(const NetworkProfileOptions& options);

// Measures and reports as described above; returns the process exit status.
int run_network_profile(const NetworkProfileOptions& options);

}  // namespace weft::runtime
