// The measured timeline of a job: what every rank's Recorder holds, gathered on
// rank 0, summarised and written as one Chrome trace (Note [Measured timeline]).
// Shared by weft train's loop (trainer.cc) and weft.DataParallel (src/python/module.cc).
//
// Note [Measured timeline]
// ------------------------
// Each rank records its own events — "compute" (fp/bp per layer, training thread),
// "comm" (one event per message, from issue to completion) and "update" (the
// layer-wise optimizer steps, on the engine's thread) — with times measured from
// the start barrier all ranks leave together (common_origin). Rank 0 gathers them
// through the store and writes ONE Chrome trace with a process per rank, beside
// the simulator's prediction of the same schedule (predicted_timeline in
// runtime/train/worker.h), so that a step longer than planned shows where. Only the first
// iterations are recorded (Recorder). The summary's iteration runs from rank 0's
// first forward to its next: whatever the loop does between layers' compute
// (loss, data, an optimizer step outside the engine, waits) is exposed time.
//
// Thread-safety: one call per rank, from one thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/comm/process_group.h"
#include "timeline/recorder.h"
#include "timeline/timeline.h"

namespace weft::runtime {

// The summary of a measured timeline (timeline.h) from the recorded events of
// the `iterations` iterations from `first` on: iteration t lasts from the start
// of rank 0's first compute event to the start of its next iteration's; the
// first (warm-up) and the last recorded one (no successor) are left out. compute = fp + bp; link
// utilisation = busy fraction of rank 0's "comm" lane. With parameter servers, a
// server's link is busy while any worker's exchange with it is in flight, and its
// incast is how many are at once. The collective skew is over every worker's
// other "comm" events past the warm-up.
Summary summarise_measured(const std::vector<Event>& events, std::int64_t first, int iterations);

// Collective: ranks [0, ranks) of `group` each call it once with their recorder
// (the last `ranks - workers` being servers), after `trained` iterations. Rank 0
// gathers every rank's events through the store, writes the trace to `file`
// (named `flag` in errors), with `predicted` beside them where given, and
// returns its summary over the iterations both trained and recorded; the others
// return nullopt.
// THROWS UsageError (rank 0) where `file` cannot be written.
std::optional<Summary> write_measured_trace(const Group& group, int ranks, int workers, const std::string& strategy,
                                            Recorder& recorder, std::int64_t trained, std::string_view flag,
                                            const std::filesystem::path& file, const Timeline* predicted = nullptr);

// The measured summary's JSON (summary_json) with the prediction's iteration
// beside it as "predicted_iteration_s".
std::string summary_json(const Summary& measured, const Summary& predicted);

}  // namespace weft::runtime
