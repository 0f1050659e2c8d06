// The command lines `weft bench` runs: `weft profile`, `weft plan`, `weft simulate`,
// `weft train` and the PyTorch DDP peer, each either under an emulated link (once per
// worker, through `weft netem`) or on plain loopback (the program's own launcher:
// `weft train --nproc`, `weft profile --network --nproc`, `ddp_peer.py --nproc`).
//
// Building them is kept apart from running them so that what the bench runs can be
// read (the logs quote it) and tested without running anything.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "units/cores.h"
#include "units/units.h"

namespace weft::bench {

// The programs and the job's shape.
// Consecutive jobs use different ports, from Tools::port on, so that a socket of
// the previous job still closing on loopback cannot make the next one's
// rendezvous fail.
inline constexpr int kPortsCycled = 200;

struct Tools {
  std::string weft;      // the weft executable
  std::string python;    // a Python with Debian's python3-torch
  std::string ddp_peer;  // ddp_peer.py (tools/, copied beside the binary)
  int workers = 1;       // P
  int port = 29500;      // MASTER_PORT
  int mtu = 1500;        // of the emulated links, bytes (weft netem --mtu)
  CorePlacement cores = CorePlacement::kAuto;  // where every job's processes run (--cores)
};

// Emulated sites (cost/topology.h, Note [Emulated sites] in netem/delay_line.h):
// the flags every command of a sited link is given, as the user wrote them.
// Either `sites` ("2x2": A sites of B workers, ranks in order, each site's links
// the Link's bandwidth and latency) with the WAN's rate and one-way delay, or a
// `topology` file that gives every link.
struct Sites {
  std::string sites;             // --sites AxB; empty with a topology file
  std::string wan_bandwidth;     // --wan-bandwidth, e.g. "20Mbit"
  std::string wan_latency;       // --wan-latency, e.g. "20ms"; empty: none
  std::string topology;          // --topology FILE (absolute); empty with --sites
  bool empty() const { return sites.empty() && topology.empty(); }
};

// The link one round of the bench runs on.
struct Link {
  // "100Mbit" as the user wrote it ("100Mbit+20ms" with a latency), or "loopback";
  // with sites "2x2 sites at 1Gbit+0.05ms, WAN 20Mbit+20ms" or "topology FILE".
  std::string name;
  // The emulated rate; 0 on loopback. With sites, each site's (a topology file:
  // its slowest site's, what the planner assumes of a flat ring).
  BytesPerSecond bandwidth = 0;
  Seconds latency = 0;  // the emulated one-way delay between two ranks (of a site); 0 = none
  Sites sites;          // empty: one link per rank, all alike
  bool emulated() const { return bandwidth > 0; }
};

// How a weft run averages across sites (`weft train --hierarchical --site-every N`;
// docs/strategies.md, "Sites"): flat (one ring over every worker, as without
// sites), by sites, and for local SGD with each site averaging inside itself
// every `site_every` iterations between its averages.
struct SiteMode {
  bool hierarchical = false;
  int site_every = 0;  // 0: never
  bool flat() const { return !hierarchical && site_every == 0; }
  bool operator==(const SiteMode&) const = default;
};
// --site-averaging's words: flat, hierarchical, site-every:N, hierarchical+site-every:N.
inline constexpr std::string_view kSiteModesAccepted =
    "flat, hierarchical, site-every:N, hierarchical+site-every:N (N an integer >= 1)";
// THROWS UsageError naming --site-averaging, the value and kSiteModesAccepted.
SiteMode parse_site_mode(const std::string& text);
// The word parse_site_mode reads: "flat", "hierarchical", "site-every:2", ...
std::string to_string(const SiteMode& mode);
// Whether `strategy` runs in `mode`: by sites, an all-reduce strategy; with
// site averages, a local SGD one whose H (`H`) they divide. Empty: it does;
// else why not, for the line that skips it.
std::string site_mode_refusal(const std::string& strategy, const SiteMode& mode, int H);

// What every training run of the bench shares.
struct Training {
  std::string model = "cnn";
  int batch = 32;
  double lr = 0.05;
  std::string optimizer = "sgd";
  std::uint64_t seed = 0;
  int H = 5;                   // local SGD period
  std::int64_t steps = 60;     // iterations (the cap, in accuracy mode)
  int eval_every = 0;          // 0: no evaluation
  // Local SGD's outer optimizer (docs/local-sgd.md), for the local SGD strategies'
  // runs only: "none" or `weft train --outer-optimizer`'s name, with its lr and
  // momentum where given (else weft train's measured defaults).
  std::string outer_optimizer = "none";
  std::optional<double> outer_lr;
  std::optional<double> outer_momentum;
  // Parameter servers of the parameter-server strategies' runs (ps,
  // ps-interleaved); each server's link is emulated like a worker's.
  int servers = 1;
};

// Whether `strategy` (a name of schedulers/strategies.h) runs with parameter
// servers. THROWS UsageError for an unknown name.
bool uses_servers(const std::string& strategy);

// `argv` once per worker (and per server) under the emulated link: `weft netem
// --workers P [--servers S] --bandwidth Q --port PORT --grace 30s -- argv...`; the
// servers' links are the workers'. With sites, every rank in its site: `--sites
// AxB --wan-bandwidth W --wan-latency D` beside --bandwidth and --latency (each
// site's links), or `--topology FILE` alone. REQUIRES link.emulated(), servers >= 0,
// servers == 0 with sites (they would be in no site).
std::vector<std::string> under_netem(const Tools& tools, const Link& link, const std::vector<std::string>& argv,
                                     int servers = 0);

// `weft profile --model M --batch B --threads 1 --nproc P --out FILE`: P processes
// profiling together (Note [Profiling under contention] in bench.h).
std::vector<std::string> model_profile_command(const Tools& tools, const Training& training,
                                               const std::string& out);

// The same, quicker: 100 timed iterations (under 3 s of cnn's), to re-time the
// layers just before a run (Note [Re-timed before each run] in bench.h).
std::vector<std::string> retime_command(const Tools& tools, const Training& training, const std::string& out);

// The same as model_profile_command with --interference --host HOST, under the
// link (or with --nproc P on loopback): the host as measured over the link (Note
// [Interference per link] in bench.h).
std::vector<std::string> link_profile_command(const Tools& tools, const Link& link, const Training& training,
                                              const std::string& out, const std::string& host);

// `weft profile --network --max-bytes N --out FILE`, under the link (or with
// --nproc P on loopback). `max_bytes` bounds the largest all-reduce measured: the
// model's largest message, not the profiler's default of 64 MiB, which would take
// minutes on a 20 Mbit/s link.
std::vector<std::string> network_profile_command(const Tools& tools, const Link& link, Bytes max_bytes,
                                                 const std::string& out);

// The files a link's predictions and runs read: the model's profile, the link's
// all-reduce fit (`weft profile --network`) and the host as measured over the
// link (`weft profile --host`; empty: none, as in benches from before it).
struct LinkFiles {
  std::string profile;
  std::string network;
  std::string host;
};

// `weft plan --profile F --network N --host H --workers P --bandwidth Q --H h --json
// --strategy s...`. The strategies share one architecture (the planner plans one
// at a time): all-reduce ones get wfbp and ddp added, for the references;
// parameter-server ones get `--arch ps --servers S` instead, and for bandwidth what
// TCP delivers over the emulated link (netem::payload_rate), as their costs use
// the bandwidth alone. With an `encoding` other than "none", `--compression
// encoding` too (S-SGD strategies only). In a site mode other than flat, the
// strategies alone (no references: --site-every is local SGD's only), with
// `--hierarchical`/`--site-every N` and the link's sites in place of the fit,
// which measured one flat ring (Note [Sites in the bench] in bench.h).
// REQUIRES !strategies.empty() and one architecture (THROWS std::logic_error
// naming the two otherwise), a link with sites for a mode other than flat.
std::vector<std::string> plan_command(const Tools& tools, const Link& link, const Training& training,
                                      const LinkFiles& files, const std::vector<std::string>& strategies,
                                      const std::string& encoding = "none", const SiteMode& mode = {});

// What a bench run trains: a weft strategy in a wire encoding, or a PyTorch peer.
// Its name is its row: "wfbp", "wfbp+int8", "pytorch-ddp", "pytorch-ddp+fp16",
// "pytorch-ddp+powersgd:2", "pytorch-postlocalsgd:5" (tools/ddp_peer.py writes
// the peers' names into their metrics).
struct Contender {
  std::string name;
  // weft's strategy; for a peer, the one that predicts it: ddp (the same buckets,
  // in the hook's encoding) or flsgd (PostLocalSGD's periodic average).
  std::string strategy;
  std::string encoding = "none";  // --compression; a peer's hook's encoding
  // peers: ddp_peer.py --remedy (none, fp16, powersgd:R, postlocalsgd:H, hierarchical:H or hierarchical:h:H)
  std::string remedy;
  int period = 1;                 // iterations between averages across all workers (PostLocalSGD's H)
  SiteMode sites;                 // weft's: how it averages across sites ("@mode" in its name)
  bool peer() const { return !remedy.empty(); }
  // Averages by sites: its runs, plans and probes are told the sites.
  bool sited() const { return !sites.flat() || remedy.starts_with("hierarchical"); }
};

// A weft strategy in `encoding` ("none": as it is), averaging across sites as
// `mode` says: "dcredit+int8", "flsgd@hierarchical+site-every:1". THROWS
// UsageError for an unknown encoding, or a low-rank one with a parameter-server
// strategy.
Contender weft_contender(const std::string& strategy, const std::string& encoding, const SiteMode& mode = {});
// The accepted --peers, for messages.
inline constexpr std::string_view kPeersAccepted =
    "ddp, fp16, powersgd:R, postlocalsgd:H, hierarchical:H, hierarchical:h:H (R, h, H integers >= 1, h dividing "
    "H and below it)";
// A peer from --peers (kPeersAccepted). hierarchical:h:H is torch's
// HierarchicalModelAverager averaging each site every h iterations and every
// worker every H (hierarchical:H: h = 1), named "pytorch-hierarchical:H" or
// "pytorch-hierarchical:h:H"; it needs sites. THROWS UsageError naming the value
// and what is accepted.
Contender peer_contender(const std::string& peer);

// Options (as the plan's JSON "options") that give a run's site mode:
// "hierarchical" and "site_every", which strategy_flags turns into flags, and
// which make the commands below give the link's sites in place of the fit.
void set_site_mode(nlohmann::json& options, const SiteMode& mode);
SiteMode site_mode_of(const nlohmann::json& options);

// `weft simulate` of one strategy with the options the planner chose, printing
// its summary as JSON and, unless `trace` is empty, writing the predicted
// timeline of a few iterations to it (with `--arch ps --servers S` for a
// parameter-server strategy).
std::vector<std::string> simulate_command(const Tools& tools, const Link& link, const Training& training,
                                          const LinkFiles& files, const std::string& strategy,
                                          const nlohmann::json& options,
                                          const std::string& trace);

// `weft simulate --schedule` of a schedule `strategy` made (written by the
// above with --schedule-out) on the layer times of `files.profile`: the same
// messages, windows and groups, whatever those layer times would make the
// strategy plan (Note [Predicted on the run's own compute] in bench.h).
std::vector<std::string> simulate_schedule_command(const Tools& tools, const Link& link, const Training& training,
                                                   const LinkFiles& files, const std::string& strategy,
                                                   const std::string& schedule, bool sited = false);

// `weft train` of one strategy, under the link (or with --nproc P on loopback),
// built from the same profile and network fit as the prediction and with the
// options the planner chose; `trace` empty for none. A parameter-server strategy
// runs with `--servers S` (Training::servers): P + S ranks, the servers last.
std::vector<std::string> train_command(const Tools& tools, const Link& link, const Training& training,
                                       const std::string& strategy, const nlohmann::json& options,
                                       const LinkFiles& files, const std::string& metrics,
                                       const std::string& trace);

// The PyTorch peer under the link (or its own --nproc P launcher on loopback;
// Debian's torchrun is broken on Python 3.11), with `remedy` (Peer::remedy);
// with sites, netem gives each rank WEFT_SITE and WEFT_SITES, from which the
// hierarchical remedy builds its subgroups.
// It refuses to train unless its model has `parameters` parameters; with a target
// accuracy > 0 it stops once rank 0's evaluation reaches it.
std::vector<std::string> ddp_command(const Tools& tools, const Link& link, const Training& training,
                                     const std::string& remedy, std::int64_t parameters, double target_accuracy,
                                     const std::string& metrics);

// A `--strategy probe`: `weft train --model M --strategy S --steps 0` (with
// `--servers S` for a parameter-server strategy, as it would be trained), which weft
// train's validation rejects in any case; its message says whether it objected to
// the strategy (Note [Probing strategies] in bench.h). In a site mode other than
// flat, with the mode's flags and the link's sites as its runs get them.
std::vector<std::string> probe_command(const Tools& tools, const Training& training, const std::string& strategy,
                                       const Link& link = {}, const SiteMode& mode = {});
// The flags of `link`'s sites: `--sites AxB --wan-bandwidth W [--wan-latency D]`
// or `--topology FILE`; none without sites.
std::vector<std::string> site_flags(const Link& link);

// The flags that give `weft train`/`weft simulate` the options a planned schedule
// was made with (plan JSON "options"): partition_B → --partition, credit_B →
// --credit (the planner tunes them; `weft train` would use the defaults), and
// compression → --compression (the bench adds it to a compressed run's),
// hierarchical → --hierarchical and site_every → --site-every (set_site_mode). H is
// Training::H, given to both. Other keys are outputs of the scheduler (windows,
// sets, groups), which `weft train` recomputes from the same inputs.
std::vector<std::string> strategy_flags(const nlohmann::json& options);

}  // namespace weft::bench
