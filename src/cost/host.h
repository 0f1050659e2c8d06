// A host description: the machine the workers run on, as a few physical
// parameters (docs/cost-model.md §7.3). The profile says what the model
// computes; the host says how this machine's cores are shared between the
// workers' layers and their messages, and how far apart the workers drift.
// `weft profile --host FILE` measures it (docs/formats.md §6.7); the simulator
// reads it through Cluster::host.
//
// The default Host{} is a machine whose cores are not counted: nothing slows
// anything, the workers keep in step.
//
// Thread-safety: plain data; the functions are pure.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "units/units.h"

namespace weft {

struct Host {
  std::string description;  // informative: what was measured, where
  // The machine's cores, shared max-min fairly among what runs on it
  // (core_shares below): the layers were timed with `processes` workers
  // computing at once on `cores` cores. 0: unknown, and cores are not counted.
  int processes = 0;
  int cores = 0;
  // How much of a core a message in flight keeps busy on each of its workers
  // (Gloo's copies and sums, TCP), in [0, 1]; and its weight in the sharing
  // against a layer's 1 where the cores run out.
  double comm_cores = 0;
  double comm_weight = 1;
  // How long a collective launched while its cores are all taken waits for one
  // (the scheduler's wake-up latency; Note [Skew] in sim/simulator.cc).
  Seconds core_wait = 0;
  // How much later than the average worker the last one reaches a collective:
  // `skew` after compute, `back_to_back_skew` right after another collective,
  // growing by `drift` per second computed beyond an iteration without a wait
  // (Note [Skew] in sim/simulator.cc).
  Seconds skew = 0;
  Seconds back_to_back_skew = 0;
  double drift = 0;
  // What encoding and decoding cost one worker, by codec (docs/compression.md):
  // fp16, bf16, int8 in seconds per float32 value, powersgd and acpsgd per
  // rows·cols·R. A codec absent costs no compute.
  std::map<std::string, double> codec_cost;

  bool operator==(const Host&) const = default;
};

// How slowly a machine's layers and messages advance while `computing` of its
// workers compute and `messages` messages are in flight on it (one per worker a
// message has there): its cores are shared weighted max-min fairly
// (progressive filling, as SimGrid shares a CPU among actions of different
// priorities) among the computing workers, each asking one core at weight 1,
// and the messages, each asking comm_cores at weight comm_weight. A layer
// advances at its share over the share it was profiled with, min(1, cores /
// processes); a message at its share over comm_cores. Both stretches are 1
// where the host counts no cores.
//
// Note [Two max-min solvers]
// --------------------------
// Cores are shared here, links in sim/network.h, both max-min fairly, by two
// solvers rather than SimGrid's one system over every resource. A machine's
// cores see a handful of demands (its computing workers, its messages) and are
// solved in closed form at each change; the links carry up to tens of thousands
// of flows, solved incrementally with one virtual clock per link (Note [One link,
// one clock]). At any instant the coupling runs one way — a message's core
// share stretches its start-up and transfer on the links (Network::Stretch),
// while a link's share changes what the cores give only later, through which
// messages are still in flight — so one joint system would buy no accuracy and
// lose the per-link clock that keeps 20,000-layer plans fast.
struct CoreShares {
  double compute = 1;  // a layer takes this times its profiled time
  double message = 1;  // a message advances this many times slower
  bool operator==(const CoreShares&) const = default;
};
CoreShares core_shares(const Host& host, int computing, int messages);
// Whether those ask for more cores than the machine has (false where the host
// counts no cores).
bool cores_taken(const Host& host, int computing, int messages);
// The comm_weight under which all `processes` workers, computing beside a
// message each with the cores all taken, have their layers 1 + compute_slowdown
// times slower than profiled (`weft profile --host` measures that slowdown); 1
// where the host counts no cores or the messages take none.
double comm_weight_of(const Host& host, double compute_slowdown);

// THROWS UsageError naming `origin` and the field for a value that is negative,
// not finite or beyond docs/limits.md's bounds (comm_cores beyond 1).
void validate(const Host& host, std::string_view origin = "host");

// The JSON of docs/formats.md §6.7: {"format": "weft-host/1", fields as named
// there}. A missing field has its default. A file of the older fields
// (compute_slowdown, comm_slowdown, ...; Note [Older host fields] in host.cc)
// has them mapped onto comm_cores, and *warning, where given, says so in one
// line. THROWS UsageError naming `origin` and the field for a mistyped or
// out-of-range one, or another format.
Host parse_host(std::string_view json_text, std::string_view origin = "host", std::string* warning = nullptr);
Host load_host(const std::filesystem::path& file, std::string* warning = nullptr);
std::string to_json(const Host& host);
// Atomic (a temporary beside `file`, then renamed). THROWS UsageError naming
// the path where it cannot be written.
void save_host(const Host& host, const std::filesystem::path& file);

// Profiles written before the host had a file of its own carried its fields at
// their top level, under the same (older) names. The host they describe, or
// nullopt if they carry none. THROWS as parse_host for a mistyped field.
std::optional<Host> host_in_profile(std::string_view profile_json, std::string_view origin);

// The median of each numeric field over `hosts`; the rest is the first's. THROWS std::invalid_argument for no hosts.
Host median_host(const std::vector<Host>& hosts);

}  // namespace weft
