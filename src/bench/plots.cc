#include "bench/plots.h"

#include <cmath>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>

#include "netem/process.h"

namespace weft::bench {
namespace {

// A gnuplot single-quoted string: a quote inside is written twice.
std::string quote(std::string_view text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

// A gnuplot double-quoted string, where "\n" is a line break.
std::string quote_lines(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '\n') out += "\\n";
    else if (c == '"' || c == '\\') out += std::string("\\") + c;
    else out += c;
  }
  return out + "\"";
}

// A gnuplot data string column (double quotes; ours never contain one).
std::string column(std::string_view text) {
  std::string out = "\"";
  for (char c : text) out += c == '"' ? '\'' : c;
  return out + "\"";
}

std::string milliseconds(std::optional<Seconds> t) { return t ? fmt::format("{:.6g}", *t * 1e3) : "NaN"; }

std::string run_label(const RunResult& r) { return r.strategy; }

std::string header(const BenchResults& results, const std::string& name, int panels, const std::string& what) {
  const int width = std::max(640, 100 + 430 * panels);
  return fmt::format(
      "# Drawn by `weft bench`; redraw with: gnuplot {0}.gp\n"
      "set terminal pngcairo size {1},520 noenhanced font ',10'\n"
      "set output {2}\n"
      "set multiplot layout 1,{3} title {4}\n",
      name, width, quote(name + ".png"), std::max(panels, 1),
      quote_lines(fmt::format("{}\n{}, {} workers, batch {}, {}", what, results.model, results.workers, results.batch,
                        results.emulated ? "emulated links" : "loopback (no emulation)")));
}

// Twelve distinguishable line colours (gnuplot's default cycle has eight, and a
// bench has up to eleven curves per panel): matplotlib's tab10 and two more.
std::string distinct_colours() {
  const char* colours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                           "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#000000", "#aec7e8"};
  std::string out;
  int type = 1;
  for (const char* c : colours) out += fmt::format("set linetype {} lc rgb '{}' lw 1.5\n", type++, c);
  return out + "set linetype cycle 12\n";
}

// A script body for a bench with nothing to draw.
std::string nothing_to_draw() {
  return "unset border\nunset tics\nset xrange [0:1]\nset yrange [0:1]\n"
         "set label 'no measured runs to plot' at graph 0.5,0.5 center\nplot 2 notitle\n";
}

}  // namespace

PlotText iteration_time_plot(const BenchResults& results) {
  PlotText plot{.name = "iteration_time"};
  std::string panels;
  int block = 0, count = 0;
  for (const LinkResult& link : results.links) {
    std::string rows;
    for (const RunResult& r : results.runs) {
      if (r.link != link.link) continue;
      rows += fmt::format("{} {} {}\n", column(run_label(r)), milliseconds(r.measured_iteration),
                          milliseconds(r.predicted_iteration));
    }
    if (rows.empty()) continue;
    plot.data += fmt::format("# {}: strategy, measured ms, predicted ms\n{}\n\n", link.link, rows);
    panels += fmt::format("set title {}\nplot {} index {} using 2:xtic(1) title 'measured' lc rgb '#1f77b4', \\\n"
                          "     '' index {} using 3 title 'predicted (weft plan)' lc rgb '#ff7f0e'\n",
                          quote(link.link), quote(plot.name + ".dat"), block, block);
    ++block;
    ++count;
  }
  plot.script = header(results, plot.name, count, "steady-state iteration time");
  if (count == 0) {
    plot.script += nothing_to_draw();
  } else {
    plot.script +=
        "set style data histograms\nset style histogram clustered gap 1\n"
        "set style fill solid 0.85 border -1\nset boxwidth 0.9\nset xtics rotate by 40 right scale 0\n"
        // The key sits in room left above the tallest bar.
        "set ylabel 'iteration time (ms)'\nset yrange [0:*]\nset offsets 0,0,graph 0.22,0\nset grid ytics\n"
        "set key top left\n" +
        panels;
  }
  plot.script += "unset multiplot\n";
  return plot;
}

PlotText accuracy_plot(const BenchResults& results) {
  PlotText plot{.name = "accuracy"};
  std::string panels;
  int block = 0, count = 0;
  for (const LinkResult& link : results.links) {
    std::vector<std::string> curves;
    for (const RunResult& r : results.runs) {
      if (r.link != link.link || r.accuracy.empty()) continue;
      plot.data += fmt::format("# {} {}: wall-clock s, test accuracy %\n", link.link, run_label(r));
      for (const AccuracyPoint& p : r.accuracy) plot.data += fmt::format("{:.6g} {:.6g}\n", p.wall, 100 * p.accuracy);
      plot.data += "\n\n";
      curves.push_back(fmt::format("{} index {} using 1:2 with linespoints title {}", quote(plot.name + ".dat"),
                                   block++, quote(run_label(r))));
    }
    if (curves.empty()) continue;
    if (results.target_accuracy > 0) {
      curves.push_back(fmt::format("{:.6g} with lines dt 2 lc rgb 'gray' title {}", 100 * results.target_accuracy,
                                   quote(fmt::format("target {:.4g}%", 100 * results.target_accuracy))));
    }
    panels += fmt::format("set title {}\nplot ", quote(link.link));
    for (std::size_t i = 0; i < curves.size(); ++i) panels += (i == 0 ? "" : ", \\\n     ") + curves[i];
    panels += "\n";
    ++count;
  }
  plot.script = header(results, plot.name, count, "test accuracy against wall-clock");
  if (count == 0) {
    plot.script += nothing_to_draw();
  } else {
    plot.script += "set xlabel 'wall-clock (s, rank 0, evaluations included)'\nset ylabel 'test accuracy (%)'\n"
                   "set grid\nset key bottom right\n" +
                   distinct_colours() + panels;
  }
  plot.script += "unset multiplot\n";
  return plot;
}

std::filesystem::path render(const PlotText& plot, const std::filesystem::path& dir) {
  if (netem::find_executable("gnuplot").empty()) {
    throw UsageError("gnuplot is not installed; install it with: apt-get install gnuplot-nox");
  }
  const auto write = [&](const std::string& file, const std::string& text) {
    std::ofstream out(dir / file, std::ios::trunc);
    out << text;
    if (!out.flush()) throw std::runtime_error(fmt::format("cannot write {}", (dir / file).string()));
  };
  write(plot.name + ".dat", plot.data);
  write(plot.name + ".gp", plot.script);
  // gnuplot resolves the script's relative file names against its working
  // directory; run_command has none to give, so the script is loaded after a cd.
  const netem::CommandResult result = netem::run_command(
      {"gnuplot", "-e", fmt::format("cd {}; load {}", quote(dir.string()), quote(plot.name + ".gp"))});
  if (!result.succeeded()) {
    throw std::runtime_error(fmt::format("gnuplot {} {}:\n{}", (dir / (plot.name + ".gp")).string(),
                                         netem::describe_wait_status(result.wait_status), result.output));
  }
  return dir / (plot.name + ".png");
}

}  // namespace weft::bench
