#include "runtime/measure/network_profile.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <set>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "runtime/comm/process_group.h"
#include "runtime/launch/launcher.h"
#include "runtime/launch/worker_env.h"
#include "units/files.h"

namespace weft::runtime {
namespace {

using Clock = std::chrono::steady_clock;
constexpr Bytes kGrowth = 4;  // sizes min, 4·min, 16·min, ..., max
constexpr int kRoundsRaced = 3;  // Note [Sizes in rounds]

// Note [Sizes in rounds]
// Rule: the repeats go in rounds, each timing every size, smallest first, so a
// size's median is over times spread across the whole measurement and a slow
// spell of a shared machine (seconds to minutes) shorter than half of it moves no
// median; timed one size after another, a spell would fall on whichever sizes
// were being timed. A round times each size as often as fits in one sum of the
// largest (times_in_a_round, decided by rank 0 after the warm-up round): a small
// sum is mostly the scheduling noise of shared cores, and with one per round its
// median, which picks all-gather or ring for compressed messages, was left to
// chance (BENCHMARKS.md "Compression"). Each size is
// summed by ring and, while it races, by all-gather right after (the two compared
// under the same conditions). The all-gather races at every size in the warm-up
// round and the first kRoundsRaced timed ones; after each round from then on it
// goes on racing only up to the first size it has lost on the medians so far
// (still_racing). Its times at large sizes, where it moves P−1 times the
// message, are few; and no size is dropped on one time (decided on the warm-up
// alone, a 1Gbit fit dropped 16 and 64 KiB, which the all-gather sums faster).
std::vector<Bytes> sizes(const NetworkProfileOptions& o) {
  std::vector<Bytes> out;
  for (Bytes n = o.min_bytes; n < o.max_bytes; n *= kGrowth) out.push_back(n);
  out.push_back(o.max_bytes);
  return out;
}

void report(const NetworkProfileOptions& options, int world, const std::vector<SumTimes>& timed) {
  const Bytes threshold = gather_below(timed);
  const std::vector<NetworkPoint> points = points_used(timed);
  const NetworkFit fit = fit_linear(points);
  nlohmann::json out{{"a_s", fit.a},
                     {"b_s_per_byte", fit.b},
                     {"bandwidth_Bps", 1 / fit.b},
                     {"workers", world},
                     {"r2", fit.r2},
                     {"max_relative_error", fit.max_relative_error},
                     {"gather_below_bytes", threshold},
                     {"points", nlohmann::json::array()}};
  fmt::print("summing among {} workers (medians over {} rounds): ring all-reduce, and all-gather while it is "
             "faster\n",
             world, options.repeats);
  fmt::print("{:>10} {:>12} {:>12} {:>12} {:>9}\n", "bytes", "all-reduce", "all-gather", "fitted", "error");
  for (std::size_t i = 0; i < timed.size(); ++i) {
    const SumTimes& t = timed[i];
    const NetworkPoint& p = points[i];
    const Seconds fitted = fit.a + fit.b * static_cast<double>(p.bytes);
    fmt::print("{:>10} {:>12} {:>12} {:>12} {:>8.1f}%\n", format_bytes(p.bytes), format_duration(t.allreduce),
               t.allgather ? format_duration(*t.allgather) : "-", format_duration(fitted),
               100 * (fitted - p.seconds) / p.seconds);
    nlohmann::json point{{"bytes", p.bytes}, {"seconds", p.seconds}, {"fitted_s", fitted},
                         {"allreduce_s", t.allreduce}};
    if (t.allgather) point["allgather_s"] = *t.allgather;
    out["points"].push_back(std::move(point));
  }
  fmt::print("messages up to {} are summed by all-gather (gather_below_bytes)\n",
             threshold == 0 ? std::string("0 B (none)") : format_bytes(threshold));
  fmt::print("T(n) = a + b*n: a = {}, b = {:.4g} s/B (all-reduce rate {}), R^2 = {:.5f}, max relative error "
             "{:.1f}%\n",
             format_duration(fit.a), fit.b, format_bandwidth(1 / fit.b), fit.r2, 100 * fit.max_relative_error);
  if (!options.out.empty()) {
    write_output("--out", options.out, out.dump(2) + "\n");
    fmt::print("fit written to {} (use it with --network {})\n", options.out.string(), options.out.string());
  }
}

// Rank 0's `values`, on every rank (the same count on each).
std::vector<std::int64_t> rank_0s(const Group& group, const std::vector<std::int64_t>& values) {
  std::vector<torch::Tensor> shared{torch::tensor(values)};
  group.collectives->broadcast(shared)->wait();
  const torch::Tensor& got = shared[0];
  return {got.data_ptr<std::int64_t>(), got.data_ptr<std::int64_t>() + got.numel()};
}

int measure(const NetworkProfileOptions& options, const WorkerEnv& env) {
  if (env.world < 2) {
    throw UsageError(fmt::format("weft profile --network: WORLD_SIZE = {}; an all-reduce needs at least 2 "
                                 "workers (--nproc 2 or more)",
                                 env.world));
  }
  torch::set_num_threads(1);
  Group group = connect(env, options.failure_timeout);
  // One sum of `n` bytes, by all-gather or by ring all-reduce, timed on this rank.
  auto time_sum = [&](Bytes n, bool gather) {
    const torch::Tensor buffer = torch::ones({std::max<Bytes>(1, n / 4)}, torch::kFloat32);
    // Start together, so that rank 0's clock measures the collective, not a
    // straggler's arrival.
    group.collectives->barrier()->wait();
    const auto start = Clock::now();
    Summing sum = start_sum(*group.collectives, buffer, gather ? n : 0);
    sum.done->wait();
    sum_of(sum.result);
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  // Note [Sizes in rounds].
  const std::vector<Bytes> all = sizes(options);
  std::vector<std::vector<Seconds>> ring(all.size()), gather(all.size());
  std::size_t racing = all.size();  // the smallest sizes, also summed by all-gather
  auto medians = [&] {
    std::vector<SumTimes> timed;
    for (std::size_t k = 0; k < all.size(); ++k) {
      SumTimes t{.bytes = all[k], .allreduce = median(ring[k])};
      if (k < racing) t.allgather = median(gather[k]);
      timed.push_back(t);
    }
    return timed;
  };
  std::vector<int> times(all.size(), 1);  // per size and round: the warm-up's once
  for (int round = 0; round <= options.repeats; ++round) {  // round 0: warm-up
    for (std::size_t k = 0; k < all.size(); ++k) {
      for (int i = 0; i < times[k]; ++i) {
        ring[k].push_back(time_sum(all[k], false));
        if (k < racing) gather[k].push_back(time_sum(all[k], true));
      }
    }
    if (round == 0) {
      // Rank 0's warm-up decides, for every rank (each must issue the same sums).
      // The faster way of each size: the very first sum also pays for warming up.
      std::vector<Seconds> warmup;
      for (std::size_t k = 0; k < all.size(); ++k) warmup.push_back(std::min(ring[k][0], gather[k][0]));
      const std::vector<int> mine = times_in_a_round(warmup);
      const std::vector<std::int64_t> decided = rank_0s(group, {mine.begin(), mine.end()});
      times.assign(decided.begin(), decided.end());
      for (auto& t : ring) t.clear();
      for (auto& t : gather) t.clear();
    } else if (round >= std::min(kRoundsRaced, options.repeats)) {
      // Rank 0's times decide, for every rank: all must go on issuing the same
      // collectives.
      racing = static_cast<std::size_t>(
          rank_0s(group, {static_cast<std::int64_t>(still_racing(medians(), racing))}).front());
    }
    if (group.rank == 0) {
      std::cerr << fmt::format("\rmeasuring all-reduces: {} sizes, round {}/{}", all.size(), round,
                               options.repeats)
                << (round == options.repeats ? "\n" : "") << std::flush;
    }
  }
  const std::vector<SumTimes> timed = medians();
  if (group.rank == 0) report(options, group.world, timed);
  group.collectives->barrier()->wait();  // rank 0 hosts the store: nobody leaves before it is done
  return 0;
}

}  // namespace

Bytes gather_below(const std::vector<SumTimes>& timed) {
  Bytes threshold = 0;
  for (const SumTimes& t : timed) {
    if (!t.allgather || !(*t.allgather < t.allreduce)) break;
    threshold = t.bytes;
  }
  return threshold;
}

std::vector<int> times_in_a_round(const std::vector<Seconds>& warmup) {
  std::vector<int> out;
  const Seconds largest = warmup.empty() ? 0 : warmup.back();
  for (const Seconds t : warmup) {
    const double fits = t > 0 ? largest / t : 1;
    out.push_back(static_cast<int>(std::clamp(std::floor(fits), 1.0, static_cast<double>(kMostTimesInARound))));
  }
  return out;
}

std::size_t still_racing(const std::vector<SumTimes>& medians, std::size_t racing) {
  std::size_t won = 0;
  while (won < medians.size() && medians[won].allgather && *medians[won].allgather < medians[won].allreduce) ++won;
  return std::min(racing, won + 1);
}

std::vector<NetworkPoint> points_used(const std::vector<SumTimes>& timed) {
  const Bytes threshold = gather_below(timed);
  std::vector<NetworkPoint> points;
  for (const SumTimes& t : timed) {
    const bool gathered = summed_by_allgather(t.bytes, threshold);
    points.push_back({.bytes = t.bytes, .seconds = gathered ? *t.allgather : t.allreduce});
  }
  return points;
}

NetworkFit fit_linear(const std::vector<NetworkPoint>& points) {
  std::set<Bytes> distinct;
  for (const NetworkPoint& p : points) {
    if (!(p.seconds > 0)) {
      throw std::invalid_argument(fmt::format("fit_linear: point ({} bytes, {} s) has no positive time", p.bytes,
                                              p.seconds));
    }
    distinct.insert(p.bytes);
  }
  if (distinct.size() < 2) {
    throw std::invalid_argument(fmt::format("fit_linear: {} distinct sizes; a line needs 2", distinct.size()));
  }
  double s = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const NetworkPoint& p : points) {
    const double w = 1 / (p.seconds * p.seconds);
    const double x = static_cast<double>(p.bytes);
    s += w;
    sx += w * x;
    sy += w * p.seconds;
    sxx += w * x * x;
    sxy += w * x * p.seconds;
  }
  NetworkFit fit;
  fit.b = (s * sxy - sx * sy) / (s * sxx - sx * sx);
  fit.a = (sy - fit.b * sx) / s;
  if (fit.a < 0) {
    fit.a = 0;
    fit.b = sxy / sxx;
  }
  double mean = 0;
  for (const NetworkPoint& p : points) mean += p.seconds;
  mean /= static_cast<double>(points.size());
  double residual = 0, total = 0;
  for (const NetworkPoint& p : points) {
    const double fitted = fit.a + fit.b * static_cast<double>(p.bytes);
    residual += (fitted - p.seconds) * (fitted - p.seconds);
    total += (p.seconds - mean) * (p.seconds - mean);
    fit.max_relative_error = std::max(fit.max_relative_error, std::abs(fitted - p.seconds) / p.seconds);
  }
  fit.r2 = total > 0 ? 1 - residual / total : 1;
  return fit;
}

void validate(const NetworkProfileOptions& o) {
  if (o.min_bytes < 4 || o.max_bytes < o.min_bytes) {
    throw UsageError(fmt::format("message sizes {}..{}: expected 4 <= min <= max bytes", o.min_bytes, o.max_bytes));
  }
  if (o.repeats < 1) throw UsageError(fmt::format("--repeats {}: expected an integer >= 1", o.repeats));
  if (o.nproc && *o.nproc < 2) {
    throw UsageError(fmt::format("--nproc {}: an all-reduce needs at least 2 workers", *o.nproc));
  }
  if (!(o.failure_timeout > 0)) {
    throw UsageError(fmt::format("--failure-timeout {}: expected a number of seconds > 0", o.failure_timeout));
  }
}

int run_network_profile(const NetworkProfileOptions& options) {
  validate(options);
  if (is_launched_worker()) return measure(options, read_worker_env());
  if (options.nproc) {
    return launch(
        {.nproc = *options.nproc, .failure_timeout = options.failure_timeout, .cores = options.cores});
  }
  if (has_worker_env()) return measure(options, read_worker_env());
  throw UsageError("weft profile --network: give --nproc K to measure K local workers (K >= 2), or run one "
                   "`weft profile --network` per host with MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE set");
}

}  // namespace weft::runtime
