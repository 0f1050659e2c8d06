// Tuning: the search, with the simulator, for a strategy's free parameters (the
// partition size S_p of bytescheduler and dcredit, and bytescheduler's credit C).
//
// Schedulers are pure functions of fixed options and never call the simulator
// (schedulers/strategies.h); searching lives here, in the planner, which calls
// tune() for every strategy before it builds and simulates the schedule. What was
// chosen is then visible in the schedule's options_json (partition_B, credit_B,
// windows), which `weft plan` prints. See Note [Tuning by grid] in tuning.cc.
//
// Thread-safety: tune() is a pure function.
#pragma once

#include <vector>

#include "cost/cluster.h"
#include "profile/profile.h"
#include "schedulers/strategies.h"
#include "units/units.h"

namespace weft {

// The options to run `strategy` with: `base`, with every parameter the strategy
// reads and the user left unset (base.partition, base.credit) replaced by the
// value whose schedule the simulator finds fastest (steady-state iteration time),
// in base.compression: a codec's S_p is tuned for its encoded messages (a
// low-rank codec factorises only the tensors that lie inside one block).
// A parameter the user set is kept as given; a strategy with nothing to tune gets
// `base` back unchanged. Ties keep the default (kDefaultPartition, kDefaultCredit).
// REQUIRES profile and cluster valid (validate()); THROWS what the strategy's
// scheduler throws for invalid user-set options.
StrategyOptions tune(const StrategyInfo& strategy, const Profile& profile, const Cluster& cluster,
                     StrategyOptions base);

// The partition sizes tune() tries for `profile`: powers of two from 64 KiB up to
// the first one that holds the largest layer in one block (every larger S_p gives
// the same blocks), leaving out those that cut the model into more than 1024
// blocks. Never empty: kDefaultPartition is always among them.
std::vector<Bytes> partition_candidates(const Profile& profile);

// The credits tune() tries with partition `partition`: S_p·2^k from one block in
// flight up to the first that lets the whole model be in flight at once.
std::vector<Bytes> credit_candidates(const Profile& profile, Bytes partition);

}  // namespace weft
