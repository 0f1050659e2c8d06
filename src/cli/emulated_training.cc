#include "cli/emulated_training.h"

#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/cluster_flags.h"
#include "units/ranges.h"

#include "netem/netem.h"
#include "netem/netns.h"
#include "netem/shaping.h"
#include "runtime/launch/launcher.h"
#include "runtime/train/job.h"

namespace weft::cli {

void add_site_options(CLI::App& command, netem::SiteFlags& flags) {
  command.add_option("--sites", flags.sites,
                     "emulate A sites of B ranks each, AxB (2x2): ranks in order, workers first, then servers; "
                     "--bandwidth and --latency are the links inside a site, --wan-bandwidth and --wan-latency "
                     "those between sites");
  command.add_option("--wan-bandwidth", flags.wan_bandwidth,
                     "with --sites: each ordered pair of sites' link, shared by all traffic between them: 20Mbit")
      ->check(in_range(ranges::kWanBandwidth));
  command.add_option("--wan-latency", flags.wan_latency,
                     "with --sites: one-way delay between ranks of two sites: 20ms (a round trip takes twice it)")
      ->check(in_range(ranges::kWanLatency));
  command.add_option("--topology", flags.topology,
                     "emulate the sites of this JSON file (docs/formats.md, Topology): each site's ranks, bandwidth "
                     "and latency, and the WAN's");
}

std::string describe_sites(const netem::NetemOptions& network) {
  if (network.sites.empty()) return "";
  std::string text = fmt::format("{} site{}:", network.sites.size(), network.sites.size() == 1 ? "" : "s");
  for (std::size_t s = 0; s < network.sites.size(); ++s) {
    const netem::Site& site = network.sites[s];
    std::string ranks;
    for (const int rank : site.ranks) ranks += fmt::format("{}{}", ranks.empty() ? "" : ",", rank);
    text += fmt::format("{} ranks {} at {}{}", s == 0 ? "" : ";", ranks, format_bandwidth(site.bandwidth),
                        site.latency > 0 ? fmt::format(" {}s", site.latency) : "");
  }
  if (network.sites.size() > 1) {
    text += fmt::format("; between sites {} and {}s one-way", format_bandwidth(network.wan.bandwidth),
                        network.wan.latency);
    text += describe_links({.sites = network.sites, .wan = network.wan, .links = network.links});  // the pairs that differ
  }
  return text;
}

bool trains_on_emulated_links(bool bandwidth_given, bool nproc_given) {
  return bandwidth_given && nproc_given && !runtime::is_launched_worker();
}

int run_emulated_training(const EmulatedTraining& job) {
  const std::string rate = format_bandwidth(job.bandwidth);
  if (!netem::has_network_privileges()) {
    throw UsageError(fmt::format(
        "--bandwidth {} with --nproc {}: emulating the workers' links needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN, "
        "for network namespaces and tc); run it with sudo. Without root, leave out --bandwidth to train over "
        "loopback (the planner then assumes --network FILE, from `weft profile --network --nproc {}`, or 1Gbit)",
        rate, job.workers, job.workers));
  }
  netem::NetemOptions network{.workers = job.workers,
                              .servers = job.servers,
                              .bandwidth = job.bandwidth,
                              .latency = job.latency,
                              .server_bandwidth = job.server_bandwidth,
                              .cores = job.cores};
  netem::apply_site_flags(job.sites, network);
  netem::validate(network);
  // The same command line in every rank, from this very executable (Note [Training
  // on emulated links]).
  std::vector<std::string> argv = runtime::current_command_line();
  argv.at(0) = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::vector<std::vector<std::string>> argv_per_rank(static_cast<std::size_t>(job.workers + job.servers),
                                                            argv);
  std::cerr << fmt::format("weft train: {} worker{}{} on emulated {} links (weft netem), planned for the {} "
                           "TCP delivers over them\n",
                           job.workers, job.workers == 1 ? "" : "s",
                           job.servers == 0 ? "" : fmt::format(" and {} server{}", job.servers,
                                                               job.servers == 1 ? "" : "s"),
                           rate, format_bandwidth(netem::payload_rate(job.bandwidth, network.mtu)));
  if (!network.sites.empty()) std::cerr << "weft train: " << describe_sites(network) << "\n";
  const netem::RunReport report =
      netem::run_emulated(network, argv_per_rank, {.grace = job.failure_timeout},
                          {std::string(runtime::kLaunchedWorkerVariable) + "=1",
                           fmt::format("{}={}", runtime::kEmulatedMtuVariable, network.mtu)});
  if (report.exit_status != 0) std::cerr << "weft train: " << report.message << "\n";
  return report.exit_status;
}

}  // namespace weft::cli
