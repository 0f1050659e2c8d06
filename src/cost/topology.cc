// Sites from `--sites AxB` or a topology file (cost/topology.h, docs/formats.md "Topology").
#include "cost/topology.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "units/files.h"
#include "units/json_reader.h"
#include "units/limits.h"
#include "units/ranges.h"

namespace weft {

namespace {

constexpr std::string_view kWhat =
    "a topology: {\"sites\": [{\"ranks\": [0, 1], \"bandwidth\": \"1Gbit\", \"latency\": \"0.1ms\"}, ...], "
    "\"wan\": {\"bandwidth\": \"20Mbit\", \"latency\": \"20ms\"}, \"links\": [{\"from\": 0, \"to\": 1, "
    "\"bandwidth\": \"50Mbit\", \"latency\": \"10ms\", \"both_ways\": true}, ...]}";

// A rate or a time: a string as the flags take it ("1Gbit", "20ms") or a number
// (bytes/s, seconds), in `range`; an error says which flag takes the same.
double quantity(const JsonReader& object, const std::string& name, const ranges::Range& range) {
  const nlohmann::json& value = object.get(name);
  const std::string expected =
      fmt::format("{}, as {} takes it (such as {})", ranges::accepted(range), ranges::named(range.flag),
                  range.kind == ranges::Kind::kRate ? "\"20Mbit\" or 2500000" : "\"20ms\" or 0.02");
  double parsed = 0;
  if (value.is_number()) {
    parsed = value.get<double>();
  } else if (value.is_string()) {
    try {
      const std::string text = value.get<std::string>();
      parsed = range.kind == ranges::Kind::kRate ? parse_bandwidth(text) : parse_duration(text);
    } catch (const UsageError&) {
      object.reject(name, expected, value);
    }
  } else {
    object.reject(name, expected, value);
  }
  if (!ranges::contains(range, parsed)) object.reject(name, expected, value);
  return parsed;
}

void check_rate(BytesPerSecond rate, std::string_view flag) {
  if (!(rate > 0) || !std::isfinite(rate)) {
    throw UsageError(fmt::format("{} B/s: a link rate must be a positive number, such as 100Mbit, 1Gbit or 10MB/s",
                                 ranges::given(flag, fmt::format("{}", rate))));
  }
}

void check_latency(Seconds latency, std::string_view flag) {
  if (!(latency >= 0) || !std::isfinite(latency)) {
    throw UsageError(fmt::format("{} s: must be 0 or a positive duration, such as 50us or 20ms",
                                 ranges::given(flag, fmt::format("{}", latency))));
  }
}

// A site's index for field `name` of `link`.
int site_index(const JsonReader& link, const std::string& name, std::size_t sites) {
  const nlohmann::json& value = link.get(name);
  if (!value.is_number_integer() || value.get<std::int64_t>() < 0 ||
      value.get<std::int64_t>() >= static_cast<std::int64_t>(sites)) {
    link.reject(name, fmt::format("a site's index into \"sites\", 0..{}", sites - 1), value);
  }
  return value.get<int>();
}

// The file's "links" (docs/formats.md "Topology"): each entry gives one ordered
// pair of sites its own link, or both pairs with "both_ways"; a field it leaves
// out is the "wan"'s. A field of another name is refused, so that a misspelt
// "both_ways" does not leave the way back at the default unseen.
void read_links(const JsonReader& top, Topology& topology) {
  const std::size_t sites = topology.sites.size();
  const nlohmann::json& entries = top.array("links");
  if (sites < 2 && !entries.empty()) top.reject("links", "no links with one site: nothing lies between sites", entries);
  std::size_t i = 0;
  top.each("links", [&](const JsonReader& link) {
    const nlohmann::json& entry = entries[i++];
    for (const auto& [key, value] : entry.items()) {
      if (key != "from" && key != "to" && key != "bandwidth" && key != "latency" && key != "both_ways") {
        link.reject(key, "no field of that name: a link has from, to, bandwidth, latency, both_ways", value);
      }
    }
    const int from = site_index(link, "from", sites);
    const int to = site_index(link, "to", sites);
    if (to == from) {
      link.reject("to", fmt::format("a site other than \"from\" ({}): a link joins two sites", from), link.get("to"));
    }
    if (!link.has("bandwidth") && !link.has("latency")) {
      link.reject("", "a link with its \"bandwidth\", its \"latency\" or both (what it leaves out is the \"wan\"'s)",
                  entry);
    }
    const Wan own{.bandwidth = link.has("bandwidth") ? quantity(link, "bandwidth", ranges::kWanBandwidth)
                                                     : topology.wan.bandwidth,
                  .latency = link.has("latency") ? quantity(link, "latency", ranges::kWanLatency) : topology.wan.latency};
    const bool both_ways = link.has("both_ways") && link.boolean("both_ways");
    // Each ordered pair once: the field that gives a pair again is named.
    const auto add = [&](int a, int b, const std::string& field) {
      for (const WanLink& earlier : topology.links) {
        if (earlier.from == a && earlier.to == b) {
          link.reject(field, fmt::format("each ordered pair of sites once; site {} to {} is an earlier link's", a, b),
                      link.get(field));
        }
      }
      topology.links.push_back({.from = a, .to = b, .link = own});
    };
    add(from, to, "to");
    if (both_ways) add(to, from, "both_ways");
  });
}

}  // namespace

Wan between(const Topology& topology, int from, int to) {
  const auto sites = static_cast<int>(topology.sites.size());
  if (from == to || from < 0 || to < 0 || from >= sites || to >= sites) {
    throw std::logic_error(fmt::format("between: sites {} and {} of {}: two different sites", from, to, sites));
  }
  for (const WanLink& link : topology.links) {
    if (link.from == from && link.to == to) return link.link;
  }
  return topology.wan;
}

Seconds round_trip(const Topology& topology, int from, int to) {
  return between(topology, from, to).latency + between(topology, to, from).latency;
}

std::string describe_links(const Topology& topology) {
  std::string text;
  for (const WanLink& link : topology.links) {
    if (link.link == topology.wan) continue;
    text += fmt::format("; site {} to {} at {}, {} one-way", link.from, link.to, format_bandwidth(link.link.bandwidth),
                        format_duration(link.link.latency));
  }
  return text;
}

std::vector<Site> sites_shorthand(std::string_view text, int ranks, BytesPerSecond bandwidth, Seconds latency) {
  const std::size_t x = text.find('x');
  int count = 0;
  int per_site = 0;
  const auto whole = [](std::string_view part, int& out) {
    const auto [end, error] = std::from_chars(part.data(), part.data() + part.size(), out);
    return error == std::errc{} && end == part.data() + part.size() && out >= 1;
  };
  if (x == std::string_view::npos || !whole(text.substr(0, x), count) || !whole(text.substr(x + 1), per_site)) {
    throw UsageError(
        fmt::format("{}: expected AxB, A sites of B ranks each, such as 2x2", ranges::given("--sites", text)));
  }
  if (static_cast<long long>(count) * per_site != ranks) {
    throw UsageError(fmt::format("{}: {} sites of {} ranks make {} ranks, but the job has {} (workers + "
                                 "servers)",
                                 ranges::given("--sites", text), count, per_site, static_cast<long long>(count) * per_site, ranks));
  }
  std::vector<Site> sites(static_cast<std::size_t>(count));
  for (int k = 0; k < ranks; ++k) sites[static_cast<std::size_t>(k / per_site)].ranks.push_back(k);
  for (Site& site : sites) {
    site.bandwidth = bandwidth;
    site.latency = latency;
  }
  return sites;
}

Topology read_topology(const std::string& path) {
  const std::string origin = ranges::given("--topology", path);
  std::string text;
  try {
    text = read_input(path, "the topology");
  } catch (const UsageError& e) {
    // read_input names the file ("PATH: why"), not the flag.
    const std::string_view why = e.what();
    throw UsageError(why.starts_with(path) ? origin + std::string(why.substr(path.size()))
                                           : fmt::format("{}: {}", origin, why));
  }
  const nlohmann::json document = parse_json(text, origin, kWhat);
  const JsonReader top(document, "", origin, kWhat);
  Topology topology;
  top.each("sites", [&](const JsonReader& site) {
    Site s;
    for (const std::int64_t rank : site.integers("ranks")) {
      if (rank < 0 || rank >= limits::kMaxProcesses) site.reject("ranks", fmt::format("RANKs in [0, {})", limits::kMaxProcesses), rank);
      s.ranks.push_back(static_cast<int>(rank));
    }
    s.bandwidth = quantity(site, "bandwidth", ranges::kBandwidth);
    s.latency = site.has("latency") ? quantity(site, "latency", ranges::kLatency) : 0;
    topology.sites.push_back(std::move(s));
  });
  if (topology.sites.empty()) top.reject("sites", "at least one site", top.get("sites"));
  if (top.has("wan")) {
    const JsonReader wan = top.child("wan");
    topology.wan.bandwidth = quantity(wan, "bandwidth", ranges::kWanBandwidth);
    topology.wan.latency = wan.has("latency") ? quantity(wan, "latency", ranges::kWanLatency) : 0;
  } else if (topology.sites.size() > 1) {
    top.get("wan");  // missing: names the field and what the file should hold
  }
  if (top.has("links")) read_links(top, topology);
  return topology;
}

Topology topology_of(const SiteFlags& flags, int ranks, BytesPerSecond bandwidth, Seconds latency) {
  const bool wan_given = !flags.wan_bandwidth.empty() || !flags.wan_latency.empty();
  const char* wan_flag = !flags.wan_bandwidth.empty() ? "--wan-bandwidth" : "--wan-latency";
  if (!flags.topology.empty()) {
    if (!flags.sites.empty()) {
      throw UsageError(fmt::format("{}: not with {}, whose file lists the sites", ranges::named("--sites"),
                                   ranges::named("--topology")));
    }
    if (wan_given) {
      throw UsageError(fmt::format("{}: not with {}, whose file gives the WAN", ranges::named(wan_flag),
                                   ranges::named("--topology")));
    }
    return read_topology(flags.topology);
  }
  if (flags.sites.empty()) {
    if (wan_given) {
      throw UsageError(fmt::format("{}: only with {} AxB (or a {} file)", ranges::named(wan_flag),
                                   ranges::named("--sites"), ranges::named("--topology")));
    }
    return {};
  }
  Topology topology{.sites = sites_shorthand(flags.sites, ranks, bandwidth, latency), .wan = {}};
  if (topology.sites.size() > 1 && flags.wan_bandwidth.empty()) {
    throw UsageError(fmt::format("{}: give the link between sites with {} (and {}), such as {} {}",
                                 ranges::given("--sites", flags.sites), ranges::named("--wan-bandwidth"),
                                 ranges::named("--wan-latency"), ranges::given("--wan-bandwidth", "20Mbit"),
                                 ranges::given("--wan-latency", "20ms")));
  }
  if (!flags.wan_bandwidth.empty()) topology.wan.bandwidth = ranges::parse(ranges::kWanBandwidth, flags.wan_bandwidth);
  if (!flags.wan_latency.empty()) topology.wan.latency = ranges::parse(ranges::kWanLatency, flags.wan_latency);
  return topology;
}

std::string_view to_string(Reach reach) {
  switch (reach) {
    case Reach::kAll: return "all";
    case Reach::kSite: return "site";
    case Reach::kBySites: return "by-sites";
  }
  return "?";
}

int site_of(const Topology& topology, int rank) {
  for (std::size_t s = 0; s < topology.sites.size(); ++s) {
    for (const int r : topology.sites[s].ranks) {
      if (r == rank) return static_cast<int>(s);
    }
  }
  return -1;
}

void validate(const Topology& topology, int ranks) {
  if (topology.empty()) return;
  std::vector<int> site(static_cast<std::size_t>(std::max(ranks, 0)), -1);
  for (std::size_t s = 0; s < topology.sites.size(); ++s) {
    const Site& one = topology.sites[s];
    if (one.ranks.empty()) throw UsageError(fmt::format("{}: sites[{}] has no ranks", ranges::named("--topology"), s));
    for (const int rank : one.ranks) {
      if (rank < 0 || rank >= ranks) {
        throw UsageError(fmt::format("{}: sites[{}].ranks holds {}: the job's ranks are 0..{} (workers, "
                                     "then servers)",
                                     ranges::named("--topology"), s, rank, ranks - 1));
      }
      int& seen = site[static_cast<std::size_t>(rank)];
      if (seen >= 0) {
        throw UsageError(fmt::format("{}: rank {} is in sites[{}] and sites[{}]: each rank is in one site",
                                     ranges::named("--topology"), rank, seen, s));
      }
      seen = static_cast<int>(s);
    }
    check_rate(one.bandwidth, "--bandwidth");
    check_latency(one.latency, "--latency");
  }
  for (int rank = 0; rank < ranks; ++rank) {
    if (site[static_cast<std::size_t>(rank)] < 0) {
      throw UsageError(fmt::format("{}: rank {} is in no site; every rank 0..{} (workers, then servers) "
                                   "needs one",
                                   ranges::named("--topology"), rank, ranks - 1));
    }
  }
  if (topology.sites.size() > 1) {
    check_rate(topology.wan.bandwidth, "--wan-bandwidth");
    check_latency(topology.wan.latency, "--wan-latency");
  }
  const auto sites = static_cast<int>(topology.sites.size());
  for (std::size_t k = 0; k < topology.links.size(); ++k) {
    const WanLink& link = topology.links[k];
    if (link.from < 0 || link.to < 0 || link.from >= sites || link.to >= sites || link.from == link.to) {
      throw UsageError(fmt::format("{}: links[{}] joins sites {} and {}: a link joins two different sites of 0..{}",
                                   ranges::named("--topology"), k, link.from, link.to, sites - 1));
    }
    for (std::size_t j = 0; j < k; ++j) {
      if (topology.links[j].from == link.from && topology.links[j].to == link.to) {
        throw UsageError(fmt::format("{}: links[{}] and links[{}] both give site {} to {}: each ordered pair once",
                                     ranges::named("--topology"), j, k, link.from, link.to));
      }
    }
    if (!(link.link.bandwidth > 0) || !std::isfinite(link.link.bandwidth) || !(link.link.latency >= 0) ||
        !std::isfinite(link.link.latency)) {
      throw UsageError(fmt::format("{}: links[{}] (site {} to {}) at {} B/s and {} s one-way: a link needs a positive "
                                   "rate and a latency >= 0, as {} and {} take them",
                                   ranges::named("--topology"), k, link.from, link.to, link.link.bandwidth,
                                   link.link.latency, ranges::named("--wan-bandwidth"), ranges::named("--wan-latency")));
    }
  }
}

}  // namespace weft
