// Telling a user their run is diverging, with the setting to change (docs/local-sgd.md).
//
// Note [A diverging run]
// ----------------------
// Rule: a run diverges when its loss, averaged over windows of `window`
// iterations, rose in each of the last kRises windows and ended at least kRise
// above where those rises began; or when a loss is not finite. Averages over
// windows of at least 50 iterations, because one iteration's loss is one batch's
// (windows of 16 said "diverging" of runs that converged: a batch of 32 moves the
// loss by tens of percent); several rises in a row and a total rise, because a
// loss at a plateau rises by chance in half its windows. Local SGD's windows are
// whole periods (a multiple of H): its loss moves with the averages inside a period. Said once per run, on stderr, by rank 0 of either front
// end: an outer optimizer that diverges with its inner optimizer (measured: flsgd
// with Nesterov 0.7/0.9 over AdamW at H = 5) looks to the user like a run that
// merely learns slowly.
//
// Thread-safety: one per run, on one thread.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "runtime/train/job.h"

namespace weft::runtime {

class DivergenceWatch {
 public:
  static constexpr int kRises = 3;
  static constexpr double kRise = 0.10;  // 10% above where the rises began

  // The job's windows and advice (divergence_advice).
  explicit DivergenceWatch(const JobOptions& job);
  DivergenceWatch(int window, std::string advice);

  // One iteration's loss. Returns the warning the first time the run diverges.
  std::optional<std::string> add(double loss);

 private:
  int window_;
  std::string advice_;
  double sum_ = 0;
  int in_window_ = 0;
  std::vector<double> means_;  // the last kRises + 1 windows' mean losses
  bool said_ = false;
};

// What a user of `job` would change first, named as their front end spells it.
std::string divergence_advice(const JobOptions& job);

}  // namespace weft::runtime
