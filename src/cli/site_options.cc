#include "cli/site_options.h"

#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/cluster_flags.h"
#include "cost/topology.h"
#include "units/ranges.h"

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

}  // namespace weft::cli
