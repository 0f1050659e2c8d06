// `weft netem`: run a command once per worker (and per server) under emulated
// per-rank links (netem/netem.h). The exit status is the command's when every rank
// succeeds (0), else the first failed rank's; 124 on --timeout; 128 + signal when
// interrupted.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/cluster_flags.h"
#include "cli/commands.h"
#include "cli/site_options.h"
#include "netem/netem.h"
#include "netem/process.h"
#include "units/cores.h"
#include "units/units.h"

namespace weft::cli {
namespace {

struct NetemFlags {
  int workers = 0;
  int servers = 0;
  std::string bandwidth;
  std::string latency = "0";
  std::string server_bandwidth;  // empty: same as --bandwidth
  std::string timeout = "0";     // the whole job's limit; 0: none
  std::string grace = "10s";
  int port = 29500;
  int mtu = 1500;
  std::string cores = "auto";
  netem::SiteFlags sites;
  std::vector<std::string> command;
};

void run_netem(const NetemFlags& flags, int& exit_status) {
  if (flags.bandwidth.empty() == flags.sites.topology.empty()) {
    throw UsageError(flags.bandwidth.empty()
                         ? "--bandwidth: required (each rank's link), unless a --topology file gives each site's"
                         : "--bandwidth: not with --topology, whose file gives each site's bandwidth");
  }
  netem::NetemOptions network{
      .workers = flags.workers,
      .servers = flags.servers,
      .bandwidth = flags.bandwidth.empty() ? 0 : ranges::parse(ranges::kBandwidth, flags.bandwidth),
      .latency = ranges::parse(ranges::kLatency, flags.latency),
      .server_bandwidth = flags.server_bandwidth.empty() ? 0 : ranges::parse(ranges::kServerBandwidth, flags.server_bandwidth),
      .master_port = flags.port,
      .mtu = flags.mtu,
      .cores = parse_core_placement(flags.cores),
  };
  netem::apply_site_flags(flags.sites, network);
  netem::validate(network);  // before anything is sized by the counts
  netem::require_executable(flags.command[0]);  // before the line saying it runs
  const netem::SuperviseOptions supervision{.timeout = ranges::parse(ranges::kJobTimeout, flags.timeout),
                                            .grace = ranges::parse(ranges::kGrace, flags.grace)};
  std::cerr << fmt::format("weft netem: {} worker{}{}{}, running `{}` in each\n", flags.workers,
                           flags.workers == 1 ? "" : "s",
                           network.sites.empty() ? " at " + format_bandwidth(network.bandwidth)
                                                 : " in " + describe_sites(network),
                           flags.servers == 0
                               ? ""
                               : fmt::format(" and {} server{} at {}", flags.servers,
                                             flags.servers == 1 ? "" : "s",
                                             format_bandwidth(network.server_bandwidth > 0
                                                                  ? network.server_bandwidth
                                                                  : network.bandwidth)),
                           netem::join_command(flags.command));
  const std::vector<std::vector<std::string>> argv_per_rank(
      static_cast<std::size_t>(flags.workers + flags.servers), flags.command);
  const netem::RunReport report = netem::run_emulated(network, argv_per_rank, supervision);
  if (report.exit_status != 0) std::cerr << "weft netem: " << report.message << "\n";
  exit_status = report.exit_status;
}

}  // namespace

void add_netem(CLI::App& app, int& exit_status) {
  auto flags = std::make_shared<NetemFlags>();
  CLI::App* cmd = app.add_subcommand(
      "netem",
      "Run a command once per worker (and server), each in its own network namespace behind a "
      "link shaped to --bandwidth. Needs root. Each process gets MASTER_ADDR, MASTER_PORT, RANK, "
      "WORLD_SIZE, LOCAL_RANK, WEFT_ROLE (worker|server), WEFT_WORKERS, WEFT_SERVERS and, on "
      "servers, WEFT_SERVER_RANK (servers have RANK P..P+S-1). Where there is a core for each, each process "
      "is pinned to cores of its own, as a host has (--cores).\n"
      "Example: sudo weft netem --workers 4 --bandwidth 100Mbit -- weft train --strategy dcredit");
  cmd->add_option("--workers,-P", flags->workers,
                  fmt::format("number of workers P (workers + servers: at most {} on one machine)", netem::kMaxRanks))
      ->required()
      ->check(in_range(ranges::kLocalWorkers));
  cmd->add_option("--servers", flags->servers, "parameter servers S")->capture_default_str()
      ->check(in_range(ranges::kLocalServers));
  cmd->add_option("--bandwidth,-B", flags->bandwidth,
                  "each worker's link, both directions: 100Mbit, 1Gbit, 10MB/s, bytes/s (required unless "
                  "--topology)")
      ->check(in_range(ranges::kBandwidth));
  cmd->add_option("--latency", flags->latency,
                  "one-way delay between two ranks: 2ms, 40ms (a round trip takes twice it; 0: none)")
      ->capture_default_str()
      ->check(in_range(ranges::kLatency));
  cmd->add_option("--server-bandwidth", flags->server_bandwidth,
                  "each server's link (default: --bandwidth)")
      ->check(in_range(ranges::kServerBandwidth));
  add_site_options(*cmd, flags->sites);
  cmd->add_option("--timeout", flags->timeout, "end every rank after this long, e.g. 600s (0: no limit)")
      ->capture_default_str()
      ->check(in_range(ranges::kJobTimeout));
  cmd->add_option("--grace", flags->grace,
                  "after a rank fails, how long the others may run before they are terminated")
      ->capture_default_str()
      ->check(in_range(ranges::kGrace));
  cmd->add_option("--port", flags->port, "MASTER_PORT given to every rank")->capture_default_str()
      ->check(in_range(ranges::kPort));
  cmd->add_option("--mtu", flags->mtu, "MTU of the emulated links, bytes (9000: jumbo frames)")
      ->capture_default_str()
      ->check(in_range(ranges::kMtu));
  cmd->add_option("--cores", flags->cores, kCorePlacementHelp)->capture_default_str();
  cmd->add_option("command", flags->command, "the command and its arguments, after --")->required();
  cmd->callback([flags, &exit_status] { run_netem(*flags, exit_status); });
}

}  // namespace weft::cli
