#include "plan/options.h"

#include <fmt/format.h>

#include "cost/host.h"
#include "profile/profile.h"
#include "units/files.h"
#include "units/json_reader.h"
#include "units/limits.h"
#include "units/ranges.h"

namespace weft {

namespace {
constexpr std::string_view kFit =
    "a JSON object with points [{bytes, seconds}, ...] (or [{bytes, allreduce_s, allgather_s}, ...]) or numbers "
    "a_s and b_s_per_byte, and optionally an integer gather_below_bytes, as `weft profile --network --out` writes";

}  // namespace

FittedAllReduce parse_fit(std::string_view text, std::string_view origin) {
  const nlohmann::json j = parse_json(text, origin, kFit);
  const JsonReader r(j, "", origin, kFit);
  const Bytes gather_below = r.has("gather_below_bytes") ? r.integer("gather_below_bytes") : 0;
  if (gather_below < 0) r.reject("gather_below_bytes", "a size >= 0 in bytes", r.get("gather_below_bytes"));
  FittedAllReduce fit;
  if (!r.has("points")) {
    fit = {.a = r.number("a_s"), .b = r.number("b_s_per_byte")};
    if (!(fit.a >= 0 && fit.a <= limits::kMaxSeconds)) r.reject("a_s", "a duration in [0, 86400] s", r.get("a_s"));
    if (!(fit.b > 0 && fit.b <= 1 / limits::kMinBytesPerSecond)) {
      r.reject("b_s_per_byte", "a number in (0, 1] s/byte (a rate of at least a byte a second)", r.get("b_s_per_byte"));
    }
  } else {
    const nlohmann::json& points = r.array("points");
    if (points.empty()) {
      r.reject("points", "at least one point: {bytes, seconds} or {bytes, allreduce_s, allgather_s}", points);
    }
    // Each algorithm's own times (Note [One curve per algorithm]), or the time
    // of the algorithm used at each size (Note [Measured all-reduce curve]).
    const bool per_algorithm = points[0].is_object() && points[0].contains("allreduce_s");
    std::vector<MeasuredAllReduce> allreduce, allgather;
    r.each("points", [&](const JsonReader& p) {
      const Bytes bytes = p.integer("bytes");
      allreduce.push_back({.bytes = bytes, .seconds = p.number(per_algorithm ? "allreduce_s" : "seconds")});
      if (per_algorithm && p.has("allgather_s") && summed_by_allgather(bytes, gather_below)) {
        allgather.push_back({.bytes = bytes, .seconds = p.number("allgather_s")});
      }
    });
    fit = per_algorithm ? measured_curves(std::move(allreduce), std::move(allgather), gather_below, origin)
                        : measured_curve(std::move(allreduce), origin);
  }
  fit.gather_below = gather_below;
  return fit;
}

namespace {
FittedAllReduce load_fit(const std::string& file) {
  return parse_fit(read_input(file, "the all-reduce fit given to --network"), fmt::format("--network {}", file));
}
}  // namespace

// Runs parse(text), prefixing any UsageError with the option it came from.
template <typename Parse>
auto parse_option(std::string_view flag, const std::string& text, Parse parse) {
  try {
    return parse(text);
  } catch (const UsageError& e) {
    throw UsageError(fmt::format("{}: {}", ranges::named(flag), e.what()));
  }
}

namespace {

// make_cluster's host. Note [Host fields in old profiles]: profiles written
// before the host had a file of its own carry it at their top level; they keep
// planning as they did, and the user is told once where the fields now belong.
Host host_of(const std::string& host_file, const std::string& profile_file) {
  std::optional<Host> in_profile;
  if (!profile_file.empty()) {
    in_profile = host_in_profile(read_input(profile_file, "the profile (a profile JSON file)"), profile_file);
  }
  if (!host_file.empty()) {
    if (in_profile) {
      fmt::print(stderr, "weft: warning: {} carries host fields of the older format; --host {} is used instead\n",
                 profile_file, host_file);
    }
    std::string warning;
    Host host = load_host(host_file, &warning);
    if (!warning.empty()) fmt::print(stderr, "weft: warning: {}\n", warning);
    return host;
  }
  if (!in_profile) return {};
  fmt::print(stderr,
             "weft: warning: {} carries host fields (compute_slowdown, skew_s, ...) of the older format; they are "
             "used, but belong in a host file now: `weft profile --host FILE` writes one (docs/formats.md 6.7)\n",
             profile_file);
  return *in_profile;
}

}  // namespace

Cluster make_cluster(const ClusterSpec& spec, const std::string& profile_file) {
  Cluster c;
  c.workers = spec.workers;
  c.bandwidth = ranges::parse(ranges::kBandwidth, spec.bandwidth);
  c.latency = ranges::parse(ranges::kLatency, spec.latency);
  c.arch = parse_option("--arch", spec.arch, parse_arch);
  c.servers = spec.servers;
  if (!spec.server_bandwidth.empty()) {
    c.server_bandwidth = ranges::parse(ranges::kServerBandwidth, spec.server_bandwidth);
  }
  if (!spec.network_file.empty()) c.fitted = load_fit(spec.network_file);
  c.host = host_of(spec.host_file, profile_file);
  c.topology = topology_of(spec.sites, c.workers, c.bandwidth, c.latency);
  validate(c);
  return c;
}

StrategyOptions make_strategy_options(const StrategySpec& spec) {
  ranges::check(ranges::kH, spec.H);
  ranges::check(ranges::kT, spec.T);
  if (spec.easgd_alpha) ranges::check(ranges::kEasgdAlpha, *spec.easgd_alpha);
  ranges::check(ranges::kEasgdBeta, spec.easgd_beta);
  StrategyOptions o;
  o.H = spec.H;
  o.T = spec.T;
  if (!spec.partition.empty()) o.partition = static_cast<Bytes>(ranges::parse(ranges::kPartition, spec.partition));
  if (!spec.credit.empty()) o.credit = static_cast<Bytes>(ranges::parse(ranges::kCredit, spec.credit));
  o.easgd_alpha = spec.easgd_alpha;
  o.easgd_beta = spec.easgd_beta;
  o.compression = parse_encoding(spec.compression, "--compression");
  o.hierarchical = spec.hierarchical;
  ranges::check(ranges::kSiteEvery, spec.site_every);
  o.site_every = spec.site_every;
  return o;
}

}  // namespace weft
