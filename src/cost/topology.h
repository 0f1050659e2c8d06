// Sites: ranks grouped by the links between them (docs/formats.md "Topology").
//
// A site is a rack, a lab or a cloud zone: ranks whose links are fast and short.
// Sites are joined by a WAN, one link per ordered pair of sites: the topology's
// `wan` for every pair but those its `links` give their own (between()). The
// emulator builds this network (netem/netem.h, Note [Emulated sites] in
// netem/delay_line.h); the cost model prices collectives on it (cost/cluster.h,
// Note [Collectives across sites]); the hierarchical strategies run over it
// (docs/strategies.md, "Sites").
//
// Thread-safety: plain data; the functions are pure but for reading the file named.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "units/units.h"

namespace weft {

// A group of ranks with fast links among them.
struct Site {
  std::vector<int> ranks;        // RANKs (workers 0..P-1, then servers), each in one site only
  BytesPerSecond bandwidth = 0;  // each of its endpoints' links, each direction; > 0
  Seconds latency = 0;           // one-way, between two of its endpoints; >= 0
  bool operator==(const Site&) const = default;
};

// A link between sites: one ordered pair's, or the default for every pair.
struct Wan {
  BytesPerSecond bandwidth = 0;  // the link's rate, its one direction; > 0 with 2+ sites
  Seconds latency = 0;           // one-way, between endpoints of two sites; >= 0
  bool operator==(const Wan&) const = default;
};

// One ordered pair of sites whose link is not the topology's `wan`: frames from
// site `from` to site `to` cross `link`. The way back is a pair of its own.
struct WanLink {
  int from = 0;  // an index into Topology::sites
  int to = 0;    // another one: from != to
  Wan link;
  bool operator==(const WanLink&) const = default;
};

// No sites: every rank alike (one link each, as the cluster's bandwidth says).
struct Topology {
  std::vector<Site> sites;
  Wan wan;                     // every ordered pair's link, but those in `links`
  std::vector<WanLink> links;  // each ordered pair at most once; empty: all pairs alike
  bool empty() const { return sites.empty(); }
  bool operator==(const Topology&) const = default;
};

// The link frames from site `from` to site `to` cross: its entry in `links`,
// else `wan`. REQUIRES from != to, both indices into topology.sites (THROWS
// std::logic_error naming them otherwise).
Wan between(const Topology& topology, int from, int to);

// A round trip between two sites' endpoints: one way on each pair's link,
// latency(from → to) + latency(to → from). REQUIRES as between().
Seconds round_trip(const Topology& topology, int from, int to);

// The ordered pairs whose link differs from `wan`, as a clause to append to a
// one-line description: "; site 0 to 1 at 50Mbit, 10ms one-way; site 1 to 0 at
// ..." ("" when every pair is alike).
std::string describe_links(const Topology& topology);

// `--sites AxB`: A sites of B ranks each, ranks in order
// (site 0 gets ranks 0..B-1: the workers first, then the servers), each site's
// links at `bandwidth` with `latency` inside.
// THROWS UsageError naming --sites unless `text` is two positive integers joined
// by 'x' whose product is `ranks`.
std::vector<Site> sites_shorthand(std::string_view text, int ranks, BytesPerSecond bandwidth, Seconds latency);

// A topology file (docs/formats.md "Topology").
// THROWS UsageError naming the file, the field and the value, and what is accepted,
// for a file that cannot be read, is not JSON, or holds a field out of range
// (rates and times as the --bandwidth and --latency flags take them, the WAN's and
// each link's as --wan-bandwidth and --wan-latency), or a link whose `from` or
// `to` is not a site's index, joins a site to itself, or gives an ordered pair
// again (`links[1].to`).
Topology read_topology(const std::string& path);

// What a command line says about sites; an empty string: not given.
struct SiteFlags {
  std::string sites;          // --sites AxB
  std::string topology;       // --topology FILE
  std::string wan_bandwidth;  // --wan-bandwidth Q
  std::string wan_latency;    // --wan-latency D

  bool given() const { return !sites.empty() || !topology.empty() || !wan_bandwidth.empty() || !wan_latency.empty(); }
};

// The topology `flags` give for `ranks` ranks: from --sites with each site at
// `bandwidth` and `latency` and the --wan-* flags, or from the --topology file.
// Nothing given: empty (uniform links).
// THROWS UsageError naming the flag for: --sites with --topology, --wan-* with
// --topology (the file gives the WAN) or without --sites, --sites of more than one
// site without --wan-bandwidth, and what sites_shorthand and read_topology throw.
Topology topology_of(const SiteFlags& flags, int ranks, BytesPerSecond bandwidth, Seconds latency);

// Which workers an averaging operation averages over, and by which collectives
// (Note [Sites in a schedule] in schedule/schedule.h).
enum class Reach {
  kAll,      // every worker, one collective over them all (a ring across the sites too)
  kSite,     // each site's workers among themselves; exact (never encoded)
  kBySites,  // every worker, by sites: summed inside each site, then between one leader
             // per site (in the message's encoding), then sent back inside each site
};
std::string_view to_string(Reach reach);

// The site holding `rank`, or -1 where it is in none.
int site_of(const Topology& topology, int rank);

// THROWS UsageError naming --topology (or --sites), the site and the rank, unless
// every rank of 0..ranks-1 is in exactly one site, every site has a rank, every
// rate is > 0 and every latency >= 0, with 2+ sites the WAN's rate is > 0, and
// each of `links` joins two different sites, an ordered pair once, at a rate > 0.
// An empty topology is valid.
void validate(const Topology& topology, int ranks);

}  // namespace weft
