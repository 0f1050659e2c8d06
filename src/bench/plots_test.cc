#include "bench/plots.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>

#include "netem/process.h"

namespace weft::bench {
namespace {

int count(const std::string& text, const std::string& word) {
  int n = 0;
  for (std::size_t at = text.find(word); at != std::string::npos; at = text.find(word, at + 1)) ++n;
  return n;
}

BenchResults two_links() {
  BenchResults r{.model = "cnn", .workers = 2, .batch = 32, .mode = Mode::kAccuracy, .target_accuracy = 0.85,
                 .emulated = true};
  r.links = {{.link = "20Mbit"}, {.link = "it's 1Gbit"}, {.link = "unused"}};
  r.runs = {{.strategy = "wfbp", .link = "20Mbit", .measured_iteration = 0.3, .predicted_iteration = 0.25},
            {.strategy = kDdpPeerStrategy, .kind = kDdpPeerStrategy, .link = "20Mbit", .measured_iteration = 0.35},
            {.strategy = "dcredit", .link = "it's 1Gbit", .measured_iteration = 0.1, .predicted_iteration = 0.09,
             .accuracy = {{.iter = 9, .wall = 1, .accuracy = 0.5}, {.iter = 19, .wall = 2, .accuracy = 0.86}}}};
  return r;
}

TEST(Plots, IterationTimeHasOnePanelPerLinkWithRuns) {
  const PlotText plot = iteration_time_plot(two_links());
  EXPECT_EQ(plot.name, "iteration_time");
  EXPECT_NE(plot.script.find("layout 1,2"), std::string::npos) << plot.script;
  EXPECT_EQ(count(plot.script, "index 0"), 2);
  EXPECT_EQ(count(plot.script, "index 1"), 2);
  EXPECT_EQ(count(plot.script, "index 2"), 0);  // "unused" has no runs
  EXPECT_NE(plot.script.find("'it''s 1Gbit'"), std::string::npos);  // quoted for gnuplot
  EXPECT_NE(plot.data.find("\"pytorch-ddp\" 350 NaN"), std::string::npos) << plot.data;
  EXPECT_NE(plot.data.find("\"wfbp\" 300 250"), std::string::npos) << plot.data;
  EXPECT_EQ(count(plot.data, "\n\n\n"), 2);  // two blocks, each ended by two blank lines
}

TEST(Plots, AccuracyDrawsOnlyRunsThatEvaluated) {
  const PlotText plot = accuracy_plot(two_links());
  EXPECT_NE(plot.script.find("layout 1,1"), std::string::npos) << plot.script;
  EXPECT_NE(plot.script.find("title 'dcredit'"), std::string::npos);
  EXPECT_EQ(plot.script.find("title 'wfbp'"), std::string::npos);
  EXPECT_NE(plot.script.find("85 with lines"), std::string::npos);
  EXPECT_NE(plot.data.find("2 86"), std::string::npos) << plot.data;
  const PlotText empty = accuracy_plot(BenchResults{});
  EXPECT_NE(empty.script.find("no measured runs"), std::string::npos);
}

// Drawing for real, where gnuplot is installed (Debian's gnuplot-nox).
TEST(Plots, GnuplotDrawsTheScripts) {
  if (netem::find_executable("gnuplot").empty()) {
    GTEST_SKIP() << "gnuplot is not installed (apt-get install gnuplot-nox)";
  }
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("weft_plots_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  for (const PlotText& plot : {iteration_time_plot(two_links()), accuracy_plot(two_links()), accuracy_plot({})}) {
    const std::filesystem::path image = render(plot, dir);
    EXPECT_EQ(image, dir / (plot.name + ".png"));
    EXPECT_GT(std::filesystem::file_size(image), 1000u) << plot.name;
  }
  PlotText broken{.name = "broken", .data = "", .script = "plot 'no-such-file.dat'\n"};
  EXPECT_THROW(render(broken, dir), std::runtime_error);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace weft::bench
