// Sites from the command line's flags for the emulated network (netem.h).
#include "netem/netem.h"

namespace weft::netem {

void apply_site_flags(const SiteFlags& flags, NetemOptions& options) {
  Topology topology = topology_of(flags, options.workers + options.servers, options.bandwidth, options.latency);
  options.sites = std::move(topology.sites);
  options.wan = topology.wan;
  options.links = std::move(topology.links);
}

}  // namespace weft::netem
