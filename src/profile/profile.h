// A model profile: the ordered layers of a model with their sizes and compute times
// (docs/design.md §1.1): what the model computes and sends, nothing about the
// machine (that is cost/host.h). It is what every scheduler and the simulator read.
//
// Layers are indexed 0..L-1 in forward order (index 0 touches the input, L-1 the
// loss); backward visits L-1..0. The file format (docs/formats.md §6.1) is stable.
//
// Thread-safety: plain data; the functions are pure.
#pragma once

#include <algorithm>
#include <filesystem>
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
  // unknown; the planner then costs no low-rank codec (Note [Costed only with
  // shapes], plan/planner.cc), the wire cost sends the layer whole.
  std::vector<std::vector<std::int64_t>> shapes;

  Bytes bytes() const { return params * bytes_per_param; }
};

struct Profile {
  std::string model;
  int batch = 0;           // informative
  std::string device;      // informative
  std::vector<Layer> layers;

  int size() const { return static_cast<int>(layers.size()); }
  std::int64_t total_params() const;
  Bytes total_bytes() const;
  Seconds forward_time() const;   // sum of fp
  Seconds backward_time() const;  // sum of bp
};

// Backward-pass timing: bp_end[l] is the time, from the start of the backward
// pass, at which layer l's backward ends (layers run L-1 down to 0).
std::vector<Seconds> backward_end_times(const Profile& profile);

// Checks a profile a user supplied. THROWS UsageError naming `origin` (a file
// name or "profile"), the layer index and field, for: no layers, an empty name,
// negative params, bytes_per_param < 1, negative or non-finite fp/bp.
void validate(const Profile& profile, std::string_view origin = "profile");

// JSON (docs/formats.md §6.1). Unknown fields are ignored; `bytes_per_param`
// defaults to 4. The host fields older profiles carry are read by
// host_in_profile (cost/host.h), not here.
// parse_profile THROWS UsageError naming `origin`, the layer index and the field
// for a missing, mistyped or negative required field, and validates the result.
Profile parse_profile(std::string_view json_text, std::string_view origin = "profile");
Profile load_profile(const std::filesystem::path& file);
std::string to_json(const Profile& profile);
// Writes atomically (to a temporary beside `file`, then renamed): no half-written
// file is ever left behind.
void save_profile(const Profile& profile, const std::filesystem::path& file);

// Layer by layer, the median over `profiles` of the forward and backward times
// (the mean of the middle two for an even count); the rest is the first's, the
// device saying how many were merged. THROWS std::invalid_argument for no
// profiles or profiles of different layers.
Profile median_profile(const std::vector<Profile>& profiles);

}  // namespace weft
