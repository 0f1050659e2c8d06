// The replay test: stored benches re-simulated with today's model.
//
// testdata/replay/ holds a few benches `weft bench` ran (their bench.json, and per
// link the profile, the all-reduce fit, the host and, for parameter-server runs,
// the plan that says their cluster). Each weft run is predicted again as `weft
// simulate --profile profile-LINK.json --network net-LINK.json --host
// host-LINK.json -P WORKERS --strategy S`
// would (runs the bench gave explicit options are left out; the planner re-tunes
// the rest, as `weft bench` planned them), and each link's median |error| must stay
// within its committed threshold: the model's figure when the threshold was set,
// plus kSlackPct. A change to the cost model or the simulator that makes the
// predictions of measured runs worse fails here; one that makes them better should
// lower the thresholds.
//
// Error is the bench's: 100·(measured − predicted)/predicted (bench/results.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/cluster_flags.h"
#include "plan/planner.h"
#include "schedulers/strategies.h"

namespace weft::cli {
namespace {

namespace fs = std::filesystem;

// Tests run in the source tree (weft_test's WORKING_DIRECTORY).
const fs::path kReplayDir = "testdata/replay";

inline constexpr double kSlackPct = 2;

// Each link's median |error| in percent as re-simulated when the threshold was set
// (2026-12-05, the model of commit a0bd5b12, rounded up to 0.1; the test prints
// today's figures).
struct Threshold {
  const char* bench;
  const char* link;
  double median_abs_error_pct;
};
constexpr Threshold kThresholds[] = {
    {"full-2026-12-04-start-delay", "1Gbit", 5.5},
    {"full-2026-12-04-start-delay", "100Mbit", 3.1},
    {"full-2026-12-04-start-delay", "20Mbit", 2.8},
    {"two-workers-2026-12-04", "1Gbit", 5.4},
    {"two-workers-2026-12-04", "100Mbit", 4.7},
    {"two-workers-2026-12-04", "20Mbit", 1.5},
    {"contend-2026-12-04", "100Mbit", 3.9},
    {"contend-2026-12-04", "20Mbit", 3.1},
    {"1Gbit-2026-12-04-announced", "1Gbit", 11.0},
};

bool on_servers(const std::string& strategy) { return find_strategy(strategy).arch == Arch::kParameterServer; }

nlohmann::json read_json(const fs::path& file) {
  std::ifstream in(file);
  if (!in) throw std::runtime_error(fmt::format("{}: cannot read", file.string()));
  return nlohmann::json::parse(in);
}

// The cluster `weft bench` planned the run for: the link's fit, and for a
// parameter server the servers and bandwidths its plan-LINK-ps.json records.
ClusterSpec cluster_of(const fs::path& bench, const nlohmann::json& run) {
  const std::string link = run.at("link");
  ClusterSpec flags{.workers = run.at("workers").get<int>(),
                     .network_file = (bench / fmt::format("net-{}.json", link)).string(),
                     .host_file = (bench / fmt::format("host-{}.json", link)).string()};
  if (on_servers(run.at("strategy"))) {
    const nlohmann::json plan = read_json(bench / fmt::format("plan-{}-ps.json", link));
    flags.arch = "ps";
    flags.servers = plan.at("servers").get<int>();
    flags.bandwidth = std::to_string(std::llround(plan.at("bandwidth_Bps").get<double>()));
    flags.server_bandwidth = std::to_string(std::llround(plan.at("server_bandwidth_Bps").get<double>()));
  }
  return flags;
}

double median(std::vector<double> values) {
  std::ranges::sort(values);
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// Per link, every weft run's |error| in percent, re-simulated.
std::map<std::string, std::vector<double>> replay(const fs::path& bench) {
  const nlohmann::json results = read_json(bench / "bench.json");
  std::map<std::string, std::vector<double>> errors;
  std::map<std::pair<std::string, std::string>, double> predictions;  // repeats share one
  std::map<std::pair<std::string, bool>, Cluster> clusters;  // per link and architecture: one warning per older host
  for (const nlohmann::json& run : results.at("runs")) {
    if (run.value("kind", "weft") != "weft") continue;
    if (run.contains("options") && !run.at("options").empty()) continue;
    const std::string link = run.at("link");
    const std::string strategy = run.at("strategy");
    auto [it, fresh] = predictions.try_emplace({link, strategy}, 0);
    if (fresh) {
      const Profile profile =
          load_model(ModelFlags{.profile_file = (bench / fmt::format("profile-{}.json", link)).string()});
      const std::pair key{link, on_servers(strategy)};
      auto cluster = clusters.find(key);
      if (cluster == clusters.end()) cluster = clusters.emplace(key, make_cluster(cluster_of(bench, run))).first;
      it->second =
          plan(profile, cluster->second, {.strategies = {strategy}}).strategies.at(0).timeline.summary.iteration;
    }
    const double measured = run.at("measured_iteration_s");
    errors[link].push_back(std::abs(100 * (measured - it->second) / it->second));
  }
  return errors;
}

TEST(ReplayTest, EachLinksMedianErrorStaysWithinItsThreshold) {
  std::map<std::string, std::map<std::string, std::vector<double>>> replayed;
  for (const Threshold& t : kThresholds) {
    if (!replayed.contains(t.bench)) replayed[t.bench] = replay(kReplayDir / t.bench);
    const auto& links = replayed.at(t.bench);
    ASSERT_TRUE(links.contains(t.link)) << t.bench << ": no weft runs on " << t.link;
    const std::vector<double>& errors = links.at(t.link);
    const double figure = median(errors);
    std::printf("%-28s %-8s %2zu runs: median |error| %6.2f%% (threshold %5.1f%% + %.0f)\n", t.bench, t.link,
                errors.size(), figure, t.median_abs_error_pct, kSlackPct);
    EXPECT_LE(figure, t.median_abs_error_pct + kSlackPct) << t.bench << " " << t.link;
  }
}

// Every link of every stored bench has a threshold, so none is replayed unchecked.
TEST(ReplayTest, EveryStoredLinkHasAThreshold) {
  for (const fs::directory_entry& bench : fs::directory_iterator(kReplayDir)) {
    // Bound here: a range-for over a member of a temporary would walk freed
    // memory (AddressSanitizer: heap-use-after-free).
    const nlohmann::json results = read_json(bench.path() / "bench.json");
    for (const nlohmann::json& link : results.at("links")) {
      const std::string name = bench.path().filename().string();
      EXPECT_TRUE(std::ranges::any_of(kThresholds, [&](const Threshold& t) {
        return t.bench == name && t.link == link.at("link").get<std::string>();
      })) << name << " " << link.at("link");
    }
  }
}

}  // namespace
}  // namespace weft::cli
