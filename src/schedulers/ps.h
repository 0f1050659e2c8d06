// Planning of the parameter-server strategies `ps` and `ps-interleaved` (docs/strategies.md §2,
// §4.4; seed 000): which layers travel together (fused groups), which server holds
// each group, in which iteration of the period a group is synchronised
// (inter-iteration interleaving) and when each worker pushes it (intra-iteration
// slots, seed Algorithm 1).
//
// The make_* functions (declared in strategies.h) turn these pieces into
// Schedules; the pieces are free functions here so that tests can check each one.
//
// Note [Fusing layers for the parameter server]
// ---------------------------------------------
// docs/strategies.md §4.4 allows the merged-gradient rule of mgwfbp or a size threshold. We use a
// size threshold: walking the layers with bytes in backward order, a group closes
// as soon as it holds at least total_bytes / kTargetGroups (ddp_buckets in
// schedulers/sync.h with both caps equal), so there are at most kTargetGroups
// groups, a layer larger than the threshold is a group alone and the last group
// (input side) takes the remainder. The merged-gradient rule (optimal_merge) is the
// wrong objective here: it minimises the end of one-at-a-time messages, and in the
// network-bound regime that PS interleaving targets it merges nearly everything,
// leaving nothing to interleave (with a message time 2α + 2·P·n/B for the push and
// pull through one server: resnet50, 8 workers, 1 Gbit, 50 us gives 2 groups, the
// fc layer and the rest; gpt2 gives 3 or 4). Interleaving needs several groups per
// period T: with at most 16, resnet50 gets 12 and gpt2 10, so T = 3..5 leaves 2 to
// 4 groups per iteration. Both strategies use the same groups, so comparing them
// isolates the interleaving.
//
// Note [What the server does]
// ---------------------------
// A kParameterServer operation is push, server update, pull (schedule.h). The
// schedule says which update through Schedule::easgd:
// - easgd == {0, 0} (`ps`): the workers push gradients; the server averages the P
//   gradients of the group and applies the optimizer step (synchronous PS); the
//   workers pull the new parameters. β = 0 would be a centre that never moves, so
//   it cannot be mistaken for an EASGD setting.
// - easgd.beta > 0 (`ps-interleaved`): the workers take their local step
//   w_k ← w_k − η·g_k and push w_k; once the server holds all P copies it sets
//   w̃ ← (1−β)·w̃ + β·mean_k(w_k); the workers pull w̃ and apply the elastic term
//   w_k ← w_k − α·(w_k − w̃) before the group's next forward (docs/strategies.md §4.4; the
//   runtime's side is in runtime/comm/parameter_server.h).
//
// Note [Release offsets from Algorithm 1]
// ---------------------------------------
// Algorithm 1 gives group idx the window [cur, next) (times from the start of the
// backward pass) and worker p the start cur + p·s[idx], s[idx] = (next − cur)/P.
// A CommOp is ready when the backward of its smallest layer ends, bp_end(lo(idx));
// the next layer to run backward is the first of group idx+1, so that instant is
// τ_g[idx+1] = cur, or end_comp = bp_end(0) = cur for the last group, whenever the
// layers between groups carry bytes (every zoo model). Layers without parameters
// are in no group; one of them between two groups makes cur later than ready by its
// backward time. Either way release_offset[p] = (cur − ready) + p·s[idx] >= 0
// puts worker p exactly at cur + p·s[idx].
//
// A consequence of Algorithm 1 as docs/strategies.md §4.4 states it: the last group (idx = N−1) has
// cur = end_comp and, having no group idx+1+T, next = end_comp + 0.5·(end_comp −
// cur) = end_comp, so s[N−1] = 0 and all P workers push it at once. That is also
// what its deadline asks: group N−1 holds layer 0, whose forward is the first
// thing the next iteration does, so it has no slack to stagger into. The schedule
// therefore does not stagger it (the server's answers, which leave one after
// another, do: Note [Parameter-server transport] in sim/simulator.cc); what
// interleaving lowers is the volume per iteration and the concurrency of the
// other groups.
//
// Thread-safety: pure functions.
#pragma once

#include <vector>

#include "profile/profile.h"
#include "schedulers/sync.h"

namespace weft::ps {

// Upper bound on the number of fused groups (Note [Fusing layers for the
// parameter server]).
inline constexpr int kTargetGroups = 16;

// The fused groups, in backward order: group 0 holds the output layer; each group
// lists its layers in backward order (descending). Every layer with bytes is in
// exactly one group; layers without bytes are in none. At most `target_groups`
// groups (empty for a model without bytes).
// REQUIRES target_groups >= 1 (THROWS std::logic_error otherwise).
LayerGroups fuse_layers(const Profile& profile, int target_groups = kTargetGroups);

// The bytes of each group.
std::vector<Bytes> group_bytes(const Profile& profile, const LayerGroups& groups);

// server[idx] for each group: longest-processing-time greedy, largest group first
// onto the least-loaded server (ties: lower server id, then lower group index), so
// the bytes per server differ by at most the largest group. Deterministic.
// REQUIRES servers >= 1 (THROWS std::logic_error otherwise).
std::vector<int> assign_servers(const std::vector<Bytes>& bytes, int servers);

// Inter-iteration interleaving (docs/strategies.md §4.4): group idx is synchronised in global
// iteration t (0-based) iff idx mod T == t mod T.
// REQUIRES T >= 1, idx >= 0, t >= 0.
bool communicates(int idx, int t, int T);

// The groups synchronised in global iteration t, ascending.
std::vector<int> groups_in_iteration(int groups, int t, int T);

// Algorithm 1 of seed 000 as docs/strategies.md §4.4 states it; times in seconds from the start
// of the backward pass.
struct Slots {
  std::vector<Seconds> group_start;  // τ_g[idx]: backward start of group idx's first layer
  Seconds end_comp = 0;              // end of the backward pass
  std::vector<Seconds> cur;          // start of group idx's window
  std::vector<Seconds> next;         // end of group idx's window
  std::vector<Seconds> slot;         // s[idx] = (next − cur) / P
};

// REQUIRES groups as fuse_layers returns them for `profile`, T >= 1, workers >= 1
// (THROWS std::logic_error otherwise).
Slots allocate_slots(const Profile& profile, const LayerGroups& groups, int T, int workers);

// The per-worker release offsets of group idx's operation (Note [Release offsets
// from Algorithm 1]): worker p leaves at slots.cur[idx] + p·slots.slot[idx].
std::vector<Seconds> release_offsets(const Profile& profile, const LayerGroups& groups,
                                     const Slots& slots, int idx, int workers);

}  // namespace weft::ps
