// The cluster and its cost model (docs/design.md §1.2).
//
// A cluster is P workers whose links have bandwidth B and per-message latency α,
// arranged for ring all-reduce or around S parameter servers. Costs follow the α–β
// model (Thakur, Rabenseifner & Gropp 2005); a user may instead supply a fitted
// `T(n) = a + b·n` for all-reduce, measured by `weft profile --network`.
//
// Every transfer is described as a *flow*: a startup time that uses no bandwidth,
// then a volume of bytes that crosses one or more links. Flows that cross the same
// link share it max-min fairly, by their weights (see sim/network.h). That single
// mechanism models both concurrent all-reduces (fluid processor sharing of one
// collective fabric) and a parameter server's incast.
//
// Thread-safety: plain data; the functions are pure.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cost/host.h"
#include "cost/topology.h"
#include "units/units.h"

namespace weft {

enum class Arch { kAllReduce, kParameterServer };
std::string_view to_string(Arch arch);
Arch parse_arch(std::string_view text);  // "allreduce" | "ps"; THROWS UsageError

// One all-reduce size as timed by `weft profile --network`.
struct MeasuredAllReduce {
  Bytes bytes = 0;
  Seconds seconds = 0;
};

// Collectives weft's runtime runs at once: its Gloo group has this many threads,
// and Gloo runs each collective to its end on one of them
// (runtime/comm/process_group.cc); the others wait their turn, in order.
inline constexpr int kRuntimeCollectiveThreads = 2;

// The all-reduce cost from measurements: T(n) = startup(n) + b·n. Without `curve`,
// startup(n) = a, the least-squares line. With it, startup(n) follows the measured
// times (Note [Measured all-reduce curve]).
struct FittedAllReduce {
  Seconds a = 0;
  double b = 0;  // seconds per byte: the fabric's capacity is 1/b
  // Sizes ascending; startup(n) interpolates max(0, seconds − b·bytes) between
  // them, flat outside. Empty: startup(n) = a.
  std::vector<MeasuredAllReduce> curve;
  // Messages of at most this many bytes are summed by all-gather, the others by
  // ring all-reduce (Note [Small all-reduces by all-gather] in
  // runtime/comm/process_group.h).
  Bytes gather_below = 0;
  // The all-gather's times at the sizes it sums, which startup(n) follows for
  // those messages, as `curve` (the ring's) for the others (Note [One curve per
  // algorithm]). Empty: `curve` holds the time of the algorithm used at each size.
  std::vector<MeasuredAllReduce> gather_curve;
  // Collectives the measured transport runs at once (Note [Collectives in flight]
  // in sim/simulator.cc): a fit is of weft's own Gloo group. 0 = any number.
  int concurrent = kRuntimeCollectiveThreads;
};

// The one rule both executors follow: the runtime picks the algorithm with it, the
// simulator and the engine name the message after it.
inline bool summed_by_allgather(Bytes bytes, Bytes gather_below) { return bytes <= gather_below; }

// Note [Measured all-reduce curve]
// --------------------------------
// Rule: T(n) = startup(n) + b·n, where b is the slope of the measured curve's
// last segment (the rate large messages move at, and what concurrent messages
// share) and startup(n) interpolates what each timed size took beyond b·n. Times
// are first made non-decreasing in n (pooling adjacent violators: a larger
// message is not cheaper, whatever noise says). Invariant: a message alone takes
// exactly the measured time at every timed size where that is at least b·n. Why
// not the least-squares line a + b·n: weighted by relative error, the small
// sizes (all start-up) pull b down, and the line missed the sizes a model's
// messages have by over 20% (behind 100Mbit: 105 ms predicted for 1 MiB, 135
// measured).
//
// THROWS UsageError (naming `origin`) for fewer than two sizes, sizes not positive
// and strictly ascending, or times not positive and finite.
FittedAllReduce measured_curve(std::vector<MeasuredAllReduce> points, std::string_view origin);

// Note [One curve per algorithm]
// ------------------------------
// Rule: the ring and the all-gather (Note [Small all-reduces by all-gather])
// each have their curve — the ring's from gather_below up, the all-gather's
// through the sizes it sums — and a message follows the curve of the algorithm
// that sums it; b is the ring's. Why: one curve through the faster algorithm at
// each size draws a line across the switch, and prices a message just above
// gather_below, which the ring sums, at the all-gather's time.
//
// THROWS UsageError (naming `origin`) as measured_curve does, for either curve (the
// all-gather's may have a single size, or none).
FittedAllReduce measured_curves(std::vector<MeasuredAllReduce> ring, std::vector<MeasuredAllReduce> gathered,
                                Bytes gather_below, std::string_view origin);

struct Cluster {
  int workers = 1;
  BytesPerSecond bandwidth = 0;   // each worker's link
  Seconds latency = 0;            // per message, α
  Arch arch = Arch::kAllReduce;
  int servers = 1;                       // parameter server only
  BytesPerSecond server_bandwidth = 0;   // each server's link; 0 = same as workers'
  std::optional<FittedAllReduce> fitted;  // overrides the α–β ring model
  Host host;                              // how the workers' machine shares its cores
  // Sites and their WAN (cost/topology.h; all-reduce only, without `fitted`):
  // empty, every worker's link is `bandwidth` with `latency`; else each worker's
  // is its site's, and the WAN joins the sites (Note [Collectives across sites]).
  Topology topology;
  // The workers' own optimizer steps once each backward has returned
  // (weft.DataParallel's update="ddp"), not the engine layer by layer: a backward
  // returns only when every gradient is averaged, and parameter averages start
  // after the step (Note [The workers' own step] in sim/simulator.cc). All-reduce
  // only: parameter servers step on the servers.
  bool steps_outside = false;
};

// THROWS UsageError for workers < 1, bandwidth <= 0, latency < 0, servers < 1 (ps),
// a host validate(Host) refuses, or a topology validate(Topology) refuses for the
// workers, given with a parameter server or a fitted all-reduce.
void validate(const Cluster& cluster);

// Note [Collectives across sites]
// --------------------------------
// Rule: with sites, a collective is priced on the links it crosses, each ring by
// its slowest hop. A ring of every worker in rank order (Reach::kAll) takes
// 2(P−1) steps of n/P bytes on every hop at once: each step lasts the slowest
// hop's α + n/(P·B), where a hop from site a to site b has a→b's link (the
// topology's `wan`, or a→b's own: between()), its rate shared by the hops
// crossing the same ordered pair, capped by both endpoints' links. A step's α is
// a round trip, a→b's one-way latency plus b→a's (twice the WAN's where the pairs
// are alike): Gloo's receiver tells its sender where to write before each step
// (measured: BENCHMARKS.md, "Sites"). A site's ring (kSite) is the same inside
// each site, the slowest site deciding. By sites (kBySites): each site's ring,
// then a ring of one leader per site in site order across the WAN, leader s
// sending on s→s+1's link, its slowest hop deciding (two leaders swap their sums
// instead: one step, the same bytes, sent both ways at once, so the slower of the
// two directions decides), then each leader's broadcast to its k−1 site members
// (α + (k−1)·n/B on its link), one after the other.
// Invariant: without sites, the one ring of before, unchanged. Why: where sites
// meet, one ordered pair's hop sets the ring's pace, which is all a flat ring
// loses and all hierarchical averaging saves.
// As flows (for sharing, sim/network.h): kAll crosses link 0 (the whole ring),
// kSite the link (1 + s) of every site of two or more workers, its startup set
// so that alone it takes the slowest site's ring time (sites of one: free);
// kBySites the leaders' WAN ring (1 + S) with its sites' ring and broadcast
// counted in its startup: they share no WAN (one site: no volume). Alone, every
// flow takes allreduce_time().

// The network resources a flow can cross. Link ids are dense small integers.
// - all-reduce: link 0 is the collective fabric (all workers' links acting as one);
//   with S sites, links 1..S each site's ring and S+1 the leaders' ring over the
//   WAN (Note [Collectives across sites]);
// - parameter server: per worker p, uplink 2p and downlink 2p+1; per server s,
//   uplink 2P+2s and downlink 2P+2s+1 (full duplex: each direction shaped apart).
struct LinkSet {
  std::vector<BytesPerSecond> capacity;
  std::vector<std::string> name;  // "allreduce", "worker3.up", "server0.down", ...
};
LinkSet links_of(const Cluster& cluster);

struct Flow {
  Seconds startup = 0;        // time before bytes move (latency terms)
  double volume = 0;          // bytes crossing each link in `links`, scaled so that
                              // volume / capacity is the transfer time when alone
  std::vector<int> links;     // ids into links_of(cluster)
  double weight = 1;          // its share of a contended link, relative to the others'
};

// One ring all-reduce of n bytes: startup 2(P−1)α, volume n on the fabric link
// whose capacity is B·P / (2(P−1)), so that alone it takes exactly
// 2(P−1)α + 2(P−1)/P · n/B; with `fitted`, startup a (or the curve's startup(n))
// and capacity 1/b, and weighted by its size (Note [Collectives in flight] in
// sim/simulator.cc): a fit is of weft's Gloo group, whose concurrent collectives
// share its connections step by step.
// With P = 1 it is free (startup 0, volume 0). A reach other than kAll needs sites
// (Note [Collectives across sites]); THROWS std::logic_error otherwise.
Flow allreduce_flow(const Cluster& cluster, Bytes n, Reach reach = Reach::kAll);
Seconds allreduce_time(const Cluster& cluster, Bytes n, Reach reach = Reach::kAll);  // the flow, alone

// allreduce_time(cluster, n) for one cluster, with what does not depend on n
// worked out once: the same numbers, for the planners' searches, which ask for
// O(layers^2) of them. Holds a reference to `cluster`, which must outlive it.
// REQUIRES (operator()) what allreduce_time() does; THROWS the same.
class AllReduceTime {
 public:
  explicit AllReduceTime(const Cluster& cluster, Reach reach = Reach::kAll);
  Seconds operator()(Bytes n) const;

 private:
  const Cluster& cluster_;
  Reach reach_;
  bool allreduce_;
  bool startup_varies_;  // a measured curve: the startup depends on n
  Seconds startup_;
  BytesPerSecond capacity_;
};

// Parameter-server transfers of n bytes between worker p and server s.
Flow push_flow(const Cluster& cluster, int worker, int server, Bytes n);
Flow pull_flow(const Cluster& cluster, int server, int worker, Bytes n);

}  // namespace weft
