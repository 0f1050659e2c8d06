// `weft profile`: measures what the planner needs to know about this machine.
//   --model M    per-layer forward/backward times of a runtime model → profile JSON
//                (--nproc K: K processes profiling together, as K workers share the cores;
//                --interference: and how much compute and all-reduces slow each other)
//   --network    the all-reduce cost fit a + b·n over real Gloo all-reduces
#include <algorithm>
#include <iostream>
#include <memory>
#include <optional>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.h"
#include "profile/profile.h"
#include "profile/zoo.h"
#include "runtime/layer_profiler.h"
#include "runtime/model.h"
#include "runtime/codecs.h"
#include "runtime/network_profile.h"
#include "units/cores.h"
#include "units/files.h"
#include "units/units.h"

namespace weft::cli {
namespace {

struct ProfileFlags {
  // --model
  std::string model;
  int batch = 32;
  std::optional<int> iterations;  // default: timed_iterations()
  int warmup = 3;
  int threads = 1;
  std::uint64_t seed = 0;
  bool interference = false;
  // --network
  bool network = false;
  runtime::NetworkProfileOptions network_options;
  std::string min_bytes;  // empty = the backend's default
  std::string max_bytes;
  // both
  std::string out;
  std::string cores = "auto";  // --nproc
};

void print_table(const Profile& profile) {
  fmt::print("{} (batch {}, {})\n", profile.model, profile.batch, profile.device);
  fmt::print("{:<3} {:<10} {:>10} {:>10} {:>10}\n", "#", "layer", "params", "forward", "backward");
  for (int l = 0; l < profile.size(); ++l) {
    const Layer& layer = profile.layers[l];
    fmt::print("{:<3} {:<10} {:>10} {:>10} {:>10}\n", l, layer.name, layer.params, format_duration(layer.fp),
               format_duration(layer.bp));
  }
  fmt::print("{:<14} {:>10} {:>10} {:>10}\n", "total", profile.total_params(),
             format_duration(profile.forward_time()), format_duration(profile.backward_time()));
  if (profile.compute_slowdown > 0 || profile.comm_slowdown > 0) {
    fmt::print("compute took {:.0f}% longer while all-reducing (compute_slowdown {:.3f}); all-reduces took {:.0f}% "
               "longer while computing (comm_slowdown {:.3f})\n",
               100 * profile.compute_slowdown, profile.compute_slowdown, 100 * profile.comm_slowdown,
               profile.comm_slowdown);
  }
  if (profile.transfer_slowdown) {
    fmt::print("transfers to the next process took {:.0f}% longer while computing (transfer_slowdown {:.3f})\n",
               100 * *profile.transfer_slowdown, *profile.transfer_slowdown);
  }
  if (profile.skew > 0 || profile.back_to_back_skew > 0 || profile.drift > 0) {
    fmt::print("in step, the last process reached a collective {} after the average one (skew_s), {} when it "
               "followed another (back_to_back_skew_s); apart, {} further per second computed (drift {:.3f})\n",
               format_duration(profile.skew), format_duration(profile.back_to_back_skew),
               format_duration(profile.drift), profile.drift);
  }
  const auto in_turn = [](double pair) {
    return collectives_run_in_turn(pair) ? "they run one after the other" : "they run at once";
  };
  if (profile.pair_slowdown > 0) {
    fmt::print("of two small all-reduces issued together while computing, the second took {:.0f}% of one's own "
               "time more (pair_slowdown {:.3f}: {})\n",
               100 * profile.pair_slowdown, profile.pair_slowdown, in_turn(profile.pair_slowdown));
  }
  if (profile.waiting_pair_slowdown) {
    const double waiting = *profile.waiting_pair_slowdown;
    fmt::print("while waiting, {:.0f}% (waiting_pair_slowdown {:.3f}: {})\n", 100 * waiting, waiting,
               in_turn(waiting));
  }
}

// 20 timed iterations for one process; 200 for several sharing the cores: which of
// them share a core shifts only every second or so, and over fewer iterations that
// biases whole profiles. The processes are --nproc's, or those of a job started
// by hand (torchrun's variables).
int timed_iterations(const ProfileFlags& flags) {
  if (flags.iterations) return *flags.iterations;
  return runtime::profiled_processes(flags.network_options.nproc) > 1 ? 200 : 20;
}

int run_model_profile(const ProfileFlags& flags) {
  if (flags.model.empty()) {
    throw UsageError(fmt::format("weft profile: give --model (one of {}) or --network",
                                 fmt::join(runtime::model_names(), ", ")));
  }
  const std::vector<std::string> zoo = zoo_models();
  if (std::find(zoo.begin(), zoo.end(), flags.model) != zoo.end()) {
    throw UsageError(fmt::format("--model {}: a zoo model, whose layer times are computed, not measured: `weft plan "
                                 "--model {}` predicts it; weft profile measures the models weft trains: {}",
                                 flags.model, flags.model, fmt::join(runtime::model_names(), ", ")));
  }
  const runtime::ModelProfileJob job{
      .profiler = {.model = flags.model,
                   .batch = flags.batch,
                   .warmup = flags.warmup,
                   .iterations = timed_iterations(flags),
                   .threads = flags.threads,
                   .seed = flags.seed,
                   .progress =
                       [](int done, int total) {
                         std::cerr << fmt::format("\rprofiling: iteration {}/{}", done, total)
                                   << (done == total ? "\n" : "") << std::flush;
                       }},
      .nproc = flags.network_options.nproc,
      .interference = flags.interference,
      .failure_timeout = flags.network_options.failure_timeout,
      .cores = parse_core_placement(flags.cores),
      .report =
          [&flags](const Profile& measured) {
            Profile profile = measured;
            profile.codec_cost = runtime::measure_codec_costs();  // docs/compression.md
            print_table(profile);
            if (!flags.out.empty()) {
              save_profile(profile, flags.out);
              fmt::print("profile written to {}\n", flags.out);
            }
          },
  };
  return runtime::run_model_profile(job);
}

// The backend (runtime/network_profile.h) launches the workers itself when given
// --nproc, like `weft train`.
int run_network_profile(const ProfileFlags& flags) {
  runtime::NetworkProfileOptions options = flags.network_options;
  options.out = flags.out;
  options.cores = parse_core_placement(flags.cores);
  if (!flags.min_bytes.empty()) options.min_bytes = parse_bytes(flags.min_bytes);
  if (!flags.max_bytes.empty()) options.max_bytes = parse_bytes(flags.max_bytes);
  return runtime::run_network_profile(options);
}

}  // namespace

void add_profile(CLI::App& app, int& exit_status) {
  auto flags = std::make_shared<ProfileFlags>();
  CLI::App* cmd = app.add_subcommand("profile", "Measure a runtime model's per-layer times, or (--network) "
                                                "fit the all-reduce cost a + b*n; writes a profile JSON");
  cmd->add_option("--model", flags->model, fmt::format("runtime model: {}", fmt::join(runtime::model_names(), ", ")));
  cmd->add_option("--batch", flags->batch, "batch per worker")->capture_default_str();
  cmd->add_option("--iterations,-n", flags->iterations,
                  "timed iterations (the median is kept); default 20, or 200 with --nproc 2 or more (or "
                  "WORLD_SIZE >= 2)");
  cmd->add_option("--warmup", flags->warmup, "untimed iterations first")->capture_default_str();
  cmd->add_option("--threads", flags->threads, "LibTorch intra-op threads (1: workers share the cores)")
      ->capture_default_str();
  cmd->add_option("--seed", flags->seed, "model initialisation seed")->capture_default_str();
  cmd->add_flag("--interference", flags->interference,
                "--model with --nproc K >= 2: then all-reduce back to back, alone and while profiling again, and "
                "write how much compute and all-reduces slow each other (compute_slowdown, comm_slowdown); then "
                "train in step and apart and write how late the last process reaches a collective (skew_s, "
                "back_to_back_skew_s, drift)");
  cmd->add_flag("--network", flags->network, "fit the all-reduce cost over real Gloo all-reduces instead");
  cmd->add_option("--nproc", flags->network_options.nproc,
                  "local processes: --model profiles them together, sharing the cores as K workers will (the "
                  "median per layer is kept); --network measures all-reduces between them (>= 2). Default: "
                  "alone, or one process of a job given by MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE");
  cmd->add_option("--min-bytes", flags->min_bytes, "--network: smallest all-reduce (default 4KiB)");
  cmd->add_option("--max-bytes", flags->max_bytes, "--network: largest all-reduce; sizes grow 4x (default 64MiB)");
  cmd->add_option("--repeats", flags->network_options.repeats,
                  "--network: rounds, each timing every message size once (medians kept)")
      ->capture_default_str();
  cmd->add_option("--failure-timeout", flags->network_options.failure_timeout,
                  "--nproc: seconds a collective may make no progress before the processes give up")
      ->capture_default_str();
  cmd->add_option("--cores", flags->cores, std::string("--nproc: ") + kCorePlacementHelp)->capture_default_str();
  cmd->add_option("--out", flags->out, "write the result as JSON (atomically)");
  cmd->callback([flags, &exit_status] {
    if (flags->network && !flags->model.empty()) {
      throw UsageError("weft profile: --model and --network measure different things; give one of them");
    }
    if (!flags->out.empty()) check_output("--out", flags->out);
    exit_status = flags->network ? run_network_profile(*flags) : run_model_profile(*flags);
  });
}

}  // namespace weft::cli
