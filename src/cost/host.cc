#include "cost/host.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "units/files.h"
#include "units/json_reader.h"
#include "units/limits.h"

namespace weft {

double Host::pair_slowdown_while(bool computing) const {
  const double waiting = waiting_pair_slowdown.value_or(pair_slowdown);
  return computing ? std::max(pair_slowdown, waiting) : waiting;
}

namespace {

using nlohmann::json;

constexpr std::string_view kFormat = "weft-host/1";

// The numeric fields, by their JSON names (docs/formats.md §6.7): parsing,
// writing, validation and medians all walk this one table.
struct Number {
  const char* name;
  double Host::*value;
  const char* expected;
  double max;
};
struct OptionalNumber {
  const char* name;
  std::optional<double> Host::*value;
  const char* expected;
};
struct Count {
  const char* name;
  int Host::*value;
};

constexpr const char* kSlowdown = "a number >= 0 (0: compute and communication do not slow each other)";
constexpr const char* kSkew = "seconds >= 0 (0: the workers reach every collective together)";
constexpr const char* kPair = "a number >= 0 (0: collectives issued together run at once)";

constexpr Number kNumbers[] = {
    {"compute_slowdown", &Host::compute_slowdown, kSlowdown, limits::kMaxFactor},
    {"comm_slowdown", &Host::comm_slowdown, kSlowdown, limits::kMaxFactor},
    {"skew_s", &Host::skew, kSkew, limits::kMaxSeconds},
    {"back_to_back_skew_s", &Host::back_to_back_skew, kSkew, limits::kMaxSeconds},
    {"drift", &Host::drift, "a number >= 0 (0: the workers do not drift apart as they compute)", limits::kMaxFactor},
    {"start_delay_s", &Host::start_delay,
     "seconds >= 0 (0: collectives start as soon beside the layers as without)", limits::kMaxSeconds},
    {"pair_slowdown", &Host::pair_slowdown, kPair, limits::kMaxFactor},
};
constexpr OptionalNumber kOptionalNumbers[] = {
    {"transfer_slowdown", &Host::transfer_slowdown, kSlowdown},
    {"waiting_pair_slowdown", &Host::waiting_pair_slowdown, kPair},
};
constexpr Count kCounts[] = {{"processes", &Host::processes}, {"cores", &Host::cores}};
constexpr const char* kCodecCost = "codec_cost_s";

[[noreturn]] void bad(std::string_view origin, std::string_view field, std::string_view value,
                      std::string_view expected) {
  throw UsageError(fmt::format("{}: field \"{}\" is {}; expected {}", origin, field, value, expected));
}

void check(std::string_view origin, const char* field, double value, const char* expected, double max) {
  if (!(value >= 0 && value <= max)) bad(origin, field, fmt::format("{}", value), fmt::format("{}, at most {}", expected, max));
}

// Reads the fields present in `root` into `host`; says whether there were any.
bool read_fields(const json& root, std::string_view origin, Host& host) {
  bool any = false;
  const auto number = [&](const char* field, const char* expected) -> std::optional<double> {
    const auto it = root.find(field);
    if (it == root.end() || it->is_null()) return std::nullopt;
    if (!it->is_number()) bad(origin, field, excerpt(*it), expected);
    any = true;
    return it->get<double>();
  };
  for (const Number& f : kNumbers) {
    if (const auto v = number(f.name, f.expected)) host.*f.value = *v;
  }
  for (const OptionalNumber& f : kOptionalNumbers) {
    if (const auto v = number(f.name, f.expected)) host.*f.value = *v;
  }
  for (const Count& f : kCounts) {
    const auto it = root.find(f.name);
    if (it == root.end() || it->is_null()) continue;
    if (!it->is_number_integer() || it->get<std::int64_t>() < 0 || it->get<std::int64_t>() > limits::kMaxWorkers) {
      bad(origin, f.name, excerpt(*it), fmt::format("an integer >= 0, at most {} (0: unknown)", limits::kMaxWorkers));
    }
    host.*f.value = it->get<int>();
    any = true;
  }
  if (const auto costs = root.find(kCodecCost); costs != root.end()) {
    const bool ok = costs->is_object() && std::all_of(costs->begin(), costs->end(), [](const json& v) {
      return v.is_number() && v.get<double>() >= 0 && v.get<double>() <= limits::kMaxSeconds;
    });
    if (!ok) bad(origin, kCodecCost, excerpt(*costs), "an object of codec names to seconds >= 0");
    host.codec_cost = costs->get<std::map<std::string, double>>();
    any = true;
  }
  return any;
}

}  // namespace

void validate(const Host& host, std::string_view origin) {
  for (const Number& f : kNumbers) check(origin, f.name, host.*f.value, f.expected, f.max);
  for (const OptionalNumber& f : kOptionalNumbers) {
    if (host.*f.value) check(origin, f.name, *(host.*f.value), f.expected, limits::kMaxFactor);
  }
  for (const Count& f : kCounts) {
    if (host.*f.value < 0 || host.*f.value > limits::kMaxWorkers) {
      bad(origin, f.name, fmt::format("{}", host.*f.value),
          fmt::format("an integer >= 0, at most {} (0: unknown)", limits::kMaxWorkers));
    }
  }
  for (const auto& [codec, seconds] : host.codec_cost) {
    check(origin, kCodecCost, seconds, "seconds >= 0", limits::kMaxSeconds);
  }
}

Host parse_host(std::string_view json_text, std::string_view origin) {
  const json root = parse_json(json_text, origin, "a host description as in docs/formats.md §6.7");
  if (!root.is_object()) {
    throw UsageError(fmt::format("{}: the top level is a JSON {}; expected an object with \"format\": \"{}\"",
                                 origin, root.type_name(), kFormat));
  }
  const auto format = root.find("format");
  if (format == root.end() || *format != kFormat) {
    throw UsageError(fmt::format("{}: field \"format\" is {}; expected \"{}\" (a file `weft profile --host` wrote)",
                                 origin, format == root.end() ? "missing" : excerpt(*format), kFormat));
  }
  Host host;
  if (const auto d = root.find("description"); d != root.end() && d->is_string()) host.description = *d;
  read_fields(root, origin, host);
  validate(host, origin);
  return host;
}

Host load_host(const std::filesystem::path& file) {
  return parse_host(read_input(file, "the host description (a file `weft profile --host` wrote)"), file.string());
}

std::string to_json(const Host& host) {
  nlohmann::ordered_json root;
  root["format"] = kFormat;
  root["description"] = host.description;
  for (const Count& f : kCounts) root[f.name] = host.*f.value;
  for (const Number& f : kNumbers) root[f.name] = host.*f.value;
  for (const OptionalNumber& f : kOptionalNumbers) {
    if (host.*f.value) root[f.name] = *(host.*f.value);
  }
  if (!host.codec_cost.empty()) root[kCodecCost] = host.codec_cost;
  return root.dump(2) + "\n";
}

void save_host(const Host& host, const std::filesystem::path& file) {
  try {
    write_file_atomically(file, to_json(host));
  } catch (const std::runtime_error& e) {
    throw UsageError(fmt::format("{}; expected a writable path in an existing directory for the host description",
                                 e.what()));
  }
}

std::optional<Host> host_in_profile(std::string_view profile_json, std::string_view origin) {
  const json root = parse_json(profile_json, origin, "a profile object as in docs/formats.md §6.1");
  if (!root.is_object()) return std::nullopt;
  Host host;
  if (!read_fields(root, origin, host)) return std::nullopt;
  validate(host, origin);
  return host;
}

Host median_host(const std::vector<Host>& hosts) {
  if (hosts.empty()) throw std::invalid_argument("median_host: no hosts");
  Host merged = hosts.front();
  for (const Number& f : kNumbers) {
    std::vector<double> values;
    for (const Host& h : hosts) values.push_back(h.*f.value);
    merged.*f.value = median(values);
  }
  for (const OptionalNumber& f : kOptionalNumbers) {
    std::vector<double> values;
    for (const Host& h : hosts) {
      if (h.*f.value) values.push_back(*(h.*f.value));
    }
    if (!values.empty()) merged.*f.value = median(values);
  }
  return merged;
}

}  // namespace weft
