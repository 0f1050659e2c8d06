// Emulated slow links on one machine (docs/runtime.md §3 "Network emulation").
//
// EmulatedNetwork gives every worker and every server of a job its own network
// namespace, joined to a hub namespace's bridge by a veth pair, with both directions
// of that link shaped to the requested rate:
//
//      weft<pid>w0 [eth0 10.77.0.1]──veth──[w0]┐
//      weft<pid>w1 [eth0 10.77.0.2]──veth──[w1]├─ br0 in weft<pid>h
//      weft<pid>s0 [eth0 10.77.0.3]──veth──[s0]┘
//
// With a latency D > 0 the hub is a delaying switch instead of br0: a thread of
// this process that holds every frame D seconds between the two links (Note [A
// delaying switch], delay_line.h), so a message between two endpoints takes D
// more and a small message's round trip 2·D.
//
// Sites (Note [Emulated sites], delay_line.h): with NetemOptions::sites the ranks
// are grouped into sites; inside a site each endpoint's link has its site's rate
// and the site's latency lies between two of its endpoints, while a frame between
// two sites crosses that ordered pair's WAN link in the switch (its rate shared by
// every flow between the two sites, its one-way latency, a drop-tail queue). The
// switch then runs even when no latency is asked, as it carries the WAN.
//
// Upload is shaped on the egress of the endpoint's eth0, download on the egress of
// the hub's end, each by a tbf qdisc (Note [Token bucket parameters], shaping.h),
// whose bucket every packet fits: the interfaces' GSO size is capped to it.
// A transfer between two endpoints crosses the sender's upload and the receiver's
// download, so P workers sending to one server share that server's rate: the incast
// of docs/design.md §1.2. Addresses are 10.77.0.0/16, in namespaces nobody else uses, so
// parallel runs may reuse them. Names follow Note [Namespace names] (netns.h).
//
// Note [Congestion control of the emulated hosts]
// Rule: every endpoint's TCP uses reno, set in its namespace. Why: a loss-based
// algorithm fills the link, which is what an emulated link is for; BBR (these
// machines' default, which a namespace inherits) drains its queue for 200 ms
// every 10 s and left links whose only delay is their own queue idle at random
// (one 1 MiB all-reduce at 10 Mbit took +2% to +58% of the link's time, under
// reno +2 to +2.5%). Cubic is a module our kernel refuses inside a namespace.
// With a latency, the same reason sizes TCP's buffers: each endpoint's largest
// (tcp_rmem, tcp_wmem) holds 4 round trips at its link's rate, or Linux's
// default if larger. Linux's 6 MiB let a connection keep ~3 MiB in flight: 460
// Mbit/s on a 1 Gbit link with a 50 ms round trip, 120 Mbit/s at 200 ms.
//
// Process contract (as torchrun's): each rank's process gets, on top of the caller's
// environment,
//   MASTER_ADDR   rank 0's address (10.77.0.1)      MASTER_PORT  NetemOptions::master_port
//   RANK          workers 0..P-1, servers P..P+S-1  WORLD_SIZE   P+S
//   LOCAL_RANK    = RANK: every rank runs on this one machine, so a rank that picks
//                 a device by LOCAL_RANK gets its own; LOCAL_WORLD_SIZE = WORLD_SIZE
//   WEFT_ROLE     "worker" or "server"              WEFT_WORKERS P, WEFT_SERVERS S
//   WEFT_SERVER_RANK  j, for server j only (its RANK is P+j)
//   WEFT_SITE, WEFT_SITES  with sites only: its site's index and the number of sites
// With no servers this is exactly what torchrun sets for P processes. Each rank
// runs on a share of the machine's cores, as a host would (Note [Hosts on cores],
// units/cores.h), as NetemOptions::cores says.
//
// Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN). Everything made is removed by the
// destructor, on every failure path of the constructor, and, for runs that were
// SIGKILLed, by the next construction's sweep of stale namespaces.
//
// Thread-safety: an EmulatedNetwork is immutable after construction. At most one
// may exist per process at a time (its names are made from the pid); a second one
// fails to construct, naming the namespace that exists.
#pragma once

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "cost/topology.h"
#include "netem/delay_line.h"
#include "netem/supervisor.h"
#include "units/cores.h"
#include "units/limits.h"
#include "units/units.h"

namespace weft::netem {

// The most processes (workers + servers) emulated on one machine: each needs a
// namespace, a veth pair, two qdiscs and its own share of the cores. The same
// bound as every other command that starts processes here (docs/limits.md).
inline constexpr int kMaxRanks = limits::kMaxProcesses;

// Thrown by EmulatedNetwork's constructor when a termination signal (supervisor.h)
// arrives while it builds: it stops between two endpoints, removes what it made,
// and says so.
struct BuildInterrupted : std::runtime_error {
  BuildInterrupted(int signal, std::size_t made)
      : std::runtime_error("interrupted while building the emulated network"), signal(signal), made(made) {}
  int signal;        // the signal received
  std::size_t made;  // namespaces made before it stopped (all removed again)
};

// Sites and their WAN: cost/topology.h.
using weft::Site;
using weft::SiteFlags;
using weft::Topology;
using weft::Wan;
using weft::WanLink;

struct NetemOptions {
  int workers = 0;                     // P >= 1
  int servers = 0;                     // S >= 0
  BytesPerSecond bandwidth = 0;        // each worker's link, each direction; > 0 (without sites)
  Seconds latency = 0;                 // one-way, between two endpoints; >= 0 (without sites)
  // Empty: every rank in one site of `bandwidth` and `latency`, no WAN. Else every
  // rank in exactly one site, and `bandwidth`/`latency` are not used.
  std::vector<Site> sites;
  Wan wan;                             // with 2+ sites: every ordered pair's link but...
  std::vector<WanLink> links;          // ...these pairs' own (Topology::links)
  BytesPerSecond server_bandwidth = 0; // each server's link; 0: same as bandwidth
  int master_port = 29500;             // MASTER_PORT given to every rank
  int mtu = 1500;                      // of every interface, bytes (68..65535)
  // run_emulated: where the ranks run, pinned each to its own share of the cores
  // or on any (Note [Hosts on cores], units/cores.h).
  CorePlacement cores = CorePlacement::kAuto;
};

enum class Role { kWorker, kServer };

// One worker's or server's end of the network.
struct Endpoint {
  Role role = Role::kWorker;
  int index = 0;          // worker rank, or server number j
  int rank = 0;           // RANK: index for workers, P + index for servers
  int site = 0;           // its index in NetemOptions::sites (0 without sites)
  std::string netns;      // its namespace, "weft<pid>w<index>" / "weft<pid>s<index>"
  std::string address;    // its IPv4 address
  BytesPerSecond rate = 0;
};

// REQUIRES nothing. THROWS UsageError naming the field (as its `weft netem` flag),
// the value and what is accepted, for: workers < 1, servers < 0, a rate not > 0 or
// not finite, latency < 0, too many endpoints for the address range, a port or MTU
// out of range; with sites: a rank in no site or in two, a rank out of range, a
// site without ranks, a WAN rate not > 0 with 2+ sites, a link between sites
// that joins a site to itself, repeats a pair or has a rate not > 0 (naming
// --topology).
void validate(const NetemOptions& options);

// Sets options.sites, options.wan and options.links from `flags`: from --sites with each site at
// options.bandwidth and options.latency (set them first) and the --wan-* flags, or
// from the --topology file. Nothing given: leaves the options uniform.
// THROWS UsageError naming the flag for: --sites with --topology, --wan-* with
// --topology (the file gives the WAN) or without --sites, --sites of more than one
// site without --wan-bandwidth, and what sites_shorthand and read_topology throw.
void apply_site_flags(const SiteFlags& flags, NetemOptions& options);

// THROWS UsageError naming `origin` (the flag or variable the MTU came from)
// unless 68 <= mtu <= 65535 (an IPv4 MTU).
void check_mtu(int mtu, std::string_view origin = "--mtu");

class EmulatedNetwork {
 public:
  // Sweeps stale namespaces (sweep_stale_namespaces, netns.h), then builds the
  // network described at the top.
  // THROWS UsageError: invalid options (see validate); no root privileges (saying
  // how to get them).
  // THROWS std::runtime_error: an `ip` or `tc` command failed, quoting it and its
  // message (for example a rate under 1 bit/s, which tc cannot represent), or the
  // delaying switch could not open its ports (delay_line.h).
  // THROWS BuildInterrupted: a termination signal arrived while building.
  // On any throw, everything this constructor made has been removed again.
  explicit EmulatedNetwork(const NetemOptions& options);
  // Stops the delaying switch, if any, and removes every namespace it made (the
  // links and qdiscs go with them). Processes
  // still running inside keep their namespace alive, unnamed, until they exit;
  // callers end them first (run_emulated does).
  ~EmulatedNetwork();
  EmulatedNetwork(const EmulatedNetwork&) = delete;
  EmulatedNetwork& operator=(const EmulatedNetwork&) = delete;

  // Workers in rank order, then servers.
  const std::vector<Endpoint>& endpoints() const { return endpoints_; }
  // The hub namespace, which holds the bridge (or the delaying switch's ports)
  // and the hub ends of the links.
  const std::string& hub() const { return hub_; }
  // The delaying switch when a latency > 0 or with 2+ sites, else nullptr (Note [A
  // delaying switch]).
  const DelayLine* delay_line() const { return delay_line_.get(); }
  // Every namespace it made, hub included.
  std::vector<std::string> namespaces() const;
  // The stale namespaces the constructor's sweep removed.
  const std::vector<std::string>& swept() const { return swept_; }

  // The variables of the process contract (top of file) for `endpoint`, as
  // "NAME=value". REQUIRES: endpoint is one of endpoints().
  std::vector<std::string> environment_for(const Endpoint& endpoint) const;

 private:
  void build();
  void add_endpoint(const Endpoint& endpoint, Bytes gso_max);
  void remove_all() noexcept;

  NetemOptions options_;
  std::string hub_;
  std::vector<Endpoint> endpoints_;
  std::vector<std::string> made_;  // namespaces created so far, in order
  std::vector<std::string> swept_;
  std::unique_ptr<DelayLine> delay_line_;  // latency > 0 only
};

// Runs one command per rank under emulated links and returns how the job ended: it
// builds an EmulatedNetwork for `network`, starts argv_per_rank[r] in endpoint r's
// namespace (workers 0..P-1, then servers) with the process contract's variables,
// supervises the ranks (supervisor.h), ends them all and removes the network. SIGINT,
// SIGTERM and SIGHUP received meanwhile, even while the network is being built, end
// the job cleanly (exit_status 128 + signal). When the job failed and a rank's link
// is down, the message starts by naming that rank as unreachable.
// This is what `weft netem` does; `weft train --bandwidth` calls it too, with
// `environment` ("NAME=value", given to every rank under the contract's variables,
// which win) marking its ranks as launched workers.
// REQUIRES: argv_per_rank.size() == workers + servers, each argv non-empty
// (THROWS std::logic_error otherwise); no TerminationSignals alive in the process
// (it installs its own).
// THROWS UsageError: what EmulatedNetwork throws, or a command that is not an
// executable in PATH (checked before anything is built); std::runtime_error as
// EmulatedNetwork. A rank's failure is reported in the RunReport, not thrown.
RunReport run_emulated(const NetemOptions& network,
                       const std::vector<std::vector<std::string>>& argv_per_rank,
                       const SuperviseOptions& supervision = {},
                       const std::vector<std::string>& environment = {});

}  // namespace weft::netem
