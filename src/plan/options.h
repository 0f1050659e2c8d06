// A plan's inputs as a person gives them — rates, latencies and sizes as text
// with units ("1Gbit", "50us", "4MiB"), measurements as files — and how they
// become a Cluster and StrategyOptions. Both front ends call these: the command
// line with its flags (cli/cluster_flags.h), the Python package with its keyword
// arguments (src/python/module.cc); each value is range-checked here, with the
// message named as the caller spells the option (Note [One message, two
// spellings], units/ranges.h).
//
// Thread-safety: pure functions but for reading the files named.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "cost/cluster.h"
#include "schedulers/strategies.h"

namespace weft {

struct ClusterSpec {
  int workers = 16;
  std::string bandwidth = "1Gbit";
  std::string latency = "50us";
  std::string arch = "allreduce";
  int servers = 1;
  std::string server_bandwidth;  // empty = same as bandwidth
  std::string network_file;      // a fit from `weft profile --network --out FILE`
  std::string host_file;         // a host description from `weft profile --host FILE`
  SiteFlags sites;               // --sites/--topology/--wan-*: sites (cost/topology.h)
};

struct StrategySpec {
  int H = 5;
  int T = 3;
  std::string partition;  // empty = tuned
  std::string credit;     // empty = tuned
  std::optional<double> easgd_alpha;  // unset = beta / P
  double easgd_beta = 0.9;
  std::string compression = "none";  // schedule/encoding.h; `weft plan` also takes "auto"
  bool hierarchical = false;  // averages across sites by sites (docs/strategies.md, "Sites")
  int site_every = 0;         // local SGD: sites average every this many iterations; 0 = never
};

// THROW UsageError naming the option, the value and what is accepted.
// The cluster's host is host_file's; without it, the host fields a profile of the
// older format carries (`profile_file`), with a warning on stderr; else Host{}:
// communication with cores of its own.
Cluster make_cluster(const ClusterSpec& spec, const std::string& profile_file = "");
StrategyOptions make_strategy_options(const StrategySpec& spec);

// The all-reduce fit that `weft profile --network --out` writes, as --network
// reads it. THROWS UsageError naming `origin` and the field.
FittedAllReduce parse_fit(std::string_view text, std::string_view origin);

}  // namespace weft
