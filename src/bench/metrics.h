// Training metrics as `weft train --metrics` and tools/ddp_peer.py write them
// (docs/formats.md §6): JSON lines, one per iteration per worker
//   {"rank", "iter", "time_s", "iteration_s", "loss", "strategy"}
// (`weft train` adds "compute_s": the rank's forward and backward, its waits for
// communication left out) and one per evaluation
//   {"rank", "iter", "time_s", "eval": {"accuracy", "loss"}}.
// `time_s` is seconds since the job's common start (the ranks' start barrier);
// `iteration_s` is the time since the same rank's previous iteration line.
//
// Thread-safety: parse_metrics is pure; a MetricsTail belongs to one thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "units/units.h"

namespace weft::bench {

struct IterationLine {
  int rank = 0;
  std::int64_t iter = 0;
  Seconds time = 0;       // time_s
  Seconds iteration = 0;  // iteration_s
  std::optional<Seconds> compute;  // compute_s, where the line has it
  double loss = 0;
  std::string strategy;
};

struct EvalLine {
  int rank = 0;
  std::int64_t iter = 0;  // the iteration after which it evaluated
  Seconds time = 0;       // time_s, when the evaluation ended
  // Of the model the workers agree on: "eval_agreed" where the line has it (local
  // SGD and parameter servers, whose ranks' models differ), else "eval".
  double accuracy = 0;    // fraction in [0, 1]
  double loss = 0;
  std::optional<double> own_accuracy;  // "eval" (rank's own model) where eval_agreed is there
};

// The lines of one run, in file order.
struct Metrics {
  std::vector<IterationLine> iterations;
  std::vector<EvalLine> evals;
};

// Parses JSON lines; blank lines are skipped, unknown fields ignored. A line is an
// evaluation if it has "eval", else an iteration.
// THROWS UsageError naming `origin`, the 1-based line number and the field for a
// line that is not a JSON object, lacks a field, has one of the wrong type, or has
// a negative rank, iter, time_s, iteration_s or compute_s.
Metrics parse_metrics(std::string_view text, std::string_view origin);

// Reads and parses a file. THROWS UsageError if it cannot be read, or as above.
Metrics load_metrics(const std::filesystem::path& file);

// Follows a metrics file that another process is appending to: each poll() parses
// the complete lines added since the previous one (a line still being written,
// without its newline, waits for the next poll). A missing file reads as empty.
class MetricsTail {
 public:
  explicit MetricsTail(std::filesystem::path file) : file_(std::move(file)) {}
  // THROWS UsageError as parse_metrics for a malformed complete line.
  Metrics poll();

 private:
  std::filesystem::path file_;
  std::uintmax_t offset_ = 0;  // bytes consumed so far
  int lines_ = 0;              // complete lines consumed so far, for messages
};

}  // namespace weft::bench
