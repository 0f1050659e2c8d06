// What `weft bench` prints at the end.
//
// The table: per link, per strategy (and the DDP peer), the measured and predicted
// steady-state iteration time, the prediction's error, its error re-timed just
// before the run and on the run's own compute (Notes [Re-timed before each run]
// and [Predicted on the run's own compute] in bench/bench.h), and
// the measured (and predicted) speed-up over wfbp; in accuracy mode also the
// time to the target accuracy. Failed and skipped runs are listed below it.
//
// The agreement (issue 7's criteria): per link, how many of weft's predictions lie
// within kTolerancePct of their measurement, and whether the measured order of
// the strategies is the predicted one. Every pair of strategies the plan orders
// (their predictions more than kTiePct apart) is checked; a pair measured the
// other way round is called out, with whether it lies beyond the two strategies'
// spread of repeated runs (then the plan is wrong about them) or not (then the
// bench cannot tell them apart). Beside them, how far apart each strategy's
// repeated runs measured: no prediction can come closer to every run than half
// that, whatever the model.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "bench/results.h"

namespace weft::bench {

inline constexpr double kTolerancePct = 10;
inline constexpr double kTiePct = 1;

// How two strategies' repeated runs lie: apart (each ran more than once, and
// their ranges [fastest, slowest] do not meet: a swap the machine's noise does
// not explain), overlapping, or not known (one of them ran once).
enum class Spread { kApart, kOverlapping, kRunOnce };

struct SwappedPair {
  std::string predicted_faster;  // the plan has it faster than `predicted_slower` ...
  std::string predicted_slower;
  double measured_gap_pct = 0;   // ... yet it measured this much slower: 100·(its time / the other's − 1) > 0
  Spread spread = Spread::kRunOnce;
};

// How close one kind of prediction came.
struct Tally {
  int runs = 0;              // runs with that prediction
  int within_tolerance = 0;  // of them, |error| <= kTolerancePct
  double median_abs_error_pct = 0;
};

// How far apart the repeated runs of one strategy measured, (slowest − fastest) /
// fastest, over the strategies run more than once.
struct RepeatSpread {
  int strategies = 0;  // 0: none ran more than once
  double median_pct = 0;
  double largest_pct = 0;
  std::string largest;  // the strategy whose runs differ most
};

struct Agreement {
  std::string link;
  Tally predicted;  // weft runs with a prediction
  // Those of them predicted again re-timed, and on their own compute.
  Tally retimed;
  Tally on_own_compute;
  int ordered_pairs = 0;     // pairs of those runs whose predictions are more than kTiePct apart
  std::vector<SwappedPair> swapped;  // those measured the other way round, by gap, largest first
  RepeatSpread repeats;
};

// One per link with at least one weft run that has a prediction, in the order of
// results.links.
std::vector<Agreement> agreement(const BenchResults& results);

// The table, then the agreement.
std::string format_table(const BenchResults& results);

}  // namespace weft::bench
