#include "runtime/train/worker.h"

#include <set>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "plan/tuning.h"
#include "runtime/comm/engine.h"
#include "runtime/model/optimizer.h"
#include "runtime/train/measured_trace.h"
#include "schedulers/strategies.h"
#include "sim/simulator.h"

namespace weft::runtime {

SharedPlan share_plan(const Group& group, const JobOptions& job, int workers, const Rank0Plan& rank0) {
  using json = nlohmann::json;
  const StrategyInfo& info = find_strategy(job.strategy);
  const json message = json::parse(decided_by_rank0(group, "weft/plan", [&] {
    auto [profile, extra] = rank0();
    const StrategyOptions tuned = tune(info, profile, cluster_of(job, workers), job.strategy_options);
    json decided{{"profile", to_json(profile)}, {"extra", extra}};
    if (tuned.partition) decided["partition_B"] = *tuned.partition;
    if (tuned.credit) decided["credit_B"] = *tuned.credit;
    return decided.dump();
  }, "rank 0 could not build the schedule"));
  SharedPlan plan{.profile = parse_profile(message["profile"].get<std::string>(), "rank 0's profile"),
                  .strategy = job.strategy_options,
                  .extra = message["extra"].get<std::string>()};
  if (message.contains("partition_B")) plan.strategy.partition = message["partition_B"].get<Bytes>();
  if (message.contains("credit_B")) plan.strategy.credit = message["credit_B"].get<Bytes>();
  const Cluster cluster = cluster_of(job, workers);
  plan.schedule = info.make(plan.profile, cluster, plan.strategy);
  validate(plan.schedule, plan.profile, workers);
  plan.gather_below = cluster.fitted ? cluster.fitted->gather_below : 0;
  return plan;
}

std::optional<std::string> write_trace(const Group& group, int ranks, int workers, const SharedPlan* plan,
                                       const JobOptions& job, Recorder& recorder, std::int64_t trained,
                                       std::string_view flag, const std::filesystem::path& file) {
  std::optional<Timeline> predicted;
  if (group.rank == 0) {
    predicted = simulate(plan->schedule, plan->profile, cluster_of(job, workers),
                         {.record_iterations = recorder.iterations()});
  }
  const std::optional<Summary> summary = write_measured_trace(group, ranks, workers, job.strategy, recorder, trained,
                                                              flag, file, predicted ? &*predicted : nullptr);
  if (!summary) return std::nullopt;
  return summary_json(*summary, predicted->summary);
}

std::unique_ptr<OuterOptimizer> make_outer(const JobOptions& job,
                                           const std::vector<std::vector<torch::Tensor>>& layers, bool steps) {
  if (!job.outer.enabled() || !steps) return nullptr;
  return std::make_unique<OuterOptimizer>(layers, outer_step(job.outer));
}

const std::string kServerEntries = kEngineEntries + std::string(to_string(OpKind::kParameterServer)) + "/";

std::map<std::string, torch::Tensor> entries_under(const std::map<std::string, torch::Tensor>& state,
                                                   const std::string& prefix) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& [name, tensor] : state) {
    if (name.starts_with(prefix)) out[name.substr(prefix.size())] = tensor;
  }
  return out;
}

std::map<std::string, torch::Tensor> worker_state(const LayerOptimizer& optimizer, OuterOptimizer* outer,
                                                  const Engine* engine) {
  std::map<std::string, torch::Tensor> out;
  for (auto& [name, tensor] : optimizer.state()) out[kOptimizerEntries + name] = tensor;
  if (outer != nullptr) {
    for (int l = 0; l < outer->agreed().num_layers(); ++l) {
      out[fmt::format("{}agreed/{}", kOuterEntries, l)] = outer->agreed().flat(l).clone();
      out[fmt::format("{}momentum/{}", kOuterEntries, l)] = outer->momentum(l).clone();
    }
  }
  if (engine != nullptr) {
    for (auto& [name, tensor] : engine->state()) out[kEngineEntries + name] = tensor;
  }
  return out;
}

void load_worker_state(const std::map<std::string, torch::Tensor>& state, LayerOptimizer& optimizer,
                       OuterOptimizer* outer) {
  torch::NoGradGuard no_grad;
  const auto optimizer_state = entries_under(state, kOptimizerEntries);
  if (!optimizer_state.empty()) {
    try {
      optimizer.load_state(optimizer_state);
    } catch (const std::logic_error& e) {
      throw std::invalid_argument(e.what());
    }
  }
  const auto outer_state = entries_under(state, kOuterEntries);
  if (outer == nullptr) {
    if (!outer_state.empty()) {
      throw std::invalid_argument(fmt::format("{}{}: this job has no outer optimizer", kOuterEntries,
                                              outer_state.begin()->first));
    }
    return;
  }
  // Every entry named as this worker keeps them, before any is set.
  std::set<std::string> kept;
  for (int l = 0; l < outer->agreed().num_layers(); ++l) {
    kept.insert(fmt::format("agreed/{}", l));
    kept.insert(fmt::format("momentum/{}", l));
  }
  for (const auto& [name, tensor] : outer_state) {
    if (!kept.contains(name)) {
      throw std::invalid_argument(fmt::format("{}{}: this job keeps no such state", kOuterEntries, name));
    }
  }
  const auto take = [&](const std::string& name, const torch::Tensor& into) {
    const auto found = outer_state.find(name);
    if (found == outer_state.end() || !found->second.sizes().equals(into.sizes()) ||
        found->second.scalar_type() != into.scalar_type()) {
      throw std::invalid_argument(fmt::format("{}{} is missing or of another shape", kOuterEntries, name));
    }
    into.copy_(found->second);
  };
  for (int l = 0; l < outer->agreed().num_layers(); ++l) {
    take(fmt::format("agreed/{}", l), outer->agreed().flat(l));
    take(fmt::format("momentum/{}", l), outer->momentum(l));
  }
}

void load_engine_state(const std::map<std::string, torch::Tensor>& state, Engine& engine) {
  engine.load_state(entries_under(state, kEngineEntries));
}

}  // namespace weft::runtime
