// ByteScheduler (Peng et al., SOSP'19) for all-reduce, docs/strategies.md §2: blocks of S_p bytes
// sent by priority, at most a credit C of bytes in flight, each layer's next forward
// waiting only for its own blocks.

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "schedulers/blocks.h"
#include "schedulers/strategies.h"

namespace weft {

Schedule make_bytescheduler(const Profile& profile, const Cluster& cluster,
                            const StrategyOptions& options) {
  const Bytes partition = options.partition.value_or(kDefaultPartition);
  const Bytes credit = options.credit.value_or(kDefaultCredit);
  if (credit <= 0) {
    throw UsageError(fmt::format(
        "credit C (--credit): {} bytes; need a size > 0 (e.g. 16MiB)", credit));
  }
  Schedule schedule;
  schedule.strategy = "bytescheduler";
  schedule.period = 1;
  schedule.iterations = {block_ops(partition_blocks(profile, partition))};
  schedule.dispatch = {.kind = DispatchPolicy::Kind::kCredit, .credit = credit};
  schedule.options_json = nlohmann::json{{"partition_B", partition}, {"credit_B", credit}}.dump();
  return schedule;
}

}  // namespace weft
