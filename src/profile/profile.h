// A model profile: the ordered layers of a model with their sizes and compute times
// (docs/design.md §1.1). It is what every scheduler and the simulator read.
//
// Layers are indexed 0..L-1 in forward order (index 0 touches the input, L-1 the
// loss); backward visits L-1..0. The file format (docs/formats.md §6) is stable.
//
// Thread-safety: plain data; the functions are pure.
#pragma once

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "units/units.h"

namespace weft {

struct Layer {
  std::string name;
  std::int64_t params = 0;
  int bytes_per_param = 4;
  Seconds fp = 0;  // forward compute time of this layer
  Seconds bp = 0;  // backward compute time of this layer
  // Optional: the shapes of its tensors, in order (their elements add up to
  // params), from which PowerSGD's factors are sized (docs/compression.md). Empty:
  // unknown, and PowerSGD is costed as fp16.
  std::vector<std::vector<std::int64_t>> shapes;

  Bytes bytes() const { return params * bytes_per_param; }
};

struct Profile {
  std::string model;
  int batch = 0;           // informative
  std::string device;      // informative
  std::vector<Layer> layers;
  // Where compute and communication share the cores (TCP, Gloo's copies and sums),
  // each slows the other (Note [Interference], sim/simulator.cc): while its
  // worker has a message on the network a layer takes (1 + compute_slowdown)
  // times its fp or bp, and while its worker computes a message takes
  // (1 + comm_slowdown) times as long. Both 0 (the default) where communication
  // has cores of its own. Measured by `weft profile --interference`.
  double compute_slowdown = 0;
  double comm_slowdown = 0;
  // The same as comm_slowdown for a point-to-point transfer (a parameter
  // server's push or answer) while its worker computes: the kernel moves its
  // bytes, where every step of a ring all-reduce needs a core on every worker.
  // Absent (profiles from before it was measured): comm_slowdown. Measured by
  // `weft profile --interference`.
  std::optional<double> transfer_slowdown;
  // Where more workers than cores compute, the kernel's time slices put them
  // out of step: the last worker reaches a collective this much later than the
  // average one, and every collective starts that much after its ops are ready,
  // as does the push that completes a parameter server's exchange (Note [Skew],
  // sim/simulator.cc). 0 (the default) where workers keep in step.
  // Measured by `weft profile --interference`.
  Seconds skew = 0;
  // The same for a collective issued as soon as the one before it ends: the
  // workers leave a collective out of step too, if less so, and a collective
  // launched at its predecessor's end starts this much after that end. 0 (the
  // default) where workers keep in step. Measured as `skew` is.
  Seconds back_to_back_skew = 0;
  // Workers that compute for long without waiting on one another drift further
  // apart: for every second of compute beyond half an iteration since a worker
  // last waited on the others' data (S-SGD waits every iteration, full local SGD
  // every H), the last worker falls `drift` seconds further behind the average,
  // and `skew` grows by as much. 0 (the default): skew does not grow. Measured
  // as `skew` is.
  double drift = 0;
  // A collective launched while its workers compute waits for a core on every
  // one of them: it ends this much later, after the last worker issued it, than
  // one launched while they wait (Note [Start delay], sim/simulator.cc). 0 (the
  // default) where communication has cores of its own. Measured as `skew` is.
  Seconds start_delay = 0;
  // Of two small collectives issued together while the workers compute, how much
  // longer the pair takes than one alone, over one's own time (without the wait
  // for the last worker): 0 (the default) where they run at once, their
  // start-ups overlapping; about 1 where they run one after the other, as when
  // every core is busy. Below 0.5 the simulator runs collectives together, each
  // one's start-up stretched by it per other one moving; from 0.5 one at a time
  // (Note [Collectives in flight], sim/simulator.cc). Measured by `weft profile
  // --interference`.
  double pair_slowdown = 0;
  // The same, timed while the workers wait for one another (every core free of
  // layers, as at the end of a backward): what collectives moving while no
  // worker computes follow. Absent (profiles from before it was measured):
  // pair_slowdown holds whatever the workers do.
  std::optional<double> waiting_pair_slowdown;
  // The layer times were measured with `processes` workers computing at once on
  // `cores` cores, each with its share of them; in training a worker waiting for
  // the network leaves its share to the others (Note [Shared cores],
  // sim/simulator.cc). 0 (the default): unknown, and the times hold whatever the
  // number of workers computing.
  int processes = 0;
  int cores = 0;
  // Optional: what encoding and decoding cost one worker, by codec name
  // (docs/compression.md): "fp16", "bf16", "int8" in seconds per float32 value of
  // the message, "powersgd" in seconds per rows·cols·R of each compressed matrix.
  // Measured by `weft profile`; a codec absent costs no compute.
  std::map<std::string, double> codec_cost;

  int size() const { return static_cast<int>(layers.size()); }
  std::int64_t total_params() const;
  Bytes total_bytes() const;
  // transfer_slowdown where measured, else comm_slowdown.
  double point_to_point_slowdown() const { return transfer_slowdown.value_or(comm_slowdown); }
  Seconds forward_time() const;   // sum of fp
  Seconds backward_time() const;  // sum of bp
  // While no worker computes, waiting_pair_slowdown; while some worker computes,
  // the larger of the two: the layers only take cores from the collectives, so
  // pairs beside them run at least as much in turn as pairs while the workers
  // wait, and a lower pair_slowdown is that phase's noise (Note [Collectives in
  // flight], sim/simulator.cc). pair_slowdown throughout where
  // waiting_pair_slowdown was not measured.
  double pair_slowdown_while(bool computing) const {
    const double waiting = waiting_pair_slowdown.value_or(pair_slowdown);
    return computing ? std::max(pair_slowdown, waiting) : waiting;
  }
};

// Whether collectives issued together run one after the other, by a profile's
// pair_slowdown or waiting_pair_slowdown: 0.5 or more is nearer to in turn (1)
// than at once (0).
inline bool collectives_run_in_turn(double pair_slowdown) { return pair_slowdown >= 0.5; }

// Backward-pass timing: bp_end[l] is the time, from the start of the backward
// pass, at which layer l's backward ends (layers run L-1 down to 0).
std::vector<Seconds> backward_end_times(const Profile& profile);

// Checks a profile a user supplied. THROWS UsageError naming `origin` (a file
// name or "profile"), the layer index and field, for: no layers, an empty name,
// negative params, bytes_per_param < 1, negative or non-finite fp/bp; or naming
// the field for a negative or non-finite compute_slowdown, comm_slowdown, skew, drift,
// start_delay, pair_slowdown, waiting_pair_slowdown or transfer_slowdown, or for
// negative processes or cores.
void validate(const Profile& profile, std::string_view origin = "profile");

// JSON (docs/formats.md §6). Unknown fields are ignored; `bytes_per_param` defaults to 4 and
// the optional top-level `compute_slowdown`, `comm_slowdown`, `skew_s` and
// `back_to_back_skew_s`, `drift`, `start_delay_s`, `pair_slowdown`, `processes` and
// `cores` to 0; `waiting_pair_slowdown` and `transfer_slowdown` are absent where
// absent.
// parse_profile THROWS UsageError naming `origin`, the layer index and the field
// for a missing, mistyped or negative required field, and validates the result.
Profile parse_profile(std::string_view json_text, std::string_view origin = "profile");
Profile load_profile(const std::filesystem::path& file);
std::string to_json(const Profile& profile);
// Writes atomically (to a temporary beside `file`, then renamed): no half-written
// file is ever left behind.
void save_profile(const Profile& profile, const std::filesystem::path& file);

// Layer by layer, the median over `profiles` of the forward and backward times
// (the mean of the middle two for an even count), and of each slowdown and skew;
// the rest is the first's, the
// device saying how many were merged. THROWS std::invalid_argument for no
// profiles or profiles of different layers.
Profile median_profile(const std::vector<Profile>& profiles);

}  // namespace weft
