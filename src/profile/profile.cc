#include "profile/profile.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "units/files.h"
#include "units/json_reader.h"
#include "units/limits.h"

namespace weft {

std::int64_t Profile::total_params() const {
  std::int64_t total = 0;
  for (const Layer& layer : layers) total += layer.params;
  return total;
}

Bytes Profile::total_bytes() const {
  Bytes total = 0;
  for (const Layer& layer : layers) total += layer.bytes();
  return total;
}

Seconds Profile::forward_time() const {
  Seconds total = 0;
  for (const Layer& layer : layers) total += layer.fp;
  return total;
}

Seconds Profile::backward_time() const {
  Seconds total = 0;
  for (const Layer& layer : layers) total += layer.bp;
  return total;
}

std::vector<Seconds> backward_end_times(const Profile& profile) {
  std::vector<Seconds> bp_end(profile.layers.size());
  Seconds t = 0;
  for (int l = profile.size() - 1; l >= 0; --l) {
    t += profile.layers[l].bp;
    bp_end[l] = t;
  }
  return bp_end;
}

namespace {

// The JSON field names of docs/formats.md §6 and what each accepts. Messages from both the
// parser and `validate` use these, so the two always describe the same rule.
constexpr const char* kName = "name";
constexpr const char* kParams = "params";
constexpr const char* kBytesPerParam = "bytes_per_param";
constexpr const char* kForward = "fp_s";
constexpr const char* kBackward = "bp_s";

std::string_view accepted(std::string_view field) {
  if (field == kName) return "a non-empty string";
  static const std::string params =
      fmt::format("an integer >= 0, params * bytes_per_param at most {} bytes", limits::kMaxBytes);
  static const std::string seconds = fmt::format("a number >= 0 (seconds), at most {}", limits::kMaxSeconds);
  if (field == kParams) return params;
  if (field == kBytesPerParam) return "an integer >= 1 and at most 64 (default 4)";
  return seconds;  // fp_s, bp_s
}

// "profile.json: layer 3 (\"conv2\")" — the name only when there is one.
std::string where(std::string_view origin, std::size_t index, std::string_view name) {
  if (name.empty()) return fmt::format("{}: layer {}", origin, index);
  return fmt::format("{}: layer {} (\"{}\")", origin, index, excerpt_text(name));
}

[[noreturn]] void bad_field(std::string_view origin, std::size_t index, std::string_view name,
                            std::string_view field, std::string_view value) {
  throw UsageError(fmt::format("{}: field \"{}\" is {}; expected {}", where(origin, index, name),
                               field, value, accepted(field)));
}

void check_layer_count(std::size_t layers, std::string_view origin) {
  if (layers > static_cast<std::size_t>(limits::kMaxLayers)) {
    throw UsageError(fmt::format("{}: {} layers; weft reads at most {} (docs/limits.md)", origin, layers,
                                 limits::kMaxLayers));
  }
}

void check_time(std::string_view origin, std::size_t index, const Layer& layer,
                std::string_view field, Seconds t) {
  if (!(t >= 0 && t <= limits::kMaxSeconds)) bad_field(origin, index, layer.name, field, fmt::format("{}", t));
}

}  // namespace

void validate(const Profile& profile, std::string_view origin) {
  if (profile.layers.empty()) {
    throw UsageError(fmt::format(
        "{}: the profile has no layers; expected \"layers\" to hold at least one layer", origin));
  }
  check_layer_count(profile.layers.size(), origin);
  Bytes total = 0;  // each layer's bytes are at most kMaxBytes, so this cannot overflow
  for (std::size_t i = 0; i < profile.layers.size(); ++i) {
    const Layer& layer = profile.layers[i];
    if (layer.name.empty()) bad_field(origin, i, layer.name, kName, "\"\"");
    if (layer.bytes_per_param < 1 || layer.bytes_per_param > 64) {
      bad_field(origin, i, layer.name, kBytesPerParam, fmt::format("{}", layer.bytes_per_param));
    }
    if (layer.params < 0 || layer.params > limits::kMaxBytes / layer.bytes_per_param) {
      bad_field(origin, i, layer.name, kParams, fmt::format("{}", layer.params));
    }
    check_time(origin, i, layer, kForward, layer.fp);
    check_time(origin, i, layer, kBackward, layer.bp);
    total += layer.bytes();
    if (total > limits::kMaxBytes) {
      throw UsageError(fmt::format("{}: layers 0 to {} hold {} bytes, more than the {} weft models (docs/limits.md)",
                                   origin, i, total, limits::kMaxBytes));
    }
  }
}

namespace {

using nlohmann::json;

// Reading one layer checks presence and JSON type only; value ranges are
// `validate`'s job, so there is one place that states them.
class LayerReader {
 public:
  LayerReader(std::string_view origin, std::size_t index, const json& object)
      : origin_(origin), index_(index), object_(object) {}

  std::string name() {
    const json* value = find(kName);
    if (value == nullptr) missing(kName);
    if (!value->is_string()) bad(kName, *value);
    name_ = value->get<std::string>();
    return name_;
  }

  // An integer, also when written as a whole number in floating point (1e6).
  template <typename Int>
  Int integer(const char* field, std::optional<Int> fallback = std::nullopt) {
    const json* value = find(field);
    if (value == nullptr) {
      if (fallback) return *fallback;
      missing(field);
    }
    if (value->is_number_integer()) {
      if (value->is_number_unsigned()) {
        auto u = value->get<std::uint64_t>();
        if (u > static_cast<std::uint64_t>(std::numeric_limits<Int>::max())) bad(field, *value);
        return static_cast<Int>(u);
      }
      auto i = value->get<std::int64_t>();
      if (i < std::numeric_limits<Int>::min() || i > std::numeric_limits<Int>::max()) {
        bad(field, *value);
      }
      return static_cast<Int>(i);
    }
    if (value->is_number_float()) {
      double d = value->get<double>();
      if (std::trunc(d) == d && d >= static_cast<double>(std::numeric_limits<Int>::min()) &&
          d <= static_cast<double>(std::numeric_limits<Int>::max())) {
        return static_cast<Int>(d);
      }
    }
    bad(field, *value);
  }

  Seconds seconds(const char* field) {
    const json* value = find(field);
    if (value == nullptr) missing(field);
    if (!value->is_number()) bad(field, *value);
    return value->get<double>();
  }

 private:
  const json* find(const char* field) const {
    auto it = object_.find(field);
    return it == object_.end() ? nullptr : &*it;
  }
  [[noreturn]] void missing(std::string_view field) const {
    bad_field(origin_, index_, name_, field, "missing");
  }
  [[noreturn]] void bad(std::string_view field, const json& value) const {
    bad_field(origin_, index_, name_, field, excerpt(value));
  }

  std::string_view origin_;
  std::size_t index_;
  const json& object_;
  std::string name_;
};

// An optional informative top-level field: absent is fine, mistyped is not.
template <typename T>
void read_optional(const json& root, const char* field, std::string_view accepted_form,
                   std::string_view origin, T& out) {
  auto it = root.find(field);
  if (it == root.end() || it->is_null()) return;
  bool ok = std::is_same_v<T, std::string>   ? it->is_string()
            : std::is_floating_point_v<T> ? it->is_number()
                                          : it->is_number_integer();
  if (!ok) {
    throw UsageError(fmt::format("{}: field \"{}\" is {}; expected {}", origin, field, excerpt(*it),
                                 accepted_form));
  }
  out = it->get<T>();
}

}  // namespace

Profile parse_profile(std::string_view json_text, std::string_view origin) {
  const json root = parse_json(json_text, origin, "a profile object as in docs/formats.md §6");
  if (!root.is_object()) {
    throw UsageError(
        fmt::format("{}: the top level is a JSON {}; expected an object with a \"layers\" array",
                    origin, root.type_name()));
  }

  Profile profile;
  read_optional(root, "model", "a string", origin, profile.model);
  read_optional(root, "batch", "an integer", origin, profile.batch);
  read_optional(root, "device", "a string", origin, profile.device);

  auto layers = root.find("layers");
  if (layers == root.end()) {
    throw UsageError(fmt::format(
        "{}: field \"layers\" is missing; expected an array of layers in forward order", origin));
  }
  if (!layers->is_array()) {
    throw UsageError(
        fmt::format("{}: field \"layers\" is a JSON {}; expected an array of layers "
                    "in forward order",
                    origin, layers->type_name()));
  }
  check_layer_count(layers->size(), origin);
  profile.layers.reserve(layers->size());
  for (std::size_t i = 0; i < layers->size(); ++i) {
    const json& entry = (*layers)[i];
    if (!entry.is_object()) {
      throw UsageError(
          fmt::format("{}: layer {} is a JSON {}; expected an object with \"{}\", "
                      "\"{}\", \"{}\" and \"{}\"",
                      origin, i, entry.type_name(), kName, kParams, kForward, kBackward));
    }
    LayerReader read(origin, i, entry);
    Layer layer;
    layer.name = read.name();
    layer.params = read.integer<std::int64_t>(kParams);
    layer.bytes_per_param = read.integer<int>(kBytesPerParam, 4);
    layer.fp = read.seconds(kForward);
    layer.bp = read.seconds(kBackward);
    if (const auto shapes = entry.find("shapes"); shapes != entry.end()) {
      const bool ok = shapes->is_array() && std::all_of(shapes->begin(), shapes->end(), [](const json& shape) {
        return shape.is_array() && std::all_of(shape.begin(), shape.end(), [](const json& d) {
                 return d.is_number_integer() && d.get<std::int64_t>() >= 1;
               });
      });
      if (!ok) bad_field(origin, i, layer.name, "shapes", shapes->dump());
      layer.shapes = shapes->get<std::vector<std::vector<std::int64_t>>>();
      std::int64_t elements = 0;
      for (const auto& shape : layer.shapes) {
        std::int64_t n = 1;
        for (std::int64_t d : shape) n *= d;
        elements += n;
      }
      if (elements != layer.params) {
        bad_field(origin, i, layer.name, "shapes",
                  fmt::format("{} (their elements add up to {}, not params {})", shapes->dump(), elements,
                              layer.params));
      }
    }
    profile.layers.push_back(std::move(layer));
  }
  validate(profile, origin);
  return profile;
}

Profile load_profile(const std::filesystem::path& file) {
  return parse_profile(read_input(file, "the profile (a profile JSON file)"), file.string());
}

std::string to_json(const Profile& profile) {
  // ordered_json keeps the field order of docs/formats.md §6, which is what people read.
  nlohmann::ordered_json root;
  root["model"] = profile.model;
  root["batch"] = profile.batch;
  root["device"] = profile.device;
  auto& layers = root["layers"] = nlohmann::ordered_json::array();
  for (const Layer& layer : profile.layers) {
    layers.push_back({{kName, layer.name},
                      {kParams, layer.params},
                      {kBytesPerParam, layer.bytes_per_param},
                      {kForward, layer.fp},
                      {kBackward, layer.bp}});
    if (!layer.shapes.empty()) layers.back()["shapes"] = layer.shapes;
  }
  return root.dump(2) + "\n";
}

void save_profile(const Profile& profile, const std::filesystem::path& file) {
  try {
    write_file_atomically(file, to_json(profile));
  } catch (const std::runtime_error& e) {
    throw UsageError(fmt::format("{}; expected a writable path in an existing directory for the profile",
                                 e.what()));
  }
}

Profile median_profile(const std::vector<Profile>& profiles) {
  if (profiles.empty()) throw std::invalid_argument("median_profile: no profiles");
  Profile merged = profiles.front();
  for (const Profile& p : profiles) {
    bool same = p.size() == merged.size();
    for (int l = 0; same && l < p.size(); ++l) same = p.layers[l].name == merged.layers[l].name;
    if (!same) {
      throw std::invalid_argument(fmt::format("median_profile: profiles of {} and {} have different layers",
                                              merged.model, p.model));
    }
  }
  for (int l = 0; l < merged.size(); ++l) {
    std::vector<Seconds> fp, bp;
    for (const Profile& p : profiles) {
      fp.push_back(p.layers[l].fp);
      bp.push_back(p.layers[l].bp);
    }
    merged.layers[l].fp = median(fp);
    merged.layers[l].bp = median(bp);
  }
  if (profiles.size() > 1) merged.device = fmt::format("{}, median of {} processes", merged.device, profiles.size());
  return merged;
}

}  // namespace weft
