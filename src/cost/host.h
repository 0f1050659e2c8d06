// A host description: how the machine the workers run on shares its cores
// between their layers and their communication (docs/cost-model.md §7.3). The
// profile says what the model computes; the host says what this machine does
// to those times and to the collectives when both run at once. `weft profile
// --host FILE` measures it (docs/formats.md §6.7); the simulator reads it through
// Cluster::host.
//
// The default Host{} is a machine where communication has cores of its own:
// nothing slows anything, the workers keep in step, collectives run at once.
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
  // The layer times were measured with `processes` workers computing at once on
  // `cores` cores; a worker waiting for the network leaves its share of them to
  // the others (Note [Shared cores], sim/simulator.cc). 0: unknown.
  int processes = 0;
  int cores = 0;
  // While its worker has a message on the network a layer takes (1 +
  // compute_slowdown) times its time; while its worker computes, a collective
  // takes (1 + comm_slowdown) times as long, a point-to-point transfer (1 +
  // transfer_slowdown) (absent: comm_slowdown). Note [Interference].
  double compute_slowdown = 0;
  double comm_slowdown = 0;
  std::optional<double> transfer_slowdown;
  // How much later than the average worker the last one reaches a collective:
  // `skew` after compute, `back_to_back_skew` right after another collective,
  // growing by `drift` per second computed beyond half an iteration without a
  // wait (Note [Skew]).
  Seconds skew = 0;
  Seconds back_to_back_skew = 0;
  double drift = 0;
  // A collective launched while its workers compute ends this much later than
  // one launched while they wait: it waits for a core (Note [Start delay]).
  Seconds start_delay = 0;
  // Of two small collectives issued together, how much longer the pair takes
  // than one, over one's time: 0 where they run at once, 1 where in turn
  // (Note [Collectives in flight]); `waiting_pair_slowdown` while no worker
  // computes (absent: pair_slowdown).
  double pair_slowdown = 0;
  std::optional<double> waiting_pair_slowdown;
  // What encoding and decoding cost one worker, by codec (docs/compression.md):
  // fp16, bf16, int8 in seconds per float32 value, powersgd per rows·cols·R. A
  // codec absent costs no compute.
  std::map<std::string, double> codec_cost;

  double point_to_point_slowdown() const { return transfer_slowdown.value_or(comm_slowdown); }
  // While no worker computes, waiting_pair_slowdown; while some compute, the
  // larger of the two (layers only take cores from collectives).
  double pair_slowdown_while(bool computing) const;
  bool operator==(const Host&) const = default;
};

// Whether collectives issued together run one after the other: a pair slowdown
// nearer to in turn (1) than to at once (0).
inline bool collectives_run_in_turn(double pair_slowdown) { return pair_slowdown >= 0.5; }

// THROWS UsageError naming `origin` and the field for a value that is negative,
// not finite or beyond docs/limits.md's bounds.
void validate(const Host& host, std::string_view origin = "host");

// The JSON of docs/formats.md §6.7: {"format": "weft-host/1", fields as named
// there}. A missing field has its default. THROWS UsageError naming `origin` and
// the field for a mistyped or out-of-range one, or another format.
Host parse_host(std::string_view json_text, std::string_view origin = "host");
Host load_host(const std::filesystem::path& file);
std::string to_json(const Host& host);
// Atomic (a temporary beside `file`, then renamed). THROWS UsageError naming
// the path where it cannot be written.
void save_host(const Host& host, const std::filesystem::path& file);

// Profiles written before the host had a file of its own carried its fields at
// their top level, under the same names. The host they describe, or nullopt if
// they carry none. THROWS as parse_host for a mistyped field.
std::optional<Host> host_in_profile(std::string_view profile_json, std::string_view origin);

// The median of each field over `hosts` (optional fields over those that have
// them); the rest is the first's. THROWS std::invalid_argument for no hosts.
Host median_host(const std::vector<Host>& hosts);

}  // namespace weft
