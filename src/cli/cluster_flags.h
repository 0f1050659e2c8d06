// Command-line flags shared by the commands that describe a model and a cluster
// (`weft plan`, `weft simulate`, `weft train`): how they are declared, their
// defaults, and how they become a Profile, a Cluster and StrategyOptions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "cost/cluster.h"
#include "profile/profile.h"
#include "schedulers/strategies.h"
#include "units/ranges.h"

namespace CLI {
class App;
class Validator;
}

namespace weft::cli {

struct ModelFlags {
  std::string model = "gpt2";  // a zoo model
  std::string profile_file;    // overrides --model
  int batch = 32;
  std::string device = "v100";
  int sequence_length = 0;
};

struct ClusterFlags {
  int workers = 16;
  std::string bandwidth = "1Gbit";
  std::string latency = "50us";
  std::string arch = "allreduce";
  int servers = 1;
  std::string server_bandwidth;  // empty = same as --bandwidth
  std::string network_file;      // a fit from `weft profile --network --out FILE`
  std::string host_file;         // a host description from `weft profile --host FILE`
};

struct StrategyFlags {
  int H = 5;
  int T = 3;
  std::string partition;  // empty = tuned
  std::string credit;     // empty = tuned
  std::optional<double> easgd_alpha;  // unset = beta / P
  double easgd_beta = 0.9;
  std::string compression = "none";  // schedule/encoding.h; `weft plan` also takes "auto"
};

// A check for `add_option(...)->check(in_range(range))`: the flag's text is
// parsed as the range's kind and THROWS UsageError "FLAG TEXT: expected
// ACCEPTED" (ranges::parse) as the command line is parsed; --help shows the range.
CLI::Validator in_range(const ranges::Range& range);

void add_model_flags(CLI::App& command, ModelFlags& flags);
void add_cluster_flags(CLI::App& command, ClusterFlags& flags);  // --host included
void add_host_flag(CLI::App& command, ClusterFlags& flags);       // --host alone
void add_strategy_flags(CLI::App& command, StrategyFlags& flags);

// THROW UsageError naming the flag, the value and what is accepted.
Profile load_model(const ModelFlags& flags);
// The cluster's host is --host's; without it, the host fields a profile of the
// older format carries (`profile_file`, --profile), with a warning on stderr;
// else Host{}: communication with cores of its own.
Cluster make_cluster(const ClusterFlags& flags, const std::string& profile_file = "");
StrategyOptions make_strategy_options(const StrategyFlags& flags);

// The all-reduce fit that `weft profile --network --out` writes, as --network
// reads it. THROWS UsageError naming `origin` and the field.
FittedAllReduce parse_fit(std::string_view text, std::string_view origin);

}  // namespace weft::cli
