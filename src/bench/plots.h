// The bench's plots, drawn by gnuplot (Debian's gnuplot-nox; docs/cli.md §5: a real
// plotting tool). Each plot is a data file plus a script beside the image, so it can
// be restyled and redrawn by hand: `gnuplot iteration_time.gp`.
//
//  - iteration_time: one panel per link; per strategy (and the DDP peer) a bar of
//    the measured and one of the predicted steady-state iteration time.
//  - accuracy (accuracy mode): one panel per link; test accuracy against rank 0's
//    wall-clock for every run, and the target as a dashed line.
//
// Thread-safety: the *_plot functions are pure; render runs a process.
#pragma once

#include <filesystem>
#include <string>

#include "bench/results.h"

namespace weft::bench {

struct PlotText {
  std::string name;    // files are <name>.dat, <name>.gp and <name>.png
  std::string data;    // gnuplot data: blocks separated by two blank lines (`index`)
  std::string script;  // reads <name>.dat, writes <name>.png, both in its folder
};

// Links without runs get an empty panel; no runs at all, a script that draws a
// note saying so.
PlotText iteration_time_plot(const BenchResults& results);
PlotText accuracy_plot(const BenchResults& results);

// Writes the data and the script into `dir` and runs gnuplot there; returns the
// image's path. THROWS UsageError if gnuplot is not installed (naming the package),
// std::runtime_error quoting gnuplot's output if it fails.
std::filesystem::path render(const PlotText& plot, const std::filesystem::path& dir);

}  // namespace weft::bench
