// Recorder: where a worker's threads put the timeline events they measure
// (docs/design.md §1.3). Times are seconds since a common origin — the moment every rank had
// left the start barrier (Note [A common time origin], runtime/comm/process_group.h) —
// so the ranks' timelines line up in one trace.
//
// Thread-safety: add() and now() may be called from any thread; take() once the
// producers are done.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <vector>

#include "timeline/timeline.h"

namespace weft::runtime {

class Recorder {
 public:
  using Clock = std::chrono::steady_clock;

  // Keeps events of the `iterations` iterations from `first` on (a resumed
  // job's first is the checkpoint's iteration); iterations = 0 records nothing.
  Recorder(int worker, std::int64_t first, int iterations, Clock::time_point origin = Clock::now())
      : worker_(worker), first_(first), iterations_(iterations), origin_(origin) {}

  Seconds now() const { return std::chrono::duration<double>(Clock::now() - origin_).count(); }
  bool records(std::int64_t iteration) const { return iteration >= first_ && iteration < first_ + iterations_; }
  std::int64_t first() const { return first_; }
  int iterations() const { return iterations_; }
  int worker() const { return worker_; }

  // Sets event.worker; drops events of iterations not recorded.
  void add(Event event);

  std::vector<Event> take();

 private:
  const int worker_;
  const std::int64_t first_;
  const int iterations_;
  const Clock::time_point origin_;
  std::mutex mutex_;
  std::vector<Event> events_;
};

}  // namespace weft::runtime
