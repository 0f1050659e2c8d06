#include "bench/report.h"

#include <fmt/format.h>

namespace weft::bench {
namespace {

std::string or_dash(const std::optional<double>& v, const char* format) {
  return v ? fmt::format(fmt::runtime(format), *v) : "-";
}

std::string duration_or_dash(const std::optional<Seconds>& t) { return t ? format_duration(*t) : "-"; }

}  // namespace

std::string format_table(const BenchResults& r) {
  const bool accuracy = r.mode == Mode::kAccuracy;
  std::string out = fmt::format("{} ({} parameters) on {} workers, batch {}, {} lr {}{}; {}{} steps, warm-up {}; {}\n",
                                r.model, r.parameters, r.workers, r.batch, r.optimizer, r.lr,
                                r.H > 1 ? fmt::format(", local SGD H={}", r.H) : "", accuracy ? "at most " : "",
                                r.steps, r.warmup, r.emulated ? "emulated links" : "loopback, no emulation");
  out += fmt::format("{:<9} {:<14} {:>10} {:>10} {:>8} {:>8} {:>7}", "link", "strategy", "measured", "predicted",
                     "error", "vs wfbp", "(pred)");
  if (accuracy) out += fmt::format(" {:>10} {:>10}", fmt::format("to {:.3g}%", 100 * r.target_accuracy), "w/o eval");
  out += "\n";
  for (const LinkResult& link : r.links) {
    bool first = true;
    for (const RunResult& run : r.runs) {
      if (run.link != link.link) continue;
      out += fmt::format("{:<9} {:<14} {:>10} {:>10} {:>8} {:>8} {:>7}", first ? link.link : "",
                         run.kind == "weft" ? run.strategy : run.kind, format_duration(run.measured_iteration),
                         duration_or_dash(run.predicted_iteration), or_dash(run.error_pct(), "{:+.1f}%"),
                         or_dash(run.speedup_vs_wfbp, "{:.2f}x"), or_dash(run.predicted_speedup_vs_wfbp, "{:.2f}x"));
      if (accuracy) {
        out += fmt::format(" {:>10} {:>10}", duration_or_dash(run.time_to_accuracy),
                           duration_or_dash(run.training_time_to_accuracy));
      }
      out += "\n";
      first = false;
    }
  }
  for (const FailedRun& f : r.failed) out += fmt::format("failed: {} on {}: {} (log: {})\n", f.strategy, f.link, f.message, f.log);
  for (const SkippedStrategy& s : r.skipped) out += fmt::format("skipped: {}: {}\n", s.strategy, s.reason);
  return out;
}

}  // namespace weft::bench
