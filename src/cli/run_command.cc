// `weft run --nproc K [--servers S] [--bandwidth Q] -- COMMAND ARGS`: a local
// launcher for any program, torchrun's job (docs/launcher.md). It starts K (+S)
// processes of COMMAND with the torchrun variables and supervises them with the
// same launcher `weft train --nproc` uses (runtime/launch/launcher.h); with --bandwidth,
// each behind its own emulated link, through the same run_emulated `weft netem` and
// `weft train --bandwidth` use (netem/netem.h). No third supervisor.
//
// Note [weft run in a build tree]
// When the directory holding this weft binary has a `python` subdirectory (a
// build tree holds the `import weft` package at build/python/weft), it is put in
// front of every process's PYTHONPATH, so `build/weft run --nproc 2 -- python3
// train.py` imports the weft just built, with no set-up. An installed weft has no
// such directory beside it and leaves PYTHONPATH alone.
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/cluster_flags.h"
#include "cli/commands.h"
#include "cli/emulated_training.h"
#include "netem/netem.h"
#include "netem/netns.h"
#include "netem/process.h"
#include "runtime/launch/launcher.h"
#include "runtime/train/train.h"
#include "units/cores.h"
#include "units/units.h"

namespace weft::cli {
namespace {

namespace fs = std::filesystem;

struct RunFlags {
  int nproc = 0;
  int servers = 0;
  std::string bandwidth;         // empty: loopback, no emulation
  std::string server_bandwidth;  // empty: same as --bandwidth
  std::string latency;           // empty: no delay
  double failure_timeout = runtime::kDefaultFailureTimeout;
  std::string cores = "auto";
  netem::SiteFlags sites;
  std::vector<std::string> command;
};

// Note [weft run in a build tree].
std::vector<std::string> python_path_environment() {
  std::error_code error;
  const fs::path package_dir = fs::read_symlink("/proc/self/exe", error).parent_path() / "python";
  if (error || !fs::is_directory(package_dir, error)) return {};
  const char* current = std::getenv("PYTHONPATH");
  const std::string rest = current != nullptr && current[0] != '\0' ? std::string(":") + current : "";
  return {"PYTHONPATH=" + package_dir.string() + rest};
}

int run(const RunFlags& flags, bool bandwidth_given) {
  // Note [Emulated sites] (netem/delay_line.h): a topology file gives every link.
  const bool emulated = bandwidth_given || !flags.sites.topology.empty();
  if (flags.command.empty()) {
    throw UsageError("no command to run: give it after `--`, as in `weft run --nproc 2 -- /usr/bin/python3 train.py`");
  }
  ranges::check(ranges::kProcesses, flags.nproc);
  ranges::check(ranges::kLocalServers, flags.servers);
  if (flags.nproc + flags.servers > netem::kMaxRanks) {
    throw UsageError(fmt::format("--servers {}: expected an integer >= 0, with --nproc + --servers at most {}",
                                 flags.servers, netem::kMaxRanks));
  }
  ranges::check(ranges::kFailureTimeout, flags.failure_timeout);
  if (flags.sites.given() && !emulated) {
    throw UsageError(fmt::format("{}: only with --bandwidth (the links inside each site), or --topology FILE",
                                 !flags.sites.sites.empty() ? "--sites" : "--wan-bandwidth/--wan-latency"));
  }
  if (bandwidth_given && !flags.sites.topology.empty()) {
    throw UsageError("--bandwidth: not with --topology, whose file gives each site's bandwidth");
  }
  if (!flags.server_bandwidth.empty() && !emulated) {
    throw UsageError("--server-bandwidth: only with --bandwidth (the workers' emulated links)");
  }
  if (!flags.latency.empty() && !emulated) {
    throw UsageError("--latency: only with --bandwidth (the delay is the emulated links')");
  }
  const std::string executable = netem::require_executable(flags.command[0]);
  const CorePlacement cores = parse_core_placement(flags.cores);
  std::vector<std::string> environment = python_path_environment();
  const std::string servers =
      flags.servers == 0 ? "" : fmt::format(" + {} server{}", flags.servers, flags.servers == 1 ? "" : "s");

  if (!emulated) {
    std::cerr << fmt::format("weft run: {} process{}{} of `{}` over loopback\n", flags.nproc,
                             flags.nproc == 1 ? "" : "es", servers, netem::join_command(flags.command));
    return runtime::launch({.nproc = flags.nproc,
                            .servers = flags.servers,
                            .executable = executable,
                            .argv = flags.command,
                            .environment = environment,
                            .failure_timeout = flags.failure_timeout,
                            .cores = cores});
  }

  netem::NetemOptions network{
      .workers = flags.nproc,
      .servers = flags.servers,
      .bandwidth = bandwidth_given ? ranges::parse(ranges::kBandwidth, flags.bandwidth) : 0,
      .latency = flags.latency.empty() ? 0 : ranges::parse(ranges::kLatency, flags.latency),
      .server_bandwidth = flags.server_bandwidth.empty() ? 0 : ranges::parse(ranges::kServerBandwidth, flags.server_bandwidth),
      .cores = cores};
  netem::apply_site_flags(flags.sites, network);
  netem::validate(network);
  if (!netem::has_network_privileges()) {
    throw UsageError(fmt::format(
        "{}: emulating each process's link needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN, for network "
        "namespaces and tc); run it with sudo, or leave out --bandwidth to run over loopback",
        bandwidth_given ? "--bandwidth " + flags.bandwidth : "--topology " + flags.sites.topology));
  }
  std::cerr << fmt::format("weft run: {} process{}{} of `{}`, each behind an emulated {}\n", flags.nproc,
                           flags.nproc == 1 ? "" : "es", servers, netem::join_command(flags.command),
                           network.sites.empty() ? format_bandwidth(network.bandwidth) + " link"
                                                 : "link, in " + describe_sites(network));
  environment.push_back(std::string(runtime::kLaunchedWorkerVariable) + "=1");
  environment.push_back(fmt::format("{}={}", runtime::kEmulatedMtuVariable, network.mtu));  // weft.DataParallel plans with it
  std::vector<std::string> argv = flags.command;
  argv[0] = executable;
  const std::vector<std::vector<std::string>> argv_per_rank(static_cast<std::size_t>(flags.nproc + flags.servers),
                                                            argv);
  const netem::RunReport report =
      netem::run_emulated(network, argv_per_rank, {.grace = flags.failure_timeout}, environment);
  if (report.exit_status != 0) std::cerr << "weft run: " << report.message << "\n";
  return report.exit_status;
}

}  // namespace

void add_run(CLI::App& app, int& exit_status) {
  auto flags = std::make_shared<RunFlags>();
  CLI::App* cmd = app.add_subcommand(
      "run",
      "Run COMMAND as K local processes of one distributed job (a torchrun replacement): each gets MASTER_ADDR, "
      "MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, WEFT_ROLE (worker|server), WEFT_WORKERS, "
      "WEFT_SERVERS (and WEFT_SERVER_RANK on servers, the last S ranks). A process that fails is named, the others "
      "are stopped, and its exit status is weft run's. With --bandwidth (root) each runs behind its own emulated "
      "link, as in weft netem. See docs/launcher.md.\n"
      "Example: weft run --nproc 2 -- /usr/bin/python3 train.py");
  cmd->add_option("--nproc", flags->nproc,
                  fmt::format("worker processes K (with --servers: at most {} in all)", netem::kMaxRanks))
      ->required()
      ->check(in_range(ranges::kProcesses));
  cmd->add_option("--servers", flags->servers, "parameter-server processes S, ranks K..K+S-1")->capture_default_str()
      ->check(in_range(ranges::kLocalServers));
  cmd->add_option("--bandwidth,-B", flags->bandwidth,
                  "run each process behind its own emulated link of this rate, both directions: 100Mbit, 1Gbit "
                  "(root; default: loopback, not shaped)")
      ->check(in_range(ranges::kBandwidth));
  cmd->add_option("--server-bandwidth", flags->server_bandwidth, "each server's emulated link (default: --bandwidth)")
      ->check(in_range(ranges::kServerBandwidth));
  cmd->add_option("--latency", flags->latency,
                  "with --bandwidth: one-way delay between two processes, 20ms (a round trip takes twice it)")
      ->check(in_range(ranges::kLatency));
  add_site_options(*cmd, flags->sites);
  cmd->add_option("--failure-timeout", flags->failure_timeout,
                  "seconds the other processes may take to exit after one failed (or stays stopped) before they "
                  "are terminated")
      ->capture_default_str()
      ->check(in_range(ranges::kFailureTimeout));
  cmd->add_option("--cores", flags->cores, kCorePlacementHelp)->capture_default_str();
  cmd->add_option("command", flags->command, "the program and its arguments, after --");
  cmd->callback([cmd, flags, &exit_status] { exit_status = run(*flags, cmd->count("--bandwidth") > 0); });
}

}  // namespace weft::cli
