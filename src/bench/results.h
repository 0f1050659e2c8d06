// The results of `weft bench` (docs/cli.md §5) and their JSON file, which plots and other
// tools read. One file per bench: `<out>/bench.json`.
//
//   {"schema": "weft-bench/2",
//    "model": "cnn", "parameters": 91706, "workers": 4, "batch": 32, "lr": 0.05,
//    "optimizer": "sgd", "H": 5, "steps": 60, "warmup": 5,
//    "mode": "iterations" | "accuracy", "target_accuracy": 0.85,
//    "emulated": true, "mtu_B": 1500, "cores": "auto",
//    "links": [{"link": "100Mbit", "bandwidth_Bps": 12500000.0,
//               "a_s": 0.0012, "b_s_per_byte": 1.6e-7, "network": "net-100Mbit.json",
//               "profile": "profile-100Mbit.json", "host": "host-100Mbit.json"}],
//    "profile": "profile.json",
//    "runs": [{"strategy": "dcredit", "kind": "weft", "link": "100Mbit",
//              "bandwidth_Bps": 12500000.0, "workers": 4, "period": 1,
//              "measured_iteration_s": 0.21, "measured_iteration_runs_s": [0.22, 0.21, 0.20],
//              "predicted_iteration_s": 0.19,
//              "error_pct": 10.5, "measured_compute_s": 0.09, "predicted_compute_s": 0.08,
//              "predicted_slowed_compute_s": 0.085, "predicted_on_own_compute_s": 0.2,
//              "retimed_compute_s": 0.088, "predicted_retimed_s": 0.2,
//              "speedup_vs_wfbp": 1.3,
//              "predicted_speedup_vs_wfbp": 1.4, "steady_iterations": 55,
//              "steps": 60, "final_loss": 0.61, "options": {...},
//              "metrics": "runs/100Mbit-dcredit.jsonl",
//              "accuracy": [{"iter": 49, "wall_s": 11.2, "training_s": 9.1, "accuracy": 0.71}],
//              "time_to_accuracy_s": 40.2, "training_time_to_accuracy_s": 33.0}],
//    "failed": [{"strategy": "plsgd", "link": "20Mbit", "message": "...", "log": "logs/..."}],
//    "skipped": [{"strategy": "ps", "reason": "--strategy ps: parameter-server ..."}],
//    "traces": {"strategy": "dcredit", "link": "20Mbit",
//               "predicted": "trace-predicted.json", "measured": "trace-measured.json"}}
//
// Conventions: `kind` is "weft" for `weft train` runs and "pytorch-ddp" for the
// PyTorch DDP peer, whose prediction is the planner's `ddp` strategy (the same
// bucketing). `bandwidth_Bps` is the emulated link's rate, 0 for unshaped loopback
// (link "loopback"). `error_pct` = 100·(measured − predicted)/predicted;
// `speedup_vs_wfbp` = measured wfbp / measured this, on the same link.
// `measured_compute_s` is the run's forward + backward per iteration, its waits
// for communication left out, and `predicted_compute_s` the profile's: a run
// whose compute differs from its profile's ran on a machine faster or slower
// than the one profiled, whatever the network did; `predicted_slowed_compute_s`
// is the planner's for this strategy, the layers slowed where they overlap its
// messages (Note [Shared cores], sim/simulator.cc; absent in files written before
// it): against it, the measured compute tells how well the interference was
// predicted. `predicted_on_own_compute_s` is the planner's prediction again with
// every layer's time scaled by measured_compute_s / predicted_slowed_compute_s:
// what it would have said had it known how fast this run's machine computed
// (Note [Predicted on the run's own compute] in bench/bench.h).
// `retimed_compute_s` is the compute per iteration of the layers timed again
// just before the run, and `predicted_retimed_s` the planner's prediction with
// every layer scaled by retimed_compute_s / predicted_compute_s: a prediction
// made before the run on the machine as it was then (Note [Re-timed before each
// run], ibid.; both absent in files written before it). Quantities
// that could not be had (no wfbp run, accuracy never reached) are null. With
// `--repeats N` a strategy is trained N times: `measured_iteration_runs_s` holds
// each run's steady-state iteration time, in the order run, and the other fields
// are those of the median run (the lower median for even N). Paths are
// relative to the results file's folder.
//
// Thread-safety: plain data; the functions are pure except write_results.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/statistics.h"
#include "units/cores.h"
#include "units/units.h"

namespace weft::bench {

// Note [Bench schema versions]: weft-bench/2 is what write_results writes; every
// field above is present (null where it could not be had). weft-bench/1 files
// were written while fields were still being added under that one version: a /1
// file may lack measured_compute_s, predicted_compute_s and the fields marked
// "absent in files written before it", which then read as unknown. Any other
// version is refused, naming it. A change of shape bumps the version.
inline constexpr const char* kResultsSchema = "weft-bench/2";
inline constexpr const char* kResultsSchemaV1 = "weft-bench/1";
inline constexpr const char* kDdpPeerStrategy = "pytorch-ddp";

enum class Mode { kIterations, kAccuracy };

struct LinkResult {
  std::string link;            // "100Mbit", or "loopback"
  BytesPerSecond bandwidth = 0;  // 0 for loopback
  Seconds a = 0;               // the fitted all-reduce startup
  double b = 0;                // the fitted seconds per byte
  std::string network;         // the fit's file
  std::string profile;         // the profile its predictions used (Note [Interference per link], bench.h)
  std::string host;            // the host as measured over the link; empty in benches from before it
};

struct RunResult {
  std::string strategy;
  std::string kind = "weft";  // "weft" | "pytorch-ddp"
  std::string link;
  BytesPerSecond bandwidth = 0;
  int workers = 0;
  int period = 1;
  Seconds measured_iteration = 0;
  std::vector<Seconds> measured_iterations;  // every repeat's, in the order run
  std::optional<Seconds> predicted_iteration;
  // The median run's compute per iteration (the ranks' forward and backward,
  // bench/statistics.h) and the profile's; none where unknown (the DDP peer
  // does not report it).
  std::optional<Seconds> measured_compute;
  std::optional<Seconds> predicted_compute;
  // The plan's compute as simulated, slowed where it overlapped communication.
  std::optional<Seconds> predicted_slowed_compute;
  // The prediction with the layers as fast as they ran.
  std::optional<Seconds> predicted_on_own_compute;
  // The layers' compute per iteration timed just before the run, and the
  // prediction with the layers that fast.
  std::optional<Seconds> retimed_compute;
  std::optional<Seconds> predicted_retimed;
  std::optional<double> speedup_vs_wfbp;
  std::optional<double> predicted_speedup_vs_wfbp;
  int steady_iterations = 0;
  std::int64_t steps = 0;  // iterations the run completed
  double final_loss = 0;   // every rank's mean over the last iterations (bench::final_loss)
  nlohmann::json options = nlohmann::json::object();  // what the planner tuned
  std::string metrics;     // its metrics file
  std::vector<AccuracyPoint> accuracy;
  std::optional<Seconds> time_to_accuracy;           // wall-clock
  std::optional<Seconds> training_time_to_accuracy;  // evaluations left out
  // Every repeat's time to accuracy, in the order run (null: not reached); and
  // the seed of the run the other fields are of. Absent in files written
  // before --seeds.
  std::vector<std::optional<Seconds>> times_to_accuracy;
  std::optional<std::uint64_t> seed;

  // 100·(measured − predicted)/predicted, or none without a prediction.
  std::optional<double> error_pct() const;
  // The same against predicted_on_own_compute, and against predicted_retimed.
  std::optional<double> own_compute_error_pct() const;
  std::optional<double> retimed_error_pct() const;
};

struct FailedRun {
  std::string strategy;
  std::string link;
  std::string message;
  std::string log;
};

struct SkippedStrategy {
  std::string strategy;
  std::string reason;
};

struct TracePair {
  std::string strategy;
  std::string link;
  std::string predicted;
  std::string measured;
};

struct BenchResults {
  std::string model;
  std::int64_t parameters = 0;
  int workers = 0;
  int batch = 0;
  double lr = 0;
  std::string optimizer;
  int H = 0;
  std::string outer;  // local SGD's outer optimizer as "nesterov lr 0.7 momentum 0.9"; empty: none
  std::int64_t steps = 0;
  int warmup = 0;
  Mode mode = Mode::kIterations;
  double target_accuracy = 0;
  bool emulated = false;
  int mtu = 0;  // of the emulated links, bytes; 0 on loopback
  // Where the processes ran (--cores; Note [Hosts on cores], units/cores.h);
  // benches from before placements ran them on any core: shared.
  CorePlacement cores = CorePlacement::kAuto;
  std::vector<LinkResult> links;
  std::string profile;
  std::vector<RunResult> runs;
  std::vector<FailedRun> failed;
  std::vector<SkippedStrategy> skipped;
  std::optional<TracePair> traces;
};

// The JSON document described at the top.
nlohmann::json to_json(const BenchResults& results);

// Reads a document written by to_json. THROWS UsageError naming `origin` and the
// path of the first missing or mistyped field ("runs[3].measured_iteration_s"), a
// count outside docs/limits.md, or a schema other than kResultsSchema and
// kResultsSchemaV1 (Note [Bench schema versions]).
BenchResults results_from_json(const nlohmann::json& document, std::string_view origin);

// Reads `file` (a bench.json). THROWS UsageError naming the file when it cannot be
// read, is not JSON, or as results_from_json.
BenchResults read_results(const std::filesystem::path& file);

// Writes to_json(results) to `file` atomically (a temporary beside it, renamed), so
// a reader never sees half a file. THROWS std::runtime_error naming the file.
void write_results(const BenchResults& results, const std::filesystem::path& file);

// Fills speedup_vs_wfbp of every run from the measured wfbp run on the same link
// (none where there is none).
void compute_speedups(BenchResults& results);

}  // namespace weft::bench
