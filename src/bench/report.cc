#include "bench/report.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "units/units.h"

namespace weft::bench {
namespace {

std::string or_dash(const std::optional<double>& v, const char* format) {
  return v ? fmt::format(fmt::runtime(format), *v) : "-";
}

std::string duration_or_dash(const std::optional<Seconds>& t) { return t ? format_duration(*t) : "-"; }

Spread spread_of(const RunResult& a, const RunResult& b) {
  if (a.measured_iterations.size() < 2 || b.measured_iterations.size() < 2) return Spread::kRunOnce;
  const auto [a_low, a_high] = std::minmax_element(a.measured_iterations.begin(), a.measured_iterations.end());
  const auto [b_low, b_high] = std::minmax_element(b.measured_iterations.begin(), b.measured_iterations.end());
  return *a_high < *b_low || *b_high < *a_low ? Spread::kApart : Spread::kOverlapping;
}

// The tally of the errors `error_of` gives, over the runs that have one.
Tally tally(const std::vector<const RunResult*>& runs, std::optional<double> (RunResult::*error_of)() const) {
  Tally t;
  std::vector<double> errors;
  for (const RunResult* run : runs) {
    if (const auto error = (run->*error_of)()) {
      errors.push_back(std::abs(*error));
      if (errors.back() <= kTolerancePct) ++t.within_tolerance;
    }
  }
  t.runs = static_cast<int>(errors.size());
  if (!errors.empty()) t.median_abs_error_pct = median(errors);
  return t;
}

RepeatSpread repeat_spread(const std::vector<const RunResult*>& runs) {
  RepeatSpread s;
  std::vector<double> spreads;
  for (const RunResult* run : runs) {
    if (run->measured_iterations.size() < 2) continue;
    const auto [fastest, slowest] =
        std::minmax_element(run->measured_iterations.begin(), run->measured_iterations.end());
    spreads.push_back(100 * (*slowest / *fastest - 1));
    if (spreads.back() > s.largest_pct) {
      s.largest_pct = spreads.back();
      s.largest = run->strategy;
    }
  }
  s.strategies = static_cast<int>(spreads.size());
  if (!spreads.empty()) s.median_pct = median(spreads);
  return s;
}

Agreement agreement_of(const std::string& link, const std::vector<const RunResult*>& runs) {
  Agreement g{.link = link,
              .predicted = tally(runs, &RunResult::error_pct),
              .retimed = tally(runs, &RunResult::retimed_error_pct),
              .on_own_compute = tally(runs, &RunResult::own_compute_error_pct),
              .repeats = repeat_spread(runs)};
  for (const RunResult* a : runs) {
    for (const RunResult* b : runs) {
      // Each pair once, as (predicted faster, predicted slower).
      if (*a->predicted_iteration * (1 + kTiePct / 100) >= *b->predicted_iteration) continue;
      ++g.ordered_pairs;
      if (a->measured_iteration <= b->measured_iteration) continue;
      g.swapped.push_back({.predicted_faster = a->strategy, .predicted_slower = b->strategy,
                           .measured_gap_pct = 100 * (a->measured_iteration / b->measured_iteration - 1),
                           .spread = spread_of(*a, *b)});
    }
  }
  std::stable_sort(g.swapped.begin(), g.swapped.end(),
                   [](const SwappedPair& x, const SwappedPair& y) { return x.measured_gap_pct > y.measured_gap_pct; });
  return g;
}

std::string format_agreement(const Agreement& g) {
  const int swapped = static_cast<int>(g.swapped.size());
  const int apart = static_cast<int>(std::count_if(g.swapped.begin(), g.swapped.end(),
                                                   [](const SwappedPair& s) { return s.spread == Spread::kApart; }));
  std::string out = fmt::format("{:<9} {} of {} predictions within {:g}% (median |error| {:.1f}%)", g.link,
                                g.predicted.within_tolerance, g.predicted.runs, kTolerancePct,
                                g.predicted.median_abs_error_pct);
  const auto also = [&](const Tally& t, const char* what) {
    if (t.runs > 0) {
      out += fmt::format(", {} of {} {} ({:.1f}%)", t.within_tolerance, t.runs, what, t.median_abs_error_pct);
    }
  };
  also(g.retimed, "re-timed before their runs");
  also(g.on_own_compute, "on their own compute");
  if (g.ordered_pairs > 0) {
    out += swapped == 0 ? fmt::format("; all {} pairs it orders measured in its order", g.ordered_pairs)
                        : fmt::format("; {} of {} pairs it orders measured in its order, {} swapped beyond their "
                                      "runs' spread",
                                      g.ordered_pairs - swapped, g.ordered_pairs, apart);
  }
  out += "\n";
  if (g.repeats.strategies > 0) {
    out += fmt::format("{:<9}   the runs of one strategy differ by a median {:.1f}%, at most {:.1f}% ({})\n", "",
                       g.repeats.median_pct, g.repeats.largest_pct, g.repeats.largest);
  }
  for (const SwappedPair& s : g.swapped) {
    out += fmt::format("{:<9}   {} predicted faster than {}, measured {:.1f}% slower{}\n", "", s.predicted_faster,
                       s.predicted_slower, s.measured_gap_pct,
                       s.spread == Spread::kApart         ? ""
                       : s.spread == Spread::kOverlapping ? " (their runs overlap)"
                                                          : " (run once: no spread to tell by)");
  }
  return out;
}

// The weft runs of `link` that have a prediction.
std::vector<const RunResult*> predicted_runs(const BenchResults& results, const std::string& link) {
  std::vector<const RunResult*> runs;
  for (const RunResult& run : results.runs) {
    if (run.link == link && run.kind == "weft" && run.error_pct()) runs.push_back(&run);
  }
  return runs;
}

}  // namespace

std::vector<Agreement> agreement(const BenchResults& results) {
  std::vector<Agreement> out;
  for (const LinkResult& link : results.links) {
    const std::vector<const RunResult*> runs = predicted_runs(results, link.link);
    if (!runs.empty()) out.push_back(agreement_of(link.link, runs));
  }
  return out;
}

// "of 3 runs: 35.1s to 48.0s", "of 3 runs: 35.1s to 48.0s, 1 never": the range
// of repeated runs' times to accuracy (the column holds the median run's).
std::string describe_runs(const std::vector<std::optional<Seconds>>& times) {
  std::vector<Seconds> reached;
  for (const auto& t : times) {
    if (t) reached.push_back(*t);
  }
  const std::size_t never = times.size() - reached.size();
  std::string out = fmt::format("of {} runs: ", times.size());
  if (!reached.empty()) {
    const auto [low, high] = std::minmax_element(reached.begin(), reached.end());
    out += fmt::format("{} to {}", format_duration(*low), format_duration(*high));
  }
  if (never > 0) out += fmt::format("{}{} never", reached.empty() ? "" : ", ", never);
  return out;
}

std::string format_table(const BenchResults& r) {
  const bool accuracy = r.mode == Mode::kAccuracy;
  std::string out = fmt::format("{} ({} parameters) on {} workers, batch {}, {} lr {}{}; {}{} steps, warm-up {}; {}\n",
                                r.model, r.parameters, r.workers, r.batch, r.optimizer, r.lr,
                                r.H > 1 ? fmt::format(", local SGD H={}{}", r.H, r.outer.empty() ? "" : ", outer " + r.outer)
                                        : "",
                                accuracy ? "at most " : "",
                                r.steps, r.warmup, r.emulated ? "emulated links" : "loopback, no emulation");
  std::size_t width = 14;  // the strategy column: its longest name ("pytorch-ddp+powersgd:2")
  for (const RunResult& run : r.runs) width = std::max(width, run.strategy.size());
  std::size_t link_width = 9;  // the link column: its longest name ("100Mbit+20ms")
  for (const LinkResult& link : r.links) link_width = std::max(link_width, link.link.size());
  out += fmt::format("{:<{}} {:<{}} {:>10} {:>10} {:>8} {:>9} {:>8} {:>8} {:>7}", "link", link_width, "strategy",
                     width, "measured", "predicted", "error", "(retimed)", "(own)", "vs wfbp", "(pred)");
  if (accuracy) out += fmt::format(" {:>10} {:>10}", fmt::format("to {:.3g}%", 100 * r.target_accuracy), "w/o eval");
  out += "\n";
  for (const LinkResult& link : r.links) {
    bool first = true;
    for (const RunResult& run : r.runs) {
      if (run.link != link.link) continue;
      out += fmt::format("{:<{}} {:<{}} {:>10} {:>10} {:>8} {:>9} {:>8} {:>8} {:>7}", first ? link.link : "",
                         link_width, run.strategy, width, format_duration(run.measured_iteration),
                         duration_or_dash(run.predicted_iteration), or_dash(run.error_pct(), "{:+.1f}%"),
                         or_dash(run.retimed_error_pct(), "{:+.1f}%"), or_dash(run.own_compute_error_pct(), "{:+.1f}%"),
                         or_dash(run.speedup_vs_wfbp, "{:.2f}x"), or_dash(run.predicted_speedup_vs_wfbp, "{:.2f}x"));
      if (accuracy) {
        out += fmt::format(" {:>10} {:>10}", duration_or_dash(run.time_to_accuracy),
                           duration_or_dash(run.training_time_to_accuracy));
        if (run.times_to_accuracy.size() > 1) out += "  " + describe_runs(run.times_to_accuracy);
      }
      out += "\n";
      first = false;
    }
  }
  for (const FailedRun& f : r.failed) {
    out += fmt::format("failed: {} on {}: {} (log: {})\n", f.strategy, f.link, f.message, f.log);
  }
  for (const SkippedStrategy& s : r.skipped) out += fmt::format("skipped: {}: {}\n", s.strategy, s.reason);
  const std::vector<Agreement> agreements = agreement(r);
  if (!agreements.empty()) out += "agreement with the planner (weft's runs):\n";
  for (const Agreement& g : agreements) out += format_agreement(g);
  return out;
}

}  // namespace weft::bench
