#include "cost/host.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "units/files.h"
#include "units/json_reader.h"
#include "units/limits.h"

namespace weft {

CoreShares core_shares(const Host& host, int computing, int messages) {
  if (host.cores <= 0 || host.processes <= 0) return {};
  const double cores = host.cores;
  const double asked = host.comm_cores;
  const double weight = host.comm_weight;
  // Progressive filling: every share grows with its weight until it has what it
  // asked for (a layer one core, a message comm_cores) or the cores run out. A
  // layer is filled at level 1, a message at asked / weight.
  double layer = 1;
  double message = asked;
  if (computing + messages * asked > cores) {
    const double level = cores / (computing + messages * weight);  // none filled
    if (level <= std::min(1.0, asked / weight)) {
      layer = level;
      message = weight * level;
    } else if (asked / weight < 1) {
      layer = (cores - messages * asked) / computing;  // the messages filled first
    } else {
      message = (cores - computing) / messages;  // the layers filled first
    }
  }
  const double profiled = std::min(1.0, cores / host.processes);
  return {.compute = computing > 0 ? profiled / layer : 1, .message = asked > 0 ? asked / message : 1};
}

bool cores_taken(const Host& host, int computing, int messages) {
  return host.cores > 0 && host.processes > 0 && computing + messages * host.comm_cores >= host.cores;
}

double comm_weight_of(const Host& host, double compute_slowdown) {
  if (host.cores <= 0 || host.processes <= 0) return 1;
  const double per_worker = static_cast<double>(host.cores) / host.processes;
  const double layer = std::min(1.0, per_worker) / (1 + compute_slowdown);
  const double message = per_worker - layer;  // the rest of the cores
  return message > 0 ? message / layer : 1;
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
struct Count {
  const char* name;
  int Host::*value;
};

constexpr const char* kSkew = "seconds >= 0 (0: the workers reach every collective together)";

constexpr Number kNumbers[] = {
    {"comm_cores", &Host::comm_cores, "a fraction of a core in [0, 1] (0: messages need no core)", 1},
    {"comm_weight", &Host::comm_weight, "a weight > 0 (1: a message shares the cores as a layer does)",
     limits::kMaxFactor},
    {"core_wait_s", &Host::core_wait, "seconds >= 0 (0: a message finds a core at once)", limits::kMaxSeconds},
    {"skew_s", &Host::skew, kSkew, limits::kMaxSeconds},
    {"back_to_back_skew_s", &Host::back_to_back_skew, kSkew, limits::kMaxSeconds},
    {"drift", &Host::drift, "a number >= 0 (0: the workers do not drift apart as they compute)", limits::kMaxFactor},
};
constexpr Count kCounts[] = {{"processes", &Host::processes}, {"cores", &Host::cores}};
constexpr const char* kCodecCost = "codec_cost_s";

// Note [Older host fields]
// ------------------------
// Rule: a host file or profile of the per-effect format (compute_slowdown,
// comm_slowdown, transfer_slowdown, start_delay_s, pair_slowdown,
// waiting_pair_slowdown) loads with the comm_cores and comm_weight under which
// core_shares reproduces its compute_slowdown and comm_slowdown with all
// `processes` workers computing beside a message each, and start_delay_s as
// core_wait_s; the other fields are dropped, with one warning. Why: old benches replay (src/cli/replay_test.cc)
// and old files plan as near as the new model allows, without a second model.
constexpr const char* kOlderFields[] = {"compute_slowdown", "comm_slowdown", "transfer_slowdown",
                                        "start_delay_s", "pair_slowdown", "waiting_pair_slowdown"};
constexpr const char* kOlderStartDelay = "start_delay_s";

// Note [Older host fields]: the cores full, a layer has a = profiled / (1 +
// compute_slowdown) of them and a message b = cores / processes − a, which is
// 1 + comm_slowdown times less than its comm_cores.
void map_older_fields(double compute_slowdown, double comm_slowdown, Host& host) {
  if (host.processes <= 0 || host.cores <= 0) return;
  const double per_worker = static_cast<double>(host.cores) / host.processes;
  const double message = std::max(0.0, per_worker - std::min(1.0, per_worker) / (1 + compute_slowdown));
  host.comm_cores = std::min(1.0, message * (1 + comm_slowdown));
  host.comm_weight = comm_weight_of(host, compute_slowdown);
}

[[noreturn]] void bad(std::string_view origin, std::string_view field, std::string_view value,
                      std::string_view expected) {
  throw UsageError(fmt::format("{}: field \"{}\" is {}; expected {}", origin, field, value, expected));
}

void check(std::string_view origin, const char* field, double value, const char* expected, double max) {
  if (!(value >= 0 && value <= max)) bad(origin, field, fmt::format("{}", value), fmt::format("{}, at most {}", expected, max));
}

// Reads the fields present in `root` into `host`; says whether there were any.
// The older fields found go to *older.
bool read_fields(const json& root, std::string_view origin, Host& host, std::vector<std::string>* older) {
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
  // Note [Older host fields]
  std::map<std::string, double> older_values;
  for (const char* field : kOlderFields) {
    const auto v = number(field, "a number >= 0");
    if (!v) continue;
    check(origin, field, *v, "a number >= 0", limits::kMaxFactor);
    older->push_back(field);
    older_values[field] = *v;
  }
  if (older_values.contains(kOlderStartDelay) && !root.contains("core_wait_s")) {
    host.core_wait = older_values[kOlderStartDelay];
  }
  if (older_values.contains("compute_slowdown") && !root.contains("comm_cores")) {
    map_older_fields(older_values["compute_slowdown"], older_values["comm_slowdown"], host);
  }
  return any;
}

std::string older_warning(std::string_view origin, const std::vector<std::string>& older) {
  return fmt::format(
      "{}: the host fields {} are of the older format: compute_slowdown, comm_slowdown and start_delay_s are read as "
      "comm_cores, comm_weight and core_wait_s, the rest dropped; "
      "`weft profile --host FILE` measures the new ones (docs/formats.md §6.7)",
      origin, fmt::join(older, ", "));
}

}  // namespace

void validate(const Host& host, std::string_view origin) {
  for (const Number& f : kNumbers) check(origin, f.name, host.*f.value, f.expected, f.max);
  if (!(host.comm_weight > 0)) bad(origin, "comm_weight", fmt::format("{}", host.comm_weight), "a weight > 0");
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

Host parse_host(std::string_view json_text, std::string_view origin, std::string* warning) {
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
  std::vector<std::string> older;
  read_fields(root, origin, host, &older);
  validate(host, origin);
  if (warning && !older.empty()) *warning = older_warning(origin, older);
  return host;
}

Host load_host(const std::filesystem::path& file, std::string* warning) {
  return parse_host(read_input(file, "the host description (a file `weft profile --host` wrote)"), file.string(),
                    warning);
}

std::string to_json(const Host& host) {
  nlohmann::ordered_json root;
  root["format"] = kFormat;
  root["description"] = host.description;
  for (const Count& f : kCounts) root[f.name] = host.*f.value;
  for (const Number& f : kNumbers) root[f.name] = host.*f.value;
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
  std::vector<std::string> older;
  if (!read_fields(root, origin, host, &older)) return std::nullopt;
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
  return merged;
}

}  // namespace weft
