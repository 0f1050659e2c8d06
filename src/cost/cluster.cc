#include "cost/cluster.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <fmt/format.h>

#include "units/limits.h"

namespace weft {

std::string_view to_string(Arch arch) {
  switch (arch) {
    case Arch::kAllReduce: return "allreduce";
    case Arch::kParameterServer: return "ps";
  }
  return "?";
}

Arch parse_arch(std::string_view text) {
  if (text == "allreduce") return Arch::kAllReduce;
  if (text == "ps") return Arch::kParameterServer;
  throw UsageError(fmt::format("--arch: '{}' is not an architecture; accepted: allreduce, ps", text));
}

namespace {

// Rejects NaN as well as out-of-range values: every comparison with NaN is false.
bool positive(double v) { return v > 0 && std::isfinite(v); }
bool non_negative(double v) { return v >= 0 && std::isfinite(v); }

}  // namespace

void validate(const Cluster& c) {
  if (c.workers < 1 || c.workers > limits::kMaxWorkers) {
    throw UsageError(fmt::format("--workers: {} workers; need 1 to {} (docs/limits.md)", c.workers,
                                 limits::kMaxWorkers));
  }
  if (!positive(c.bandwidth) || c.bandwidth < limits::kMinBytesPerSecond) {
    throw UsageError(fmt::format(
        "--bandwidth: {} bytes/s; need a finite rate of at least {} byte/s (e.g. 1Gbit, 100Mbit, 10MB/s)",
        c.bandwidth, limits::kMinBytesPerSecond));
  }
  if (!non_negative(c.latency) || c.latency > limits::kMaxSeconds) {
    throw UsageError(fmt::format(
        "--latency: {} s; need a duration in [0, 1 day] (e.g. 50us, 2ms)", c.latency));
  }
  if (c.fitted) {
    if (!non_negative(c.fitted->a) || c.fitted->a > limits::kMaxSeconds) {
      throw UsageError(fmt::format(
          "fitted all-reduce a (--fit-a): {} s; need a finite duration >= 0", c.fitted->a));
    }
    if (!positive(c.fitted->b) || c.fitted->b > 1 / limits::kMinBytesPerSecond) {
      throw UsageError(fmt::format(
          "fitted all-reduce b (--fit-b): {} s/byte; need a finite value in (0, {}] "
          "(re-run `weft profile --network` if the fit came out non-positive)",
          c.fitted->b, 1 / limits::kMinBytesPerSecond));
    }
  }
  validate(c.host, "host");
  if (!c.topology.empty()) {
    if (c.arch != Arch::kAllReduce) {
      throw UsageError("--topology: sites are for all-reduce clusters; a parameter server's links are its own");
    }
    if (c.fitted) {
      throw UsageError("--network: a fitted all-reduce measures one uniform link; not with --sites or --topology");
    }
    validate(c.topology, c.workers);
  }
  if (c.arch == Arch::kParameterServer) {
    if (c.servers < 1 || c.servers > limits::kMaxServers) {
      throw UsageError(fmt::format("--servers: {} servers; need 1 to {} for --arch ps (docs/limits.md)",
                                   c.servers, limits::kMaxServers));
    }
    if (!(c.server_bandwidth == 0 ||
          (positive(c.server_bandwidth) && c.server_bandwidth >= limits::kMinBytesPerSecond))) {
      throw UsageError(fmt::format(
          "--server-bandwidth: {} bytes/s; need a finite rate of at least {} byte/s, or 0 for the "
          "workers' --bandwidth",
          c.server_bandwidth, limits::kMinBytesPerSecond));
    }
  }
}

namespace {

// A ring all-reduce of m members whose slowest hop has latency α and rate B: 2(m−1)
// steps of n/m bytes each (Note [Collectives across sites]).
struct Ring {
  int members = 1;
  Seconds alpha = 0;
  BytesPerSecond rate = 0;
  // Two members that swap their sums (an all-gather): one step, the ring's bytes.
  bool swap = false;

  Seconds startup() const { return (swap && members == 2 ? 1.0 : 2.0 * (members - 1)) * alpha; }
  // What n moves at: the rate scaled so that the flow's volume is n.
  BytesPerSecond capacity() const {
    return members > 1 ? rate * members / (2.0 * (members - 1)) : rate;
  }
  Seconds time(Bytes n) const {
    return members > 1 ? startup() + static_cast<double>(n) / capacity() : 0.0;
  }
};

// Note [Collectives across sites]: a step across a link of one-way delay d.
Seconds step_latency(Seconds one_way) { return 2 * one_way; }

// A step between sites `from` and `to`: a round trip, one way on each ordered
// pair's link (the data goes from → to, the receiver's go-ahead comes back).
Seconds step_latency(const Topology& t, int from, int to) { return round_trip(t, from, to); }

// The ring of every worker in rank order, over the sites' links and the WAN: each
// hop between sites on its own ordered pair's link (between()), the slowest hop
// setting the pace.
Ring whole_ring(const Cluster& c) {
  if (c.topology.empty()) return {.members = c.workers, .alpha = c.latency, .rate = c.bandwidth};
  const Topology& t = c.topology;
  std::vector<int> site(static_cast<std::size_t>(c.workers));
  for (int r = 0; r < c.workers; ++r) site[static_cast<std::size_t>(r)] = site_of(t, r);
  const auto next = [&](int r) { return site[static_cast<std::size_t>((r + 1) % c.workers)]; };
  std::map<std::pair<int, int>, int> crossing;  // hops per ordered pair of sites
  for (int r = 0; r < c.workers; ++r) {
    if (site[static_cast<std::size_t>(r)] != next(r)) ++crossing[{site[static_cast<std::size_t>(r)], next(r)}];
  }
  Ring ring{.members = c.workers, .alpha = 0, .rate = std::numeric_limits<double>::infinity()};
  for (int r = 0; r < c.workers; ++r) {
    const int a = site[static_cast<std::size_t>(r)];
    const int b = next(r);
    const Site& from = t.sites[static_cast<std::size_t>(a)];
    const Site& to = t.sites[static_cast<std::size_t>(b)];
    BytesPerSecond rate = std::min(from.bandwidth, to.bandwidth);
    Seconds alpha = step_latency(from.latency);
    if (a != b) {
      rate = std::min(rate, between(t, a, b).bandwidth / crossing[{a, b}]);
      alpha = step_latency(t, a, b);
    }
    ring.alpha = std::max(ring.alpha, alpha);
    ring.rate = std::min(ring.rate, rate);
  }
  return ring;
}

// Site s's workers' ring.
Ring site_ring(const Cluster& c, std::size_t s) {
  const Site& site = c.topology.sites[s];
  const auto members = std::count_if(site.ranks.begin(), site.ranks.end(), [&](int r) { return r < c.workers; });
  return {.members = static_cast<int>(members), .alpha = step_latency(site.latency), .rate = site.bandwidth};
}

// The ring of one leader per site in site order, over the WAN: leader s sends to
// leader s+1 (mod S) on that ordered pair's link, the slowest hop setting the
// pace. Two leaders swap their sums (Note [Sum by sites] in runtime/comm/sites.h),
// sending both ways at once: the slower direction sets the pace.
Ring leaders_ring(const Cluster& c) {
  const Topology& t = c.topology;
  const auto sites = static_cast<int>(t.sites.size());
  Ring ring{.members = sites, .alpha = 0, .rate = std::numeric_limits<double>::infinity(), .swap = true};
  for (const Site& site : t.sites) ring.rate = std::min(ring.rate, site.bandwidth);
  for (int s = 0; s < sites && sites > 1; ++s) {
    const int next = (s + 1) % sites;
    ring.alpha = std::max(ring.alpha, step_latency(t, s, next));
    ring.rate = std::min(ring.rate, between(t, s, next).bandwidth);  // with 2 sites, 1→0 is s = 1's hop
  }
  if (sites == 1) {  // no WAN stage (one member moves nothing): the WAN's figures, as ever
    ring.alpha = step_latency(t.wan.latency);
    ring.rate = std::min(ring.rate, t.wan.bandwidth);
  }
  return ring;
}

// A leader's broadcast of n bytes to the other k−1 workers of site s.
Seconds site_broadcast(const Cluster& c, std::size_t s, Bytes n) {
  const Ring ring = site_ring(c, s);
  if (ring.members <= 1) return 0;
  return ring.alpha + (ring.members - 1) * static_cast<double>(n) / ring.rate;
}

// The slowest site's ring time and, for kBySites, its broadcast after the leaders'.
Seconds slowest_site(const Cluster& c, Bytes n, bool broadcast) {
  Seconds slowest = 0;
  for (std::size_t s = 0; s < c.topology.sites.size(); ++s) {
    slowest = std::max(slowest, site_ring(c, s).time(n) + (broadcast ? site_broadcast(c, s, n) : 0.0));
  }
  return slowest;
}

// Capacity of the all-reduce fabric link; see allreduce_flow(). REQUIRES P >= 2.
BytesPerSecond fabric_capacity(const Cluster& c) {
  if (c.fitted) return 1.0 / c.fitted->b;
  return whole_ring(c).capacity();
}

BytesPerSecond server_rate(const Cluster& c) {
  return c.server_bandwidth > 0 ? c.server_bandwidth : c.bandwidth;
}

int worker_up(int p) { return 2 * p; }
int worker_down(int p) { return 2 * p + 1; }
int server_up(const Cluster& c, int s) { return 2 * c.workers + 2 * s; }
int server_down(const Cluster& c, int s) { return 2 * c.workers + 2 * s + 1; }

void check_endpoints(const Cluster& c, int worker, int server, Bytes n) {
  if (c.arch != Arch::kParameterServer || worker < 0 || worker >= c.workers || server < 0 ||
      server >= c.servers || n < 0) {
    throw std::logic_error(fmt::format(
        "parameter-server flow: worker {} server {} of {} bytes on a {} cluster of {} "
        "workers, {} servers",
        worker, server, n, to_string(c.arch), c.workers, c.servers));
  }
}

}  // namespace

LinkSet links_of(const Cluster& c) {
  LinkSet links;
  if (c.arch == Arch::kAllReduce) {
    // With one worker there is no fabric; the link exists so that ids stay valid, and
    // every flow on it has volume 0.
    links.capacity.push_back(c.workers > 1 ? fabric_capacity(c) : c.bandwidth);
    links.name.push_back("allreduce");
    for (std::size_t s = 0; s < c.topology.sites.size(); ++s) {
      links.capacity.push_back(site_ring(c, s).capacity());
      links.name.push_back(fmt::format("site{}", s));
    }
    if (!c.topology.empty()) {
      links.capacity.push_back(leaders_ring(c).capacity());
      links.name.push_back("wan");
    }
    return links;
  }
  for (int p = 0; p < c.workers; ++p) {
    links.capacity.push_back(c.bandwidth);
    links.name.push_back(fmt::format("worker{}.up", p));
    links.capacity.push_back(c.bandwidth);
    links.name.push_back(fmt::format("worker{}.down", p));
  }
  for (int s = 0; s < c.servers; ++s) {
    links.capacity.push_back(server_rate(c));
    links.name.push_back(fmt::format("server{}.up", s));
    links.capacity.push_back(server_rate(c));
    links.name.push_back(fmt::format("server{}.down", s));
  }
  return links;
}

namespace {

// Checks `points` (named `what` in `origin`'s errors) and makes their times
// non-decreasing in size (Note [Measured all-reduce curve]).
void check_and_pool(std::vector<MeasuredAllReduce>& points, std::string_view what, std::string_view origin) {
  for (std::size_t i = 0; i < points.size(); ++i) {
    const MeasuredAllReduce& p = points[i];
    if (p.bytes <= 0 || (i > 0 && p.bytes <= points[i - 1].bytes)) {
      throw UsageError(fmt::format("{}: {}[{}].bytes = {}; sizes must be positive and strictly ascending",
                                   origin, what, i, p.bytes));
    }
    if (!positive(p.seconds) || p.seconds > limits::kMaxSeconds) {
      throw UsageError(fmt::format("{}: {}[{}].seconds = {}; need a time in (0, 1 day]", origin, what, i, p.seconds));
    }
  }
  // Pool adjacent violators: each block holds the mean time of the sizes it spans.
  struct Block {
    double sum;
    int count;
    double mean() const { return sum / count; }
  };
  std::vector<Block> blocks;
  for (const MeasuredAllReduce& p : points) {
    blocks.push_back({p.seconds, 1});
    while (blocks.size() > 1 && blocks[blocks.size() - 2].mean() > blocks.back().mean()) {
      blocks[blocks.size() - 2].sum += blocks.back().sum;
      blocks[blocks.size() - 2].count += blocks.back().count;
      blocks.pop_back();
    }
  }
  std::size_t i = 0;
  for (const Block& block : blocks) {
    for (int k = 0; k < block.count; ++k) points[i++].seconds = block.mean();
  }
}

}  // namespace

FittedAllReduce measured_curve(std::vector<MeasuredAllReduce> points, std::string_view origin) {
  if (points.size() < 2) {
    throw UsageError(fmt::format("{}: {} measured all-reduce size(s); need at least two", origin, points.size()));
  }
  check_and_pool(points, "points", origin);
  const MeasuredAllReduce& last = points.back();
  const MeasuredAllReduce& before = points[points.size() - 2];
  double b = (last.seconds - before.seconds) / static_cast<double>(last.bytes - before.bytes);
  if (!positive(b)) b = last.seconds / static_cast<double>(last.bytes);  // the last sizes pooled: flat
  FittedAllReduce fit{.b = b, .curve = std::move(points)};
  fit.a = std::max(0.0, fit.curve.front().seconds - b * static_cast<double>(fit.curve.front().bytes));
  return fit;
}

FittedAllReduce measured_curves(std::vector<MeasuredAllReduce> ring, std::vector<MeasuredAllReduce> gathered,
                                Bytes gather_below, std::string_view origin) {
  // The ring sums no message smaller than gather_below: its times there are only
  // noise to pool into the sizes it does sum.
  const auto first_summed = std::find_if(ring.begin(), ring.end(),
                                         [&](const MeasuredAllReduce& p) { return p.bytes >= gather_below; });
  if (!gathered.empty() && ring.end() - first_summed >= 2) ring.erase(ring.begin(), first_summed);
  FittedAllReduce fit = measured_curve(std::move(ring), origin);
  check_and_pool(gathered, "all-gather points", origin);
  fit.gather_curve = std::move(gathered);
  fit.gather_below = gather_below;
  return fit;
}

namespace {

// startup(n) of Notes [Measured all-reduce curve] and [One curve per algorithm].
Seconds curve_startup(const FittedAllReduce& f, Bytes n) {
  const auto startup = [&](const MeasuredAllReduce& p) {
    return std::max(0.0, p.seconds - f.b * static_cast<double>(p.bytes));
  };
  const bool gathered = !f.gather_curve.empty() && summed_by_allgather(n, f.gather_below);
  const std::vector<MeasuredAllReduce>& curve = gathered ? f.gather_curve : f.curve;
  if (n <= curve.front().bytes) return startup(curve.front());
  if (n >= curve.back().bytes) return startup(curve.back());
  const auto hi = std::lower_bound(curve.begin(), curve.end(), n,
                                   [](const MeasuredAllReduce& p, Bytes size) { return p.bytes < size; });
  const auto lo = std::prev(hi);
  const double w = static_cast<double>(n - lo->bytes) / static_cast<double>(hi->bytes - lo->bytes);
  return (1 - w) * startup(*lo) + w * startup(*hi);
}

}  // namespace

// The ring moves 2(P−1)/P·n bytes over each worker's link in 2(P−1) steps, each
// paying α. Scaling the fabric's capacity by P/(2(P−1)) instead of the volume keeps
// `volume` equal to the message size, which is what traces and credits count.
namespace {

// The startup of an all-reduce of n bytes, as allreduce_flow() and
// allreduce_time() say it. REQUIRES c.workers > 1.
Seconds allreduce_startup(const Cluster& c, Bytes n) {
  if (!c.fitted) return whole_ring(c).startup();
  return c.fitted->curve.empty() ? c.fitted->a : curve_startup(*c.fitted, n);
}

void check_allreduce(const Cluster& c, Bytes n, Reach reach = Reach::kAll) {
  if (c.arch != Arch::kAllReduce || n < 0) {
    throw std::logic_error(fmt::format("all-reduce flow of {} bytes on a {} cluster", n,
                                       to_string(c.arch)));
  }
  if (reach != Reach::kAll && c.topology.empty()) {
    throw std::logic_error(fmt::format("all-reduce of reach {} on a cluster without sites", to_string(reach)));
  }
}

// Note [Collectives across sites]: the flows of the reaches other than kAll.
Flow sites_flow(const Cluster& c, Bytes n, Reach reach) {
  const std::size_t sites = c.topology.sites.size();
  Flow flow;
  if (reach == Reach::kSite) {
    // On every link of a site that has a ring (a site of one averages nothing),
    // alone as long as the slowest site's ring: the startup makes up what the
    // slowest link's volume does not.
    BytesPerSecond slowest_link = std::numeric_limits<double>::infinity();
    for (std::size_t s = 0; s < sites; ++s) {
      const Ring ring = site_ring(c, s);
      if (ring.members <= 1) continue;
      slowest_link = std::min(slowest_link, ring.capacity());
      flow.links.push_back(static_cast<int>(1 + s));
    }
    if (flow.links.empty()) return Flow{.links = {0}};  // volume 0: free, as one worker
    flow.volume = static_cast<double>(n);
    flow.startup = std::max(0.0, slowest_site(c, n, /*broadcast=*/false) - flow.volume / slowest_link);
    return flow;
  }
  const Ring leaders = leaders_ring(c);
  flow.startup = slowest_site(c, n, /*broadcast=*/true) + leaders.startup();
  flow.links = {static_cast<int>(1 + sites)};
  flow.volume = leaders.members > 1 ? static_cast<double>(n) : 0.0;  // one site: no WAN stage
  return flow;
}

}  // namespace

Flow allreduce_flow(const Cluster& c, Bytes n, Reach reach) {
  check_allreduce(c, n, reach);
  if (reach != Reach::kAll) return c.workers == 1 ? Flow{.links = {0}} : sites_flow(c, n, reach);
  Flow flow;
  flow.links = {0};
  if (c.workers == 1) return flow;
  flow.startup = allreduce_startup(c, n);
  if (c.fitted) flow.weight = static_cast<double>(std::max<Bytes>(n, 1));
  flow.volume = static_cast<double>(n);
  return flow;
}

// The flow's time alone, without building the Flow: the planner's searches ask
// for O(layers^2) of these (Note [Exact merged-gradient WFBP], schedulers/sync.cc).
Seconds allreduce_time(const Cluster& c, Bytes n, Reach reach) {
  check_allreduce(c, n, reach);
  if (c.workers == 1) return 0;
  if (reach == Reach::kSite) return slowest_site(c, n, /*broadcast=*/false);
  if (reach == Reach::kBySites) return slowest_site(c, n, /*broadcast=*/true) + leaders_ring(c).time(n);
  const Seconds startup = allreduce_startup(c, n);
  if (n == 0) return startup;
  return startup + static_cast<double>(n) / fabric_capacity(c);
}

AllReduceTime::AllReduceTime(const Cluster& c, Reach reach)
    : cluster_(c),
      reach_(reach),
      allreduce_(c.arch == Arch::kAllReduce),
      startup_varies_(c.fitted && !c.fitted->curve.empty()),
      startup_(c.workers > 1 && !startup_varies_ ? allreduce_startup(c, 0) : 0),
      capacity_(c.workers > 1 ? fabric_capacity(c) : 0) {}

Seconds AllReduceTime::operator()(Bytes n) const {
  if (!allreduce_ || n < 0) check_allreduce(cluster_, n);
  if (reach_ != Reach::kAll) return allreduce_time(cluster_, n, reach_);
  if (cluster_.workers == 1) return 0;
  const Seconds startup = startup_varies_ ? curve_startup(*cluster_.fitted, n) : startup_;
  if (n == 0) return startup;
  return startup + static_cast<double>(n) / capacity_;
}

Flow push_flow(const Cluster& c, int worker, int server, Bytes n) {
  check_endpoints(c, worker, server, n);
  return Flow{.startup = c.latency,
              .volume = static_cast<double>(n),
              .links = {worker_up(worker), server_down(c, server)}};
}

Flow pull_flow(const Cluster& c, int server, int worker, Bytes n) {
  check_endpoints(c, worker, server, n);
  return Flow{.startup = c.latency,
              .volume = static_cast<double>(n),
              .links = {server_up(c, server), worker_down(worker)}};
}

}  // namespace weft
