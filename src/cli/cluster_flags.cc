#include "cli/cluster_flags.h"

#include <algorithm>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "profile/zoo.h"

namespace weft::cli {

CLI::Validator in_range(const ranges::Range& range) {
  return CLI::Validator(
      [&range](std::string& text) {
        ranges::parse(range, text);
        return std::string();
      },
      ranges::accepted(range));
}

CLI::Validator non_empty(std::string_view flag, std::string_view accepted) {
  return CLI::Validator(
      [flag = std::string(flag), accepted = std::string(accepted)](std::string& text) {
        if (text.empty()) throw UsageError(fmt::format("{} '': expected {}", flag, accepted));
        return std::string();
      },
      std::string(accepted));
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

void add_cluster_flags(CLI::App& command, ClusterSpec& flags) {
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
  // Sites (cost/topology.h): each site's links at --bandwidth and --latency, or
  // as a --topology file gives them.
  command.add_option("--sites", flags.sites.sites,
                     "A sites of B workers each, AxB (2x2; workers in rank order): --bandwidth and --latency are "
                     "the links inside a site, --wan-bandwidth and --wan-latency those between sites")
      ->check(non_empty("--sites", "AxB, e.g. 2x2, whose product is --workers"));
  command.add_option("--wan-bandwidth", flags.sites.wan_bandwidth,
                     "with --sites: each ordered pair of sites' link, shared by all traffic between them: 20Mbit")
      ->check(in_range(ranges::kWanBandwidth));
  command.add_option("--wan-latency", flags.sites.wan_latency,
                     "with --sites: one-way delay between workers of two sites: 20ms")
      ->check(in_range(ranges::kWanLatency));
  command.add_option("--topology", flags.sites.topology,
                     "the sites of this JSON file (docs/formats.md, Topology): each site's ranks, bandwidth and "
                     "latency, and the WAN's; not with --sites")
      ->check(non_empty("--topology", "a topology file (docs/formats.md, Topology)"));
  add_host_flag(command, flags);
}

void add_host_flag(CLI::App& command, ClusterSpec& flags) {
  command.add_option("--host", flags.host_file,
                     "how this machine shares its cores between compute and communication, from `weft profile "
                     "--host FILE` (docs/formats.md 6.7); default: communication has cores of its own");
}

void add_strategy_flags(CLI::App& command, StrategySpec& flags) {
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
  command.add_flag("--hierarchical", flags.hierarchical,
                   "with sites: every average across sites by sites (summed inside each site, then between one "
                   "leader per site over the WAN, then sent back inside) instead of one ring over all workers; "
                   "all-reduce strategies (docs/strategies.md, Sites)");
  command.add_option("--site-every", flags.site_every,
                     "with sites, local SGD: each site also averages inside itself every N iterations between its "
                     "averages across sites (0 = never; N divides --H)")
      ->capture_default_str()
      ->check(in_range(ranges::kSiteEvery));
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

}  // namespace weft::cli
