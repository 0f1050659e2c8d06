// The local-SGD strategies: flsgd, plsgd, dreamddp, dreamddp-opt (docs/strategies.md §2, §4.3).
// See Note [The local-SGD objective] in local_sgd.h.

#include "schedulers/local_sgd.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "schedulers/message_time.h"
#include "schedulers/strategies.h"

namespace weft::local_sgd {

namespace {

constexpr Seconds kInfinity = std::numeric_limits<Seconds>::infinity();

// One step of the chain of Note [The local-SGD objective]: layer l's all-reduce
// starts after its own backward and after the previous one ends.
Seconds extend(const Costs& costs, Seconds end, int layer) {
  return std::max(costs.bp_end[static_cast<size_t>(layer)], end) +
         costs.comm[static_cast<size_t>(layer)];
}

// The time of an iteration whose communication ends at `end`.
Seconds time_given_end(const Costs& costs, Seconds end) {
  return costs.forward + std::max(costs.backward, end);
}

void require_period(int H, std::string_view function) {
  if (H < 1) throw std::logic_error(fmt::format("{}: H = {}, need H >= 1", function, H));
}

// Layers hi, hi−1, …, lo (empty when hi < lo).
std::vector<int> descending(int hi, int lo) {
  std::vector<int> layers;
  for (int l = hi; l >= lo; --l) layers.push_back(l);
  return layers;
}

// Contiguous sets from the number of layers in each, sets[0] starting at L−1.
LayerSets sets_from_counts(int layers, const std::vector<int>& counts) {
  LayerSets sets;
  int top = layers - 1;
  for (int count : counts) {
    sets.push_back(descending(top, top - count + 1));
    top -= count;
  }
  return sets;
}

// Seed 002 Algorithm 2 without its deep copies: a plan under construction is the
// number of layers in each set (sets are contiguous, filled output side first), so
// branching is assign-then-undo, and the objective of closed sets is carried along
// instead of being recomputed at each leaf.
class Dfs {
 public:
  Dfs(const Costs& costs, int H) : costs_(costs), H_(H), counts_(static_cast<size_t>(H), 0) {}

  DfsResult run() {
    solve(costs_.size() - 1, 0, 0.0, 0.0);
    return {sets_from_counts(costs_.size(), best_counts_), visited_};
  }

 private:
  // SOLVESUBPROBLEM(Ψ, l, h): layers l..0 are unassigned (0-based; the seed's
  // "l == 0" is l < 0 here); sets before h are closed, worth `closed` seconds; set h
  // holds counts_[h] layers whose communication ends at `end`.
  void solve(int l, int h, Seconds closed, Seconds end) {
    ++visited_;
    const int count = counts_[static_cast<size_t>(h)];
    if (l < 0) {  // every layer assigned; sets after h stay empty
      // Summed one iteration at a time, in order, as period_time does: equal plans
      // then compare equal to the last bit.
      Seconds total = closed + time_given_end(costs_, end);
      for (int rest = h + 1; rest < H_; ++rest) total += time_given_end(costs_, 0.0);
      offer(total);
      return;
    }
    if (h == H_ - 1) {  // the last iteration takes every remaining layer
      for (int i = l; i >= 0; --i) end = extend(costs_, end, i);
      counts_[static_cast<size_t>(h)] += l + 1;
      offer(closed + time_given_end(costs_, end));
      counts_[static_cast<size_t>(h)] -= l + 1;
      return;
    }
    const Seconds with_l = extend(costs_, end, l);
    if (count == 0 || with_l <= costs_.backward) {  // at least once; optimal hiding
      assign_and_solve(l, h, closed, with_l);
    } else if (end > costs_.backward) {  // delay overflow: L_h already outlasts the backward
      next_iteration(l, h, closed, end);
    } else {  // search: Ψ− (l assigned, at l−1, same h), then Ψ+ (l not assigned, h+1)
      assign_and_solve(l, h, closed, with_l);
      next_iteration(l, h, closed, end);
    }
  }

  void assign_and_solve(int l, int h, Seconds closed, Seconds end) {
    ++counts_[static_cast<size_t>(h)];
    solve(l - 1, h, closed, end);
    --counts_[static_cast<size_t>(h)];
  }

  void next_iteration(int l, int h, Seconds closed, Seconds end) {
    solve(l, h + 1, closed + time_given_end(costs_, end), 0.0);
  }

  // Seed 002 line 2 keeps the argmin of Ω; the first of equal plans wins.
  void offer(Seconds total) {
    if (total < best_) {
      best_ = total;
      best_counts_ = counts_;
    }
  }

  const Costs& costs_;
  const int H_;
  std::vector<int> counts_;
  std::vector<int> best_counts_;
  Seconds best_ = kInfinity;
  std::int64_t visited_ = 0;
};

// Calls visit(counts) for every way of writing `layers` as H ordered counts >= 0.
template <typename Visit>
void for_each_composition(int layers, int H, std::vector<int>& counts, Visit&& visit) {
  const size_t h = counts.size();
  if (static_cast<int>(h) == H - 1) {
    counts.push_back(layers);
    visit(counts);
    counts.pop_back();
    return;
  }
  for (int count = 0; count <= layers; ++count) {
    counts.push_back(count);
    for_each_composition(layers - count, H, counts, visit);
    counts.pop_back();
  }
}

}  // namespace

Costs costs_of(const Profile& profile, const Cluster& cluster, const Encoding& encoding, Reach reach) {
  Costs costs;
  costs.bp_end = backward_end_times(profile);
  costs.forward = profile.forward_time();
  costs.backward = costs.bp_end.empty() ? 0.0 : costs.bp_end.front();
  // Note [Plans price the encoded message] (message_time.h).
  const MessageTime message_time = collective_time(cluster, profile, encoding, reach);
  for (int l = 0; l < profile.size(); ++l) {
    // A layer without parameters sends nothing (partial_sync_schedule emits no op).
    const Bytes bytes = profile.layers[static_cast<size_t>(l)].bytes();
    costs.comm.push_back(bytes > 0 ? message_time(message_time.carried({.layer = l, .offset = 0, .length = bytes}))
                                   : 0.0);
  }
  return costs;
}

Seconds sync_end(const Costs& costs, std::span<const int> layers) {
  Seconds end = 0;
  for (int l : layers) end = extend(costs, end, l);
  return end;
}

Seconds iteration_time(const Costs& costs, std::span<const int> layers) {
  return time_given_end(costs, sync_end(costs, layers));
}

Seconds period_time(const Costs& costs, const LayerSets& sets) {
  Seconds total = 0;
  for (const std::vector<int>& set : sets) total += iteration_time(costs, set);
  return total;
}

LayerSets equal_number_partition(int layers, int H) {
  require_period(H, "equal_number_partition");
  std::vector<int> counts;
  for (int h = 0; h < H; ++h) counts.push_back(layers / H + (h < layers % H ? 1 : 0));
  return sets_from_counts(layers, counts);
}

DfsResult dreamddp_dfs(const Costs& costs, int H) {
  require_period(H, "dreamddp_dfs");
  return Dfs(costs, H).run();
}

// Note [A linear-time step of the dynamic programme]
// ---------------------------------------------------
// best_k(j), the least time of iterations 0..k−1 averaging layers L−1..j, is
// min over i >= j of best_{k−1}(i) + cost(i−1..j), cost of an empty set (i = j)
// included: O(L²) per k done directly. Two facts about one set's chain make each
// step O(L):
// - the chain of i−1..j only grows as j falls, and once it ends after the
//   backward B it grows by exactly c(j) per layer (every bp_end(j) <= B). Let o(i)
//   be the first j where it ends after B (−1 if never). For o(i) < j <= i the set
//   hides, cost F + B (as the empty set); for j <= o(i) the cost is
//   F + E(i−1..o(i)) + Q(j) − Q(o(i)), with Q(j) = Σ_{m >= j} c(m).
// - a longer set ends no earlier, so o(i) is non-decreasing in i.
// So the hidden candidates for j are the i in [j, t(j)] (t non-decreasing in j): a
// sliding-window minimum of best_{k−1}; the overflowing candidates, i with
// o(i) >= j, only grow as j falls: a running minimum of
// best_{k−1}(i) + F + E(i−1..o(i)) − Q(o(i)), plus Q(j). Finding o(i) walks each
// set's hidden prefix once, O(L²) in the worst case but outside the loop over k.
LayerSets optimal_partition(const Costs& costs, int H) {
  require_period(H, "optimal_partition");
  const int L = costs.size();
  const auto n = static_cast<size_t>(L + 1);
  const Seconds hidden_cost = time_given_end(costs, 0.0);  // F + B
  // Indexed by the boundary i = 0..L: the set starting at layer i−1.
  std::vector<int> overflow(n, -1);           // o(i)
  std::vector<Seconds> overflow_end(n, 0.0);  // E(i−1..o(i))
  for (int i = 1; i <= L; ++i) {
    Seconds end = 0;
    for (int j = i - 1; j >= 0; --j) {
      end = extend(costs, end, j);
      if (end > costs.backward) {
        overflow[static_cast<size_t>(i)] = j;
        overflow_end[static_cast<size_t>(i)] = end;
        break;
      }
    }
  }
  std::vector<Seconds> suffix(n, 0.0);  // Q
  for (int j = L - 1; j >= 0; --j) {
    suffix[static_cast<size_t>(j)] = suffix[static_cast<size_t>(j + 1)] + costs.comm[static_cast<size_t>(j)];
  }

  std::vector<Seconds> before(n, kInfinity), now(n);
  before[static_cast<size_t>(L)] = 0;
  // from[k·n + j]: the boundary i such that iteration k−1 averages i−1..j.
  std::vector<int> from(static_cast<size_t>(H + 1) * n, -1);
  std::vector<int> window(n);  // the sliding window: boundaries, increasing `before`
  for (int k = 1; k <= H; ++k) {
    int* parent = &from[static_cast<size_t>(k) * n];
    std::fill(now.begin(), now.end(), kInfinity);
    // Hidden (and empty) sets, j rising.
    size_t head = 0, tail = 0;
    for (int j = 0, next = 0; j <= L; ++j) {
      for (; next <= L && overflow[static_cast<size_t>(next)] < j; ++next) {
        const Seconds next_before = before[static_cast<size_t>(next)];
        while (tail > head && before[static_cast<size_t>(window[tail - 1])] >= next_before) --tail;
        window[tail++] = next;
      }
      while (window[head] < j) ++head;  // i = j is in the window: o(j) < j always
      const int i = window[head];
      now[static_cast<size_t>(j)] = before[static_cast<size_t>(i)] + hidden_cost;
      parent[j] = i;
    }
    // Overflowing sets, j falling.
    Seconds best_offset = kInfinity;
    int best_i = -1;
    for (int j = L - 1, next = L; j >= 0; --j) {
      for (; next >= 1 && overflow[static_cast<size_t>(next)] >= j; --next) {
        const auto i = static_cast<size_t>(next);
        const Seconds offset =
            before[i] + costs.forward + overflow_end[i] - suffix[static_cast<size_t>(overflow[i])];
        if (offset < best_offset) {
          best_offset = offset;
          best_i = next;
        }
      }
      const Seconds total = best_offset + suffix[static_cast<size_t>(j)];
      if (best_i >= 0 && total < now[static_cast<size_t>(j)]) {
        now[static_cast<size_t>(j)] = total;
        parent[j] = best_i;
      }
    }
    std::swap(before, now);
  }
  std::vector<int> counts(static_cast<size_t>(H));
  for (int k = H, j = 0; k >= 1; --k) {
    const int i = from[static_cast<size_t>(k) * n + static_cast<size_t>(j)];
    if (i < j) throw std::logic_error(fmt::format("optimal_partition: no parent at k={} j={}", k, j));
    counts[static_cast<size_t>(k - 1)] = i - j;
    j = i;
  }
  return sets_from_counts(L, counts);
}

LayerSets brute_force_partition(const Costs& costs, int H) {
  require_period(H, "brute_force_partition");
  const int L = costs.size();
  LayerSets best_sets;
  Seconds best = kInfinity;
  std::vector<int> counts;
  for_each_composition(L, H, counts, [&](const std::vector<int>& c) {
    LayerSets sets = sets_from_counts(L, c);
    const Seconds total = period_time(costs, sets);
    if (total < best) {
      best = total;
      best_sets = std::move(sets);
    }
  });
  return best_sets;
}

LayerSets fill_bubbles(const Costs& costs, const LayerSets& sets) {
  LayerSets filled;
  for (const std::vector<int>& set : sets) {
    const Seconds limit = iteration_time(costs, set);
    std::vector<int> added;
    Seconds added_end = 0;  // the chain of the added layers, which go first
    for (int l = costs.size() - 1; l >= 0; --l) {
      if (std::find(set.begin(), set.end(), l) != set.end()) break;  // Eq. 12: disjoint
      const Seconds with_l = extend(costs, added_end, l);
      Seconds end = with_l;
      for (int s : set) end = extend(costs, end, s);
      // Adding layers never shortens the chain, so the first that grows the
      // iteration ends the filling.
      if (time_given_end(costs, end) > limit) break;
      added.push_back(l);
      added_end = with_l;
    }
    filled.push_back(std::move(added));
  }
  return filled;
}

LayerSets merged(const LayerSets& sets, const LayerSets& filled) {
  if (sets.size() != filled.size()) {
    throw std::logic_error(fmt::format("merged: {} sets but {} filled", sets.size(), filled.size()));
  }
  LayerSets all(sets.size());
  for (size_t h = 0; h < sets.size(); ++h) {
    all[h] = filled[h];
    all[h].insert(all[h].end(), sets[h].begin(), sets[h].end());
    std::sort(all[h].begin(), all[h].end(), std::greater<>());
  }
  return all;
}

Schedule partial_sync_schedule(std::string_view strategy, const Profile& profile,
                               const LayerSets& sets, const LayerSets& filled) {
  if (sets.empty()) throw std::logic_error("partial_sync_schedule: no iterations");
  const LayerSets all = merged(sets, filled);
  Schedule schedule;
  schedule.strategy = std::string(strategy);
  schedule.period = static_cast<int>(sets.size());
  schedule.dispatch.kind = DispatchPolicy::Kind::kInOrder;
  for (const std::vector<int>& layers : all) {
    std::vector<CommOp>& ops = schedule.iterations.emplace_back();
    for (int l : layers) {
      const Bytes bytes = profile.layers.at(static_cast<size_t>(l)).bytes();
      if (bytes == 0) continue;
      CommOp op;
      op.chunks = {Chunk{.layer = l, .offset = 0, .length = bytes}};
      op.kind = OpKind::kAverageParameters;
      op.ready_after = l;
      op.priority = static_cast<int>(ops.size());
      op.needed_by = kBarrier;
      ops.push_back(std::move(op));
    }
  }
  schedule.options_json =
      nlohmann::json{{"H", schedule.period}, {"sets", sets}, {"filled", filled}}.dump();
  return schedule;
}

}  // namespace weft::local_sgd

namespace weft {

using local_sgd::LayerSets;

namespace {

void require_valid_H(const StrategyOptions& options, std::string_view strategy) {
  if (options.H < 1) {
    throw UsageError(fmt::format(
        "--H: {} is not a valid local SGD period for {}; accepted: an integer >= 1 "
        "(iterations per period; 1 averages every layer every iteration)",
        options.H, strategy));
  }
}

}  // namespace

Schedule make_flsgd(const Profile& profile, const Cluster& cluster,
                    const StrategyOptions& options) {
  require_valid_H(options, "flsgd");
  // The whole model in one all-reduce after the last backward of the period.
  CommOp op;
  op.kind = OpKind::kAverageParameters;
  op.ready_after = 0;
  op.needed_by = kBarrier;
  for (int l = profile.size() - 1; l >= 0; --l) {
    const Bytes bytes = profile.layers[static_cast<size_t>(l)].bytes();
    if (bytes > 0) op.chunks.push_back(Chunk{.layer = l, .offset = 0, .length = bytes});
  }
  Schedule schedule;
  schedule.strategy = "flsgd";
  schedule.period = options.H;
  schedule.dispatch.kind = DispatchPolicy::Kind::kInOrder;
  schedule.iterations.resize(static_cast<size_t>(options.H));
  if (!op.chunks.empty()) schedule.iterations.back().push_back(std::move(op));
  LayerSets sets(static_cast<size_t>(options.H));
  sets.back() = local_sgd::equal_number_partition(profile.size(), 1).front();
  schedule.options_json = nlohmann::json{{"H", options.H}, {"sets", sets}}.dump();
  return schedule;
}

Schedule make_plsgd(const Profile& profile, const Cluster& cluster,
                    const StrategyOptions& options) {
  require_valid_H(options, "plsgd");
  const LayerSets sets = local_sgd::equal_number_partition(profile.size(), options.H);
  return local_sgd::partial_sync_schedule("plsgd", profile, sets, LayerSets(sets.size()));
}

Schedule make_dreamddp(const Profile& profile, const Cluster& cluster,
                       const StrategyOptions& options) {
  require_valid_H(options, "dreamddp");
  const local_sgd::Costs costs = local_sgd::costs_of(profile, cluster, options.compression, averaging_reach(options));
  const LayerSets sets = local_sgd::dreamddp_dfs(costs, options.H).sets;
  return local_sgd::partial_sync_schedule("dreamddp", profile, sets,
                                          local_sgd::fill_bubbles(costs, sets));
}

Schedule make_dreamddp_opt(const Profile& profile, const Cluster& cluster,
                           const StrategyOptions& options) {
  require_valid_H(options, "dreamddp-opt");
  const local_sgd::Costs costs = local_sgd::costs_of(profile, cluster, options.compression, averaging_reach(options));
  const LayerSets sets = local_sgd::optimal_partition(costs, options.H);
  return local_sgd::partial_sync_schedule("dreamddp-opt", profile, sets,
                                          local_sgd::fill_bubbles(costs, sets));
}

}  // namespace weft
