// `weft profile`: measures what the planner needs to know about this machine.
//   --model M    per-layer forward/backward times of a runtime model → profile JSON
//                (--nproc K: K processes profiling together, as K workers share the cores;
//                --host FILE: and what it measured of this machine, with --interference how
//                much compute and all-reduces slow each other)
//   --network    the all-reduce cost fit a + b·n over real Gloo all-reduces
#include <algorithm>
#include <iostream>
#include <memory>
#include <optional>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/cluster_flags.h"
#include "cli/commands.h"
#include "cost/host.h"
#include "profile/profile.h"
#include "profile/zoo.h"
#include "runtime/comm/codecs.h"
#include "runtime/measure/layer_profiler.h"
#include "runtime/measure/network_profile.h"
#include "runtime/model/model.h"
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
  std::string host;  // --model: where the host description goes
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
}

// One line per measured host parameter, with its unit and what it means
// (docs/cost-model.md §7.3).
void print_host(const Host& host) {
  fmt::print("host: {}\n", host.description);
  const auto line = [](std::string_view name, std::string value, std::string_view meaning) {
    fmt::print("  {:<22} {:>9}  {}\n", name, value, meaning);
  };
  if (host.processes > 0) {
    line("processes, cores", fmt::format("{}, {}", host.processes, host.cores),
         "workers that shared this machine's cores as the layers were timed");
  }
  line("comm_cores", fmt::format("{:.2f}", host.comm_cores), "of a core a message in flight keeps busy per worker");
  line("comm_weight", fmt::format("{:.2f}", host.comm_weight), "a message's weight against a layer's 1 for the cores");
  line("core_wait_s", format_duration(host.core_wait), "a collective's wait for a core while all are taken");
  line("skew_s", format_duration(host.skew), "the last worker's lateness at a collective after compute");
  line("back_to_back_skew_s", format_duration(host.back_to_back_skew), "the same, right after another collective");
  line("drift", fmt::format("{:.3f}", host.drift), "further lateness per second computed apart (s/s)");
  for (const auto& [codec, seconds] : host.codec_cost) {
    line("codec " + codec, fmt::format("{:.2g} s", seconds),
         codec == "powersgd" ? "to encode and decode per rows·cols·rank" : "to encode and decode per value");
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
          [&flags](const Profile& profile, const Host& measured) {
            print_table(profile);
            if (!flags.out.empty()) {
              save_profile(profile, flags.out);
              fmt::print("profile written to {}\n", flags.out);
            }
            if (flags.host.empty()) return;
            Host host = measured;
            host.codec_cost = runtime::measure_codec_costs();  // docs/compression.md
            if (host.description.empty()) host.description = fmt::format("one process profiling {}", profile.model);
            print_host(host);
            save_host(host, flags.host);
            fmt::print("host written to {}\n", flags.host);
          },
  };
  return runtime::run_model_profile(job);
}

// The backend (runtime/measure/network_profile.h) launches the workers itself when given
// --nproc, like `weft train`.
int run_network_profile(const ProfileFlags& flags) {
  runtime::NetworkProfileOptions options = flags.network_options;
  options.out = flags.out;
  options.cores = parse_core_placement(flags.cores);
  if (!flags.min_bytes.empty()) options.min_bytes = static_cast<Bytes>(ranges::parse(ranges::kMinBytes, flags.min_bytes));
  if (!flags.max_bytes.empty()) options.max_bytes = static_cast<Bytes>(ranges::parse(ranges::kMaxBytes, flags.max_bytes));
  return runtime::run_network_profile(options);
}

}  // namespace

void add_profile(CLI::App& app, int& exit_status) {
  auto flags = std::make_shared<ProfileFlags>();
  CLI::App* cmd = app.add_subcommand("profile", "Measure a runtime model's per-layer times, or (--network) "
                                                "fit the all-reduce cost a + b*n; writes a profile JSON");
  cmd->add_option("--model", flags->model, fmt::format("runtime model: {}", fmt::join(runtime::model_names(), ", ")));
  cmd->add_option("--batch", flags->batch, "batch per worker")->capture_default_str()
      ->check(in_range(ranges::kBatch));
  cmd->add_option("--iterations,-n", flags->iterations,
                  "timed iterations (the median is kept); default 20, or 200 with --nproc 2 or more (or "
                  "WORLD_SIZE >= 2)")
      ->check(in_range(ranges::kProfileIterations));
  cmd->add_option("--warmup", flags->warmup, "untimed iterations first")->capture_default_str()
      ->check(in_range(ranges::kWarmup));
  cmd->add_option("--threads", flags->threads, "LibTorch intra-op threads (1: workers share the cores)")
      ->capture_default_str()
      ->check(in_range(ranges::kThreads));
  cmd->add_option("--seed", flags->seed, "model initialisation seed")->capture_default_str();
  cmd->add_flag("--interference", flags->interference,
                "--model --host FILE with --nproc K >= 2: then all-reduce and train beside the layers and write "
                "to the host description how much compute and communication slow each other and how late the "
                "last process reaches a collective (docs/cost-model.md 7.3)");
  cmd->add_flag("--network", flags->network, "fit the all-reduce cost over real Gloo all-reduces instead");
  cmd->add_option("--nproc", flags->network_options.nproc,
                  "local processes: --model profiles them together, sharing the cores as K workers will (the "
                  "median per layer is kept); --network measures all-reduces between them (>= 2). Default: "
                  "alone, or one process of a job given by MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE")
      ->check(in_range(ranges::kProcesses));
  cmd->add_option("--min-bytes", flags->min_bytes, "--network: smallest all-reduce (default 4KiB)")
      ->check(in_range(ranges::kMinBytes));
  cmd->add_option("--max-bytes", flags->max_bytes, "--network: largest all-reduce; sizes grow 4x (default 64MiB)")
      ->check(in_range(ranges::kMaxBytes));
  cmd->add_option("--repeats", flags->network_options.repeats,
                  "--network: rounds, each timing every message size once (medians kept)")
      ->capture_default_str()
      ->check(in_range(ranges::kRepeats));
  cmd->add_option("--failure-timeout", flags->network_options.failure_timeout,
                  "--nproc: seconds a collective may make no progress before the processes give up")
      ->capture_default_str()
      ->check(in_range(ranges::kFailureTimeout));
  cmd->add_option("--cores", flags->cores, std::string("--nproc: ") + kCorePlacementHelp)->capture_default_str();
  cmd->add_option("--out", flags->out, "write the result as JSON (atomically)");
  cmd->add_option("--host", flags->host,
                  "--model: also write what was measured of this machine (cores shared, with --interference how "
                  "compute and communication slow each other) as a host description, read by plan, simulate, "
                  "train and bench --host");
  cmd->callback([flags, &exit_status] {
    if (flags->network && !flags->model.empty()) {
      throw UsageError("weft profile: --model and --network measure different things; give one of them");
    }
    if (!flags->out.empty()) check_output("--out", flags->out);
    if (!flags->host.empty()) {
      if (flags->network) throw UsageError("weft profile: --host describes the machine a --model profile ran on; "
                                           "--network writes its fit to --out");
      check_output("--host", flags->host);
    } else if (flags->interference) {
      throw UsageError("weft profile: --interference measures this machine, not the model: give --host FILE for "
                       "what it measures");
    }
    exit_status = flags->network ? run_network_profile(*flags) : run_model_profile(*flags);
  });
}

}  // namespace weft::cli
