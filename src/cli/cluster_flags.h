// Command-line flags shared by the commands that describe a model and a cluster
// (`weft plan`, `weft simulate`, `weft train`): how they are declared and their
// defaults. The flags fill a ClusterSpec and a StrategySpec, which plan/options.h
// turns into a Cluster and StrategyOptions, as it does the Python package's options.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "cost/cluster.h"
#include "plan/options.h"
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

// A check for `add_option(...)->check(in_range(range))`: the flag's text is
// parsed as the range's kind and THROWS UsageError "FLAG TEXT: expected
// ACCEPTED" (ranges::parse) as the command line is parsed; --help shows the range.
CLI::Validator in_range(const ranges::Range& range);
// A check for a text flag where an empty value would read as "not given" (e.g.
// SiteFlags): THROWS UsageError "FLAG '': expected ACCEPTED" as it is parsed.
CLI::Validator non_empty(std::string_view flag, std::string_view accepted);

void add_model_flags(CLI::App& command, ModelFlags& flags);
void add_cluster_flags(CLI::App& command, ClusterSpec& flags);  // --host included
void add_host_flag(CLI::App& command, ClusterSpec& flags);       // --host alone
void add_strategy_flags(CLI::App& command, StrategySpec& flags);

// THROW UsageError naming the flag, the value and what is accepted.
Profile load_model(const ModelFlags& flags);

}  // namespace weft::cli
