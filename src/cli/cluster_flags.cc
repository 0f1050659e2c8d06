#include "cli/cluster_flags.h"

#include <algorithm>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cost/host.h"
#include "profile/zoo.h"
#include "units/files.h"
#include "units/json_reader.h"
#include "units/limits.h"

namespace weft::cli {

CLI::Validator in_range(const ranges::Range& range) {
  return CLI::Validator(
      [&range](std::string& text) {
        ranges::parse(range, text);
        return std::string();
      },
      ranges::accepted(range));
}

void add_model_flags(CLI::App& command, ModelFlags& flags) {
  command.add_option("--model", flags.model, "zoo model: " + fmt::format("{}", fmt::join(zoo_models(), ", ")))
      ->capture_default_str();
  command.add_option("--profile", flags.profile_file,
                     "a profile JSON (docs/formats.md §6, e.g. from `weft profile --out`); overrides --model");
  command.add_option("--batch", flags.batch, "samples per worker per iteration (zoo models)")
      ->capture_default_str()
      ->check(in_range(ranges::kBatch));
  command.add_option("--device", flags.device, "device preset for zoo compute times")->capture_default_str();
  command.add_option("--seq", flags.sequence_length, "sequence length of transformer zoo models (0 = model default)")
      ->capture_default_str()
      ->check(in_range(ranges::kSequence));
}

void add_cluster_flags(CLI::App& command, ClusterFlags& flags) {
  command.add_option("--workers,-P", flags.workers, "number of workers P")
      ->capture_default_str()
      ->check(in_range(ranges::kWorkers));
  command.add_option("--bandwidth,-B", flags.bandwidth, "each worker's link: 100Mbit, 1Gbit, 10MB/s, bytes/s")
      ->capture_default_str()
      ->check(in_range(ranges::kBandwidth));
  command.add_option("--latency", flags.latency, "per-message latency alpha: 50us, 2ms, 0")
      ->capture_default_str()
      ->check(in_range(ranges::kLatency));
  command.add_option("--arch", flags.arch, "allreduce | ps")->capture_default_str();
  command.add_option("--servers", flags.servers, "parameter servers (--arch ps)")
      ->capture_default_str()
      ->check(in_range(ranges::kServers));
  command.add_option("--server-bandwidth", flags.server_bandwidth,
                     "each server's link (--arch ps); default: same as --bandwidth")
      ->check(in_range(ranges::kServerBandwidth));
  command.add_option("--network", flags.network_file,
                     "measured all-reduce times from `weft profile --network --out FILE` (T(n) follows them; a "
                     "file with only a_s and b_s_per_byte: a + b*n); "
                     "replaces --bandwidth/--latency for all-reduce costs");
  add_host_flag(command, flags);
}

void add_host_flag(CLI::App& command, ClusterFlags& flags) {
  command.add_option("--host", flags.host_file,
                     "how this machine shares its cores between compute and communication, from `weft profile "
                     "--host FILE` (docs/formats.md 6.7); default: communication has cores of its own");
}

void add_strategy_flags(CLI::App& command, StrategyFlags& flags) {
  command.add_option("--H", flags.H, "local SGD period H (flsgd, plsgd, dreamddp, dreamddp-opt)")
      ->capture_default_str()
      ->check(in_range(ranges::kH));
  command.add_option("--T", flags.T, "interleaving period T (ps-interleaved)")
      ->capture_default_str()
      ->check(in_range(ranges::kT));
  command.add_option("--partition", flags.partition,
                     "block size S_p for bytescheduler/dcredit, e.g. 4MiB (default: tuned)")
      ->check(in_range(ranges::kPartition));
  command.add_option("--credit", flags.credit, "credit C for bytescheduler, e.g. 16MiB (default: tuned)")
      ->check(in_range(ranges::kCredit));
  command.add_option("--easgd-alpha", flags.easgd_alpha, "EASGD elastic coefficient (default: beta / P)")
      ->check(in_range(ranges::kEasgdAlpha));
  command.add_option("--easgd-beta", flags.easgd_beta, "EASGD centre moving rate")
      ->capture_default_str()
      ->check(in_range(ranges::kEasgdBeta));
  command.add_option("--compression", flags.compression,
                     fmt::format("wire encoding of every message (S-SGD: gradients; local SGD: each "
                                 "worker's change since the last average; parameter servers: pushes and "
                                 "answers, none/fp16/bf16/int8): {}; see docs/compression.md",
                                 kEncodingsAccepted))
      ->capture_default_str();
}

Profile load_model(const ModelFlags& flags) {
  if (!flags.profile_file.empty()) return load_profile(flags.profile_file);
  ranges::check(ranges::kBatch, flags.batch);
  ranges::check(ranges::kSequence, flags.sequence_length);
  const std::vector<std::string> zoo = zoo_models();
  if (std::find(zoo.begin(), zoo.end(), flags.model) == zoo.end()) {
    // A model weft trains has layer times only where they are measured.
    throw UsageError(fmt::format(
        "--model {}: not a zoo model (those are {}); if it is one `weft train` trains, measure its profile "
        "first: `weft profile --model {} --out {}.json`, then --profile {}.json",
        flags.model, fmt::join(zoo, ", "), flags.model, flags.model, flags.model));
  }
  return zoo_profile(flags.model, {.batch = flags.batch, .device = flags.device,
                                   .sequence_length = flags.sequence_length});
}

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

// Runs parse(text), prefixing any UsageError with the flag it came from.
template <typename Parse>
auto parse_flag(std::string_view flag, const std::string& text, Parse parse) {
  try {
    return parse(text);
  } catch (const UsageError& e) {
    throw UsageError(fmt::format("{}: {}", flag, e.what()));
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

Cluster make_cluster(const ClusterFlags& flags, const std::string& profile_file) {
  Cluster c;
  c.workers = flags.workers;
  c.bandwidth = ranges::parse(ranges::kBandwidth, flags.bandwidth);
  c.latency = ranges::parse(ranges::kLatency, flags.latency);
  c.arch = parse_flag("--arch", flags.arch, parse_arch);
  c.servers = flags.servers;
  if (!flags.server_bandwidth.empty()) {
    c.server_bandwidth = ranges::parse(ranges::kServerBandwidth, flags.server_bandwidth);
  }
  if (!flags.network_file.empty()) c.fitted = load_fit(flags.network_file);
  c.host = host_of(flags.host_file, profile_file);
  validate(c);
  return c;
}

StrategyOptions make_strategy_options(const StrategyFlags& flags) {
  ranges::check(ranges::kH, flags.H);
  ranges::check(ranges::kT, flags.T);
  if (flags.easgd_alpha) ranges::check(ranges::kEasgdAlpha, *flags.easgd_alpha);
  ranges::check(ranges::kEasgdBeta, flags.easgd_beta);
  StrategyOptions o;
  o.H = flags.H;
  o.T = flags.T;
  if (!flags.partition.empty()) o.partition = static_cast<Bytes>(ranges::parse(ranges::kPartition, flags.partition));
  if (!flags.credit.empty()) o.credit = static_cast<Bytes>(ranges::parse(ranges::kCredit, flags.credit));
  o.easgd_alpha = flags.easgd_alpha;
  o.easgd_beta = flags.easgd_beta;
  o.compression = parse_encoding(flags.compression, "--compression");
  return o;
}

}  // namespace weft::cli
