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

// The link one round of the bench runs on.
struct Link {
  std::string name;              // "100Mbit" as the user wrote it ("100Mbit+20ms" with a latency), or "loopback"
  BytesPerSecond bandwidth = 0;  // the emulated rate; 0 on loopback
  Seconds latency = 0;           // the emulated one-way delay between two ranks; 0 = none
  bool emulated() const { return bandwidth > 0; }
};

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
  // momentum.
  std::string outer_optimizer = "none";
  double outer_lr = 1;
  double outer_momentum = 0;
  // Parameter servers of the parameter-server strategies' runs (ps,
  // ps-interleaved); each server's link is emulated like a worker's.
  int servers = 1;
};

// Whether `strategy` (a name of schedulers/strategies.h) runs with parameter
// servers. THROWS UsageError for an unknown name.
bool uses_servers(const std::string& strategy);

// `argv` once per worker (and per server) under the emulated link: `weft netem
// --workers P [--servers S] --bandwidth Q --port PORT --grace 30s -- argv...`; the
// servers' links are the workers'. REQUIRES link.emulated(), servers >= 0.
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
// encoding` too (S-SGD strategies only). REQUIRES !strategies.empty() and one
// architecture (THROWS std::logic_error naming the two otherwise).
std::vector<std::string> plan_command(const Tools& tools, const Link& link, const Training& training,
                                      const LinkFiles& files, const std::vector<std::string>& strategies,
                                      const std::string& encoding = "none");

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
  std::string remedy;             // peers: ddp_peer.py --remedy (none, fp16, powersgd:R, postlocalsgd:H)
  int period = 1;                 // iterations between averages (PostLocalSGD's H)
  bool peer() const { return !remedy.empty(); }
};

// A weft strategy in `encoding` ("none": as it is). THROWS UsageError for an
// unknown encoding, or a low-rank one with a parameter-server strategy.
Contender weft_contender(const std::string& strategy, const std::string& encoding);
// A peer from --peers: ddp, fp16, powersgd:R, postlocalsgd:H. THROWS UsageError
// naming the value and what is accepted.
Contender peer_contender(const std::string& peer);

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
                                                   const std::string& schedule);

// `weft train` of one strategy, under the link (or with --nproc P on loopback),
// built from the same profile and network fit as the prediction and with the
// options the planner chose; `trace` empty for none. A parameter-server strategy
// runs with `--servers S` (Training::servers): P + S ranks, the servers last.
std::vector<std::string> train_command(const Tools& tools, const Link& link, const Training& training,
                                       const std::string& strategy, const nlohmann::json& options,
                                       const LinkFiles& files, const std::string& metrics,
                                       const std::string& trace);

// The PyTorch peer under the link (or its own --nproc P launcher on loopback;
// Debian's torchrun is broken on Python 3.11), with `remedy` (Peer::remedy).
// It refuses to train unless its model has `parameters` parameters; with a target
// accuracy > 0 it stops once rank 0's evaluation reaches it.
std::vector<std::string> ddp_command(const Tools& tools, const Link& link, const Training& training,
                                     const std::string& remedy, std::int64_t parameters, double target_accuracy,
                                     const std::string& metrics);

// A `--strategy probe`: `weft train --model M --strategy S --steps 0` (with
// `--servers S` for a parameter-server strategy, as it would be trained), which weft
// train's validation rejects in any case; its message says whether it objected to
// the strategy (Note [Probing strategies] in bench.h).
std::vector<std::string> probe_command(const Tools& tools, const Training& training, const std::string& strategy);

// The flags that give `weft train`/`weft simulate` the options a planned schedule
// was made with (plan JSON "options"): partition_B → --partition, credit_B →
// --credit (the planner tunes them; `weft train` would use the defaults), and
// compression → --compression (the bench adds it to a compressed run's). H is
// Training::H, given to both. Other keys are outputs of the scheduler (windows,
// sets, groups), which `weft train` recomputes from the same inputs.
std::vector<std::string> strategy_flags(const nlohmann::json& options);

}  // namespace weft::bench
