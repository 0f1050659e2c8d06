// Planning of the local-SGD strategies (docs/strategies.md §2, §4.3): which layers' parameters
// are averaged in which iteration of a period of H iterations, for `flsgd`,
// `plsgd`, `dreamddp` (seed 002, Algorithm 2) and `dreamddp-opt` (ours).
//
// The make_* functions (declared in strategies.h) turn these plans into Schedules;
// the pieces are free functions here so that tests and benchmarks can reach the
// objective, the DFS, the dynamic programme, the brute-force oracle and the bubble
// filling one by one.
//
// Note [The local-SGD objective]
// ------------------------------
// In iteration h of the period the set S_h of layers is averaged. Each layer's
// all-reduce (kAverageParameters) starts after its own backward and after the
// previous all-reduce of the set: one channel, layers in backward order. The next
// forward waits for all of them (needed_by = kBarrier, as in the paper: parameters
// are averaged in place, so a forward may not read a layer being averaged). So an
// iteration never overlaps the communication of the one before, and its time is
//
//   iteration(S_h) = F + max(B, E(S_h)),
//   E(S) = end of the chain: e ← max(bp_end(l), e) + c(l) for l in S, descending,
//
// with F, B the whole forward and backward, bp_end(l) the end of layer l's backward
// from the start of the backward pass, and c(l) the time of layer l's all-reduce
// (collective_time: its lateness and its time on the channel, Note [A
// collective's lateness in plans] in message_time.h; 0 for a layer without
// parameters, which sends nothing).
// This is seed 002's Eq. 7/8 term t_BP^{L_1:h-1} + t_BP^{h0} + max(t_BP^{L_h:H} −
// t_BP^{h0}, t_COMM^{L_h}) with the forward added. The objective of a plan is the
// period time, the sum over h; the simulator measures exactly H × its mean
// iteration time for the schedule built from the same sets (tested) on a profile
// without lateness, and about that with it (the plan charges every collective
// its lateness during the backward).
//
// The term of a set depends on the set only, not on h, and splitting a contiguous
// set never increases the sum (the input-side part overhangs the backward by at
// most its own communication time, which the merged set pays in full), so empty
// sets — allowed when H > L — never make a plan better, only equal.
//
// Note [The DFS prunings are exact]
// ---------------------------------
// The seed calls pruning 2 (delay overflow) a heuristic, but under this objective
// all three prunings keep an optimal plan in the search: (1) a layer l that joins
// L_h hidden costs nothing there and leaving it out only delays L_{h+1}'s chain;
// (3) an empty L_h equals the same plan with its sets shifted one iteration (terms
// do not depend on h); (2) when L_h already ends after the backward, l would add
// exactly c(l) to it, while at the front of L_{h+1} it delays that chain by at most
// c(l) (the next layers' backwards end after l's). So dreamddp and dreamddp-opt
// reach the same period time (tested on random cases and the zoo); what the DP adds
// is the guarantee: polynomial time where the DFS visits up to ~2^H nodes.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "cost/cluster.h"
#include "profile/profile.h"
#include "schedule/schedule.h"

namespace weft::local_sgd {

// The per-layer times the planning reads (Note [The local-SGD objective]).
struct Costs {
  std::vector<Seconds> bp_end;  // per layer: end of its backward, from the backward start
  std::vector<Seconds> comm;    // per layer: its parameters' all-reduce (collective_time), encoded
  Seconds forward = 0;          // F: the whole forward pass
  Seconds backward = 0;         // B: the whole backward pass (= bp_end[0])

  int size() const { return static_cast<int>(comm.size()); }
};

// Each layer's all-reduce priced in `encoding` (Note [Plans price the encoded
// message] in message_time.h), averaged over `reach`. REQUIRES: a validated
// profile and cluster.
Costs costs_of(const Profile& profile, const Cluster& cluster, const Encoding& encoding = {},
               Reach reach = Reach::kAll);

// sets[h]: the layers averaged in iteration h of the period (h = 0..H−1), each in
// backward order (descending index). A plan's sets are contiguous and partition
// 0..L−1, sets[0] holding the output-side layers; bubble filling adds to them.
using LayerSets = std::vector<std::vector<int>>;

// E(S) of Note [The local-SGD objective]; 0 for an empty set.
// REQUIRES: `layers` in descending order, each in 0..costs.size()−1.
Seconds sync_end(const Costs& costs, std::span<const int> layers);
// F + max(B, E(S)).
Seconds iteration_time(const Costs& costs, std::span<const int> layers);
// The objective: the sum of iteration_time over the period.
Seconds period_time(const Costs& costs, const LayerSets& sets);

// `layers` split into H contiguous groups of equal count (the first L mod H groups,
// output side, one larger), group h averaged in iteration h (plsgd; seed 002
// Example 1). Groups are empty when H > L. REQUIRES: layers >= 0, H >= 1.
LayerSets equal_number_partition(int layers, int H);

struct DfsResult {
  LayerSets sets;
  std::int64_t visited_nodes = 0;  // calls of SOLVESUBPROBLEM, the search's size
};

// Seed 002 Algorithm 2 (with docs/strategies.md §4.3's fix of its branch): walks layers L−1→0
// and iterations 0→H−1; assigns a layer to an empty set (at least once) or when its
// communication stays hidden (optimal hiding), moves on when the set already
// overflows the backward (delay overflow), otherwise tries both; the last
// iteration takes every remaining layer. Returns the best plan found (the first of
// equal ones). REQUIRES: H >= 1.
DfsResult dreamddp_dfs(const Costs& costs, int H);

// The exact minimum of period_time over contiguous plans (sets[0] output side,
// sets possibly empty), by dynamic programming over (iteration, boundary layer):
// O(H·L) time per the chain structure, plus O(L·hidden set length) <= O(L²) once;
// O(H·L) memory (Note [A linear-time step of the dynamic programme] in the .cc).
// REQUIRES: H >= 1.
LayerSets optimal_partition(const Costs& costs, int H);

// The same minimum by enumerating all C(L+H−1, H−1) contiguous plans: an oracle for
// tests. REQUIRES: H >= 1 and a small L (L = 12, H = 4 is 455 plans).
LayerSets brute_force_partition(const Costs& costs, int H);

// Bubble filling (seed 002 §3.4, Eq. 12): for each iteration h, the output-side
// layers L−1, L−2, … not in sets[h] that can be added to it without increasing
// iteration_time, stopping at the first that would (or at the first in sets[h]).
// Returns the additions per iteration, descending; sets itself is unchanged.
LayerSets fill_bubbles(const Costs& costs, const LayerSets& sets);

// sets[h] ∪ filled[h] per iteration, descending. REQUIRES: equal sizes.
LayerSets merged(const LayerSets& sets, const LayerSets& filled);

// The schedule averaging sets[h] ∪ filled[h] in iteration h: one kAverageParameters
// operation per layer that has bytes, ready after its own backward, in backward
// order, dispatched in order, needed by the barrier. options_json is
// {"H": H, "sets": sets, "filled": filled}. REQUIRES: sets.size() == filled.size()
// >= 1, every layer in exactly one sets[h].
Schedule partial_sync_schedule(std::string_view strategy, const Profile& profile,
                               const LayerSets& sets, const LayerSets& filled);

}  // namespace weft::local_sgd
