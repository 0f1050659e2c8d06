#include "bench/bench.h"

#include <filesystem>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "netem/supervisor.h"
#include "testing/testing.h"

namespace weft::bench {
namespace {

using test_support::usage_error_of;
using ::testing::HasSubstr;

// Bad input is refused before the bench makes its output folder, so a typo
// leaves nothing behind to clean up.
TEST(RunBench, AnUnknownStrategyIsRefusedBeforeTheOutputFolderExists) {
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() / ("weft_bench_refused_" + std::to_string(::getpid()));
  std::filesystem::remove_all(out);
  BenchOptions options{.tools = {.workers = 2}, .links = {{"100Mbit", 12.5e6}}, .strategies = {"wfbp", "nope"}};
  options.out = out;
  const netem::TerminationSignals signals;
  std::ostringstream progress;

  EXPECT_THAT(usage_error_of([&] { run_bench(options, signals, progress); }),
              HasSubstr("--strategies nope: not a weft strategy; accepted: ssgd"));
  EXPECT_FALSE(std::filesystem::exists(out));

  options.strategies = {"wfbp"};
  options.trace_strategy = "nope";
  EXPECT_THAT(usage_error_of([&] { run_bench(options, signals, progress); }), HasSubstr("--trace-strategy nope: not a weft strategy"));
  EXPECT_FALSE(std::filesystem::exists(out));
  // A run is a strategy of the bench, alone or in one of its encodings.
  options.trace_strategy = "ssgd";
  EXPECT_THAT(usage_error_of([&] { run_bench(options, signals, progress); }),
              HasSubstr("--trace-strategy ssgd: not one of this bench's weft runs; they are wfbp"));
  options.trace_strategy = "wfbp+int8";
  EXPECT_THAT(usage_error_of([&] { run_bench(options, signals, progress); }), HasSubstr("they are wfbp"));
  options.trace_strategy = "wfbp+int9";
  EXPECT_THAT(usage_error_of([&] { run_bench(options, signals, progress); }), HasSubstr("--trace-strategy"));
  EXPECT_FALSE(std::filesystem::exists(out));
}

// Note [Sites in the bench]: what needs sites is refused without them, and what
// cannot run in them is refused with them, before anything is made.
TEST(RunBench, SiteOptionsAreRefusedWhereTheyCannotRun) {
  const std::filesystem::path out =
      std::filesystem::temp_directory_path() / ("weft_bench_sites_" + std::to_string(::getpid()));
  std::filesystem::remove_all(out);
  const Link uniform{.name = "1Gbit", .bandwidth = 125e6};
  const Link sited{.name = "2x2 sites 1Gbit, WAN 20Mbit",
                   .bandwidth = 125e6,
                   .sites = {.sites = "2x2", .wan_bandwidth = "20Mbit"}};
  BenchOptions options{.tools = {.workers = 4}, .links = {uniform}, .strategies = {"flsgd"}};
  options.out = out;
  const netem::TerminationSignals signals;
  std::ostringstream progress;

  options.site_modes = {SiteMode{}, SiteMode{.hierarchical = true}};
  EXPECT_THAT(usage_error_of([&] { run_bench(options, signals, progress); }),
              HasSubstr("--site-averaging hierarchical: averages by sites; give the sites"));
  options.site_modes = {SiteMode{}};
  options.peers = {"ddp", "hierarchical:8"};
  EXPECT_THAT(usage_error_of([&] { run_bench(options, signals, progress); }),
              HasSubstr("--peers hierarchical:8: HierarchicalModelAverager averages inside sites"));
  options.links = {sited};
  options.strategies = {"flsgd", "ps"};
  EXPECT_THAT(usage_error_of([&] { run_bench(options, signals, progress); }),
              HasSubstr("--strategies ps: a parameter-server strategy does not run in sites"));
  options.strategies = {"flsgd"};
  options.site_modes = {};
  EXPECT_THAT(usage_error_of([&] { run_bench(options, signals, progress); }), HasSubstr("--site-averaging"));
  // The traced run may be one in a site mode, named as its row.
  options.site_modes = {SiteMode{}, SiteMode{.site_every = 1}};
  options.trace_strategy = "flsgd@site-every:2";
  EXPECT_THAT(usage_error_of([&] { run_bench(options, signals, progress); }),
              HasSubstr("they are flsgd, flsgd@site-every:1"));
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
}  // namespace weft::bench
