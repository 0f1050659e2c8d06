#include "bench/results.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <random>

namespace weft::bench {
namespace {

using nlohmann::json;

std::optional<double> maybe(std::mt19937& rng, double v) { return rng() % 3 == 0 ? std::nullopt : std::optional(v); }

BenchResults random_results(std::mt19937& rng) {
  std::uniform_real_distribution<double> u(0.001, 2);
  BenchResults r{.model = "cnn", .parameters = 91706, .workers = 1 + static_cast<int>(rng() % 8), .batch = 32,
                 .lr = 0.05, .optimizer = "sgd", .H = 5, .steps = 60, .warmup = 5,
                 .mode = rng() % 2 ? Mode::kAccuracy : Mode::kIterations, .target_accuracy = 0.85,
                 .emulated = rng() % 2 == 0, .links = {}, .profile = "profile.json"};
  if (r.mode == Mode::kIterations) r.target_accuracy = 0;
  if (r.emulated) r.mtu = rng() % 2 ? 1500 : 9000;
  r.cores = std::array{CorePlacement::kAuto, CorePlacement::kPinned, CorePlacement::kShared}[rng() % 3];
  if (rng() % 2) r.outer = "nesterov lr 0.7 momentum 0.9";
  const std::vector<std::string> links{"20Mbit", "100Mbit", "1Gbit"};
  const std::vector<std::string> names{"wfbp", "dcredit", "dreamddp", kDdpPeerStrategy};
  for (int l = 0; l < 1 + static_cast<int>(rng() % 3); ++l) {
    r.links.push_back({.link = links[l], .bandwidth = u(rng) * 1e8, .a = u(rng) * 1e-3, .b = u(rng) * 1e-8,
                       .network = "net-" + links[l] + ".json", .profile = "profile-" + links[l] + ".json",
                       .host = rng() % 2 ? "host-" + links[l] + ".json" : ""});
    for (const std::string& s : names) {
      if (rng() % 4 == 0) continue;
      RunResult run{.strategy = s, .kind = s == kDdpPeerStrategy ? kDdpPeerStrategy : "weft", .link = links[l],
                    .bandwidth = r.links.back().bandwidth, .workers = r.workers,
                    .period = s == "dreamddp" ? 5 : 1, .measured_iteration = u(rng),
                    .measured_iterations = {u(rng), u(rng), u(rng)},
                    .predicted_iteration = maybe(rng, u(rng)), .measured_compute = maybe(rng, u(rng)),
                    .predicted_compute = maybe(rng, u(rng)), .predicted_slowed_compute = maybe(rng, u(rng)),
                    .predicted_on_own_compute = maybe(rng, u(rng)), .retimed_compute = maybe(rng, u(rng)),
                    .predicted_retimed = maybe(rng, u(rng)),
                    .speedup_vs_wfbp = maybe(rng, u(rng)),
                    .predicted_speedup_vs_wfbp = maybe(rng, u(rng)), .steady_iterations = 50,
                    .steps = 60, .final_loss = u(rng), .options = {{"partition_B", 65536}},
                    .metrics = "runs/" + links[l] + "-" + s + ".jsonl"};
      for (int k = 0; k < static_cast<int>(rng() % 4); ++k) {
        run.accuracy.push_back({.iter = 50 * k + 49, .wall = u(rng), .training = u(rng), .accuracy = u(rng) / 2,
                                .own_accuracy = maybe(rng, u(rng) / 2)});
      }
      run.time_to_accuracy = maybe(rng, u(rng));
      run.training_time_to_accuracy = maybe(rng, u(rng));
      run.times_to_accuracy = {maybe(rng, u(rng)), maybe(rng, u(rng))};
      if (rng() % 2) run.seed = rng() % 1000;
      r.runs.push_back(run);
    }
  }
  if (rng() % 2) {
    r.failed.push_back({.strategy = "plsgd", .link = "20Mbit", .message = "exited \"2\"", .log = "logs/x.log"});
  }
  if (rng() % 2) r.skipped.push_back({.strategy = "ps", .reason = "--strategy ps: parameter-server ..."});
  if (rng() % 2) r.traces = TracePair{.strategy = "dcredit", .link = "20Mbit", .predicted = "p.json", .measured = ""};
  return r;
}

TEST(Results, JsonRoundTripsEveryField) {
  std::mt19937 rng(1);
  for (int trial = 0; trial < 100; ++trial) {
    const BenchResults r = random_results(rng);
    const json once = to_json(r);
    const json twice = to_json(results_from_json(once, "bench.json"));
    EXPECT_EQ(once, twice) << once.dump(2);
  }
}

// The fields other tools rely on (the minimum) are in every run.
TEST(Results, EveryRunHasTheFieldsOtherToolsRead) {
  std::mt19937 rng(2);
  for (int trial = 0; trial < 50; ++trial) {
    const json j = to_json(random_results(rng));
    EXPECT_EQ(j.at("schema"), kResultsSchema);
    for (const json& run : j.at("runs")) {
      for (const char* key : {"strategy", "bandwidth_Bps", "workers", "measured_iteration_s", "predicted_iteration_s",
                              "error_pct", "measured_compute_s", "predicted_compute_s", "speedup_vs_wfbp", "kind",
                              "link"}) {
        EXPECT_TRUE(run.contains(key)) << key;
      }
      EXPECT_TRUE(run.at("measured_iteration_s").is_number());
      EXPECT_TRUE(run.at("bandwidth_Bps").is_number());
      EXPECT_TRUE(run.at("predicted_iteration_s").is_number() || run.at("predicted_iteration_s").is_null());
    }
  }
}

// Removing any field, at the top or in a run, is an error that names its path.
TEST(Results, AMissingFieldIsNamedByItsPath) {
  std::mt19937 rng(3);
  BenchResults r;
  do r = random_results(rng);
  while (r.runs.empty());
  const json full = to_json(r);
  for (const auto& [key, value] : full.items()) {
    // Optional: see BenchesBeforeMtuReadAsEthernetFrames, BenchesBeforePinningReadAsShared;
    // benches before the outer optimizer ran without one.
    if (key == "mtu_B" || key == "cores" || key == "outer_optimizer") continue;
    json broken = full;
    broken.erase(key);
    try {
      results_from_json(broken, "bench.json");
      ADD_FAILURE() << "no error without " << key;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("bench.json"), std::string::npos) << e.what();
    }
  }
  for (const auto& [key, value] : full.at("runs")[0].items()) {
    // Optional: see BenchesBeforeSlowedComputeReadNone.
    if (key == "predicted_slowed_compute_s" || key == "predicted_on_own_compute_s" || key == "retimed_compute_s" ||
        key == "predicted_retimed_s") {
      continue;
    }
    // Optional: see BenchesBeforeSeedsReadNone.
    if (key == "time_to_accuracy_runs_s" || key == "seed") continue;
    json broken = full;
    broken["runs"][0].erase(key);
    try {
      results_from_json(broken, "bench.json");
      ADD_FAILURE() << "no error without runs[0]." << key;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("runs[0]." + key), std::string::npos) << e.what();
    }
  }
}

// Benches written before --seeds have neither every run's time to accuracy nor
// the median run's seed.
TEST(Results, BenchesBeforeSeedsReadNone) {
  std::mt19937 rng(5);
  BenchResults r;
  do r = random_results(rng);
  while (r.runs.empty());
  json before = to_json(r);
  for (json& run : before["runs"]) {
    run.erase("time_to_accuracy_runs_s");
    run.erase("seed");
  }
  for (const RunResult& run : results_from_json(before, "bench.json").runs) {
    EXPECT_TRUE(run.times_to_accuracy.empty());
    EXPECT_FALSE(run.seed);
  }
  before["runs"][0]["time_to_accuracy_runs_s"] = json::array({1.5, "soon"});
  EXPECT_THROW(results_from_json(before, "bench.json"), UsageError);
}

// Benches written before `--mtu` existed ran 1500-byte frames and have no mtu_B.
TEST(Results, BenchesBeforeMtuReadAsEthernetFrames) {
  std::mt19937 rng(5);
  for (const bool emulated : {true, false}) {
    BenchResults r = random_results(rng);
    r.emulated = emulated;
    r.mtu = emulated ? 9000 : 0;
    json old = to_json(r);
    old.erase("mtu_B");
    EXPECT_EQ(results_from_json(old, "bench.json").mtu, emulated ? 1500 : 0);
    EXPECT_EQ(results_from_json(to_json(r), "bench.json").mtu, r.mtu);
  }
}

// Benches written before placements (Note [Hosts on cores]) ran the processes on
// any core and have no cores field.
TEST(Results, BenchesBeforePlacementsReadAsShared) {
  std::mt19937 rng(6);
  BenchResults r = random_results(rng);
  r.cores = CorePlacement::kPinned;
  json old = to_json(r);
  EXPECT_EQ(results_from_json(old, "bench.json").cores, CorePlacement::kPinned);
  old.erase("cores");
  EXPECT_EQ(results_from_json(old, "bench.json").cores, CorePlacement::kShared);
  old["cores"] = "somewhere";
  EXPECT_THROW(results_from_json(old, "bench.json"), UsageError);
}

// Benches written before the simulator reported its slowed compute, or before
// the bench predicted each run on its own compute or re-timed, have none.
TEST(Results, BenchesBeforeSlowedComputeReadNone) {
  std::mt19937 rng(6);
  BenchResults r = random_results(rng);
  for (RunResult& run : r.runs) {
    run.predicted_slowed_compute = 0.02;
    run.predicted_on_own_compute = 0.03;
    run.retimed_compute = 0.04;
    run.predicted_retimed = 0.05;
  }
  json old = to_json(r);
  old["schema"] = kResultsSchemaV1;  // Note [Bench schema versions]
  for (json& run : old["runs"]) {
    for (const char* key :
         {"predicted_slowed_compute_s", "predicted_on_own_compute_s", "retimed_compute_s", "predicted_retimed_s"}) {
      run.erase(key);
    }
  }
  for (const RunResult& run : results_from_json(old, "bench.json").runs) {
    EXPECT_FALSE(run.predicted_slowed_compute);
    EXPECT_FALSE(run.predicted_on_own_compute);
    EXPECT_FALSE(run.retimed_compute);
    EXPECT_FALSE(run.predicted_retimed);
  }
  for (const RunResult& run : results_from_json(to_json(r), "bench.json").runs) {
    EXPECT_EQ(run.predicted_slowed_compute, 0.02);
    EXPECT_EQ(run.predicted_on_own_compute, 0.03);
    EXPECT_EQ(run.retimed_compute, 0.04);
    EXPECT_EQ(run.predicted_retimed, 0.05);
  }
}

// Note [Bench schema versions]: weft-bench/1 files from before the compute
// fields load with them unknown; a weft-bench/2 file must hold them.
TEST(Results, VersionOneFilesWithoutComputeLoadVersionTwoMustHoldIt) {
  const BenchResults v1 = read_results("fuzz/corpus/bench_results/v1-before-compute.json");
  ASSERT_FALSE(v1.runs.empty());
  for (const RunResult& run : v1.runs) {
    EXPECT_FALSE(run.measured_compute);
    EXPECT_FALSE(run.predicted_compute);
  }
  std::mt19937 rng(9);
  BenchResults r;
  do r = random_results(rng);
  while (r.runs.empty());
  json j = to_json(r);
  EXPECT_EQ(j["schema"], "weft-bench/2");
  j["runs"][0].erase("measured_compute_s");
  EXPECT_THROW(results_from_json(j, "b"), UsageError);
  j["schema"] = "weft-bench/1";
  EXPECT_FALSE(results_from_json(j, "b").runs[0].measured_compute);
  j["schema"] = "weft-bench/3";
  try {
    results_from_json(j, "b");
    ADD_FAILURE() << "weft-bench/3 read";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("\"weft-bench/3\", which this weft does not read"), std::string::npos)
        << e.what();
  }
}

TEST(Results, MistypedFieldsAndOtherSchemasAreRejected) {
  std::mt19937 rng(4);
  BenchResults r;
  do r = random_results(rng);
  while (r.runs.empty());
  json j = to_json(r);
  j["runs"][0]["measured_iteration_s"] = "fast";
  EXPECT_THROW(results_from_json(j, "b"), UsageError);
  j = to_json(r);
  j["runs"][0]["measured_iteration_runs_s"] = {0.1, "slow"};
  EXPECT_THROW(results_from_json(j, "b"), UsageError);
  j = to_json(r);
  j["workers"] = 2.5;
  EXPECT_THROW(results_from_json(j, "b"), UsageError);
  j = to_json(r);
  j["schema"] = "weft-bench/0";
  EXPECT_THROW(results_from_json(j, "b"), UsageError);
  j = to_json(r);
  j["mode"] = "fast";
  EXPECT_THROW(results_from_json(j, "b"), UsageError);
  EXPECT_THROW(results_from_json(json::array(), "b"), UsageError);
}

TEST(Results, ErrorIsRelativeToThePrediction) {
  RunResult run{.measured_iteration = 0.12, .predicted_iteration = 0.1};
  EXPECT_NEAR(*run.error_pct(), 20.0, 1e-9);
  run.predicted_iteration.reset();
  EXPECT_FALSE(run.error_pct().has_value());
  run.predicted_iteration = 0;
  EXPECT_FALSE(run.error_pct().has_value());
}

TEST(Results, SpeedupsAreAgainstMeasuredWfbpOnTheSameLink) {
  BenchResults r;
  r.runs = {{.strategy = "wfbp", .link = "A", .measured_iteration = 0.4},
            {.strategy = "dcredit", .link = "A", .measured_iteration = 0.2},
            {.strategy = kDdpPeerStrategy, .kind = kDdpPeerStrategy, .link = "A", .measured_iteration = 0.5},
            {.strategy = "dcredit", .link = "B", .measured_iteration = 0.2}};
  compute_speedups(r);
  EXPECT_DOUBLE_EQ(*r.runs[0].speedup_vs_wfbp, 1.0);
  EXPECT_DOUBLE_EQ(*r.runs[1].speedup_vs_wfbp, 2.0);
  EXPECT_DOUBLE_EQ(*r.runs[2].speedup_vs_wfbp, 0.8);
  EXPECT_FALSE(r.runs[3].speedup_vs_wfbp.has_value());  // no wfbp on B
}

TEST(Results, WriteIsAtomicAndReadable) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("weft_results_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::mt19937 rng(5);
  const BenchResults r = random_results(rng);
  write_results(r, dir / "bench.json");
  write_results(r, dir / "bench.json");  // over an existing file
  EXPECT_FALSE(std::filesystem::exists(dir / "bench.json.tmp"));
  EXPECT_EQ(to_json(read_results(dir / "bench.json")), to_json(r));
  EXPECT_THROW(write_results(r, dir / "no such folder" / "bench.json"), std::runtime_error);
  std::filesystem::remove_all(dir);
}

TEST(Results, ReadingSaysWhichFileIsMissingOrNotJson) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("weft_results_read_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto message_of = [](const std::filesystem::path& file) {
    try {
      read_results(file);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message_of(dir / "absent.json").find("absent.json: cannot read the bench.json"), std::string::npos);
  std::ofstream(dir / "truncated.json") << "{\"schema\": \"weft-bench/1\", \"runs\": [";
  EXPECT_NE(message_of(dir / "truncated.json").find("truncated.json: not valid JSON"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace weft::bench
