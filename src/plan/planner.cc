#include "plan/planner.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "plan/tuning.h"
#include "sim/simulator.h"

namespace weft {
namespace {

std::vector<const StrategyInfo*> selected(const Cluster& cluster, const PlanOptions& options) {
  std::vector<const StrategyInfo*> out;
  if (options.strategies.empty()) {
    for (const StrategyInfo& info : strategies()) {
      if (info.arch == cluster.arch) out.push_back(&info);
    }
    return out;
  }
  for (const std::string& name : options.strategies) {
    const StrategyInfo& info = find_strategy(name);
    if (info.arch != cluster.arch) {
      std::string fitting;
      for (const StrategyInfo& other : strategies()) {
        if (other.arch == cluster.arch) fitting += (fitting.empty() ? "" : ", ") + std::string(other.name);
      }
      throw UsageError(fmt::format("--strategy {} runs on --arch {}, not {}; for --arch {} use: {}",
                                   name, to_string(info.arch), to_string(cluster.arch),
                                   to_string(cluster.arch), fitting));
    }
    out.push_back(&info);
  }
  return out;
}

PlannedStrategy evaluate(const StrategyInfo& info, const Profile& profile, const Cluster& cluster,
                         const PlanOptions& options) {
  const StrategyOptions chosen =
      options.tune ? tune(info, profile, cluster, options.strategy) : options.strategy;
  PlannedStrategy out;
  out.name = std::string(info.name);
  out.compression = chosen.compression;
  out.schedule = info.make(profile, cluster, chosen);
  out.timeline = simulate(out.schedule, profile, cluster, {.record_iterations = options.record_iterations});
  return out;
}

// Note [Costed only with shapes]
// ------------------------------
// A low-rank codec's bytes depend on each tensor's shape (Note [Which tensors
// PowerSGD factorises], schedule/encoding.h). A profile whose layers do not all
// give their shapes cannot cost it: such rows are left out and listed with the
// reason, rather than shown with fp16's or float32's figures under the codec's
// name. Profiles from `weft profile`, weft.profile and the zoo give shapes.
std::string shapeless_reason(const Profile& profile) {
  std::vector<std::string> names;
  for (const Layer& layer : profile.layers) {
    if (layer.params > 0 && layer.shapes.empty()) names.push_back(layer.name);
  }
  if (names.empty()) return "";
  return fmt::format("the profile gives no tensor shapes for {} of its {} layers (e.g. {}), and a low-rank codec's "
                     "bytes depend on them; profile the model with `weft profile` or weft.profile(), which record them",
                     names.size(), profile.layers.size(), names.front());
}

}  // namespace

Plan plan(const Profile& profile, const Cluster& cluster, const PlanOptions& options) {
  validate(profile);
  validate(cluster);
  Plan result;
  result.model = profile.model;
  result.cluster = cluster;

  // The reference is WFBP all-reduce on the same workers and links, whatever the
  // architecture under study (seed 000 compares PS against it too).
  Cluster reference = cluster;
  reference.arch = Arch::kAllReduce;
  const StrategyInfo& wfbp = find_strategy("wfbp");
  // The reference is uncompressed: "vs wfbp" then shows what a codec gains.
  StrategyOptions uncompressed = options.strategy;
  uncompressed.compression = {};
  result.wfbp_iteration =
      simulate(wfbp.make(profile, reference, uncompressed), profile, reference).summary.iteration;

  const std::vector<Encoding> compressions =
      options.compressions.empty() ? std::vector<Encoding>{options.strategy.compression} : options.compressions;
  const std::string shapeless = shapeless_reason(profile);
  for (const StrategyInfo* info : selected(cluster, options)) {
    std::vector<Encoding> encodings = compressions;
    // Parameter servers exchange element-wise encodings only (schedulers/ps.cc
    // says why): among others they are planned with those of the list, or
    // uncompressed if none is; named alone with a low-rank codec, they are refused.
    const bool named = !options.strategies.empty() && options.compressions.empty();
    if (info->family == Family::kParameterServer && !named) encodings = exchange_encodings(encodings);
    for (const Encoding& encoding : encodings) {
      if (low_rank(encoding) && !shapeless.empty()) {  // Note [Costed only with shapes]
        result.uncosted.push_back({.label = fmt::format("{}+{}", info->name, to_string(encoding)), .why = shapeless});
        continue;
      }
      PlanOptions with = options;
      with.strategy.compression = encoding;
      PlannedStrategy row = evaluate(*info, profile, cluster, with);
      row.speedup_vs_wfbp = result.wfbp_iteration / row.timeline.summary.iteration;
      const bool seen = std::any_of(result.strategies.begin(), result.strategies.end(), [&](const auto& s) {
        return s.name == row.name && s.compression == row.compression;
      });
      if (!seen) result.strategies.push_back(std::move(row));
    }
  }
  if (result.strategies.empty() && !result.uncosted.empty()) {
    throw UsageError(fmt::format("cannot plan {}: {}", result.uncosted.front().label, shapeless));
  }
  const auto best = std::min_element(
      result.strategies.begin(), result.strategies.end(), [](const auto& a, const auto& b) {
        return a.timeline.summary.iteration < b.timeline.summary.iteration;
      });
  if (best != result.strategies.end()) {
    result.recommended = best->name;
    result.recommended_compression = best->compression;
  }
  return result;
}

std::string plan_json(const Plan& plan) {
  nlohmann::json j;
  j["model"] = plan.model;
  j["workers"] = plan.cluster.workers;
  j["bandwidth_Bps"] = plan.cluster.bandwidth;
  j["latency_s"] = plan.cluster.latency;
  j["arch"] = to_string(plan.cluster.arch);
  if (plan.cluster.arch == Arch::kParameterServer) {
    j["servers"] = plan.cluster.servers;
    j["server_bandwidth_Bps"] =
        plan.cluster.server_bandwidth > 0 ? plan.cluster.server_bandwidth : plan.cluster.bandwidth;
  }
  if (plan.cluster.fitted) {
    j["fitted"] = {{"a_s", plan.cluster.fitted->a}, {"b_s_per_byte", plan.cluster.fitted->b}};
  }
  auto& rows = j["strategies"] = nlohmann::json::array();
  for (const PlannedStrategy& s : plan.strategies) {
    const Summary& sum = s.timeline.summary;
    nlohmann::json row = {{"name", s.name},
                          {"period", s.schedule.period},
                          {"iteration_s", sum.iteration},
                          {"compute_s", sum.compute},
                          {"slowed_compute_s", sum.slowed_compute},
                          {"exposed_comm_s", sum.exposed_comm},
                          {"speedup_vs_wfbp", s.speedup_vs_wfbp},
                          {"options", nlohmann::json::parse(s.schedule.options_json.empty()
                                                                ? "{}"
                                                                : s.schedule.options_json)}};
    if (lossy(s.compression)) row["compression"] = to_string(s.compression);
    if (plan.cluster.arch == Arch::kParameterServer) {
      row["peak_server_incast"] = sum.peak_server_incast;
      row["server_busy"] = sum.server_busy;
    }
    rows.push_back(std::move(row));
  }
  j["recommended"] = plan.recommended;
  if (!plan.uncosted.empty()) {
    auto& uncosted = j["uncosted"] = nlohmann::json::array();
    for (const Uncosted& u : plan.uncosted) uncosted.push_back({{"label", u.label}, {"why", u.why}});
  }
  if (lossy(plan.recommended_compression)) j["recommended_compression"] = to_string(plan.recommended_compression);
  return j.dump(2);
}

}  // namespace weft
