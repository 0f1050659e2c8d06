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
  out.hierarchical = chosen.hierarchical;
  out.site_every = chosen.site_every;
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

// Note [Variants across sites]
// -----------------------------
// Rule: on a cluster with sites, the planner prices each all-reduce strategy
// both over one ring of all workers and by sites (--hierarchical), and each local
// SGD strategy also with a site average every iteration between its averages
// across sites (--site-every 1), alone and by sites; the fastest row wins as any
// other. A variant the user set is planned alone (the strategy's own, where it
// applies: --site-every is local SGD's, so the other families are planned
// without it unless named). Why: which variant wins depends on the topology —
// by sites saves the WAN's share of a ring's steps but adds a site reduction
// and a broadcast, which a WAN as fast as the sites does not repay; a site
// average costs the site's link every iteration, which is idle in local SGD's
// iterations without averages — so the planner measures rather than assumes
// (docs/strategies.md, Sites). site_every 1 is the one tried: any N > 1 averages
// less for the same schedule shape, which only the accuracy, not the planner,
// can weigh.
struct SiteVariant {
  bool hierarchical = false;
  int site_every = 0;
};

std::vector<SiteVariant> site_variants(const StrategyInfo& info, const Cluster& cluster,
                                       const PlanOptions& options) {
  const StrategyOptions& given = options.strategy;
  const bool named = !options.strategies.empty();
  const bool local_sgd = info.family == Family::kLocalSgd;
  // --site-every is local SGD's: among all strategies, the others go without it.
  const int site_every = local_sgd || named ? given.site_every : 0;
  const bool explore = options.site_variants && !cluster.topology.empty() && info.arch == Arch::kAllReduce;
  std::vector<bool> hierarchical{given.hierarchical};
  if (explore && !given.hierarchical) hierarchical = {false, true};
  std::vector<int> every{site_every};
  if (explore && local_sgd && given.site_every == 0) every = {0, 1};
  std::vector<SiteVariant> out;
  for (const int e : every) {
    for (const bool h : hierarchical) out.push_back({.hierarchical = h, .site_every = e});
  }
  return out;
}

}  // namespace

std::string PlannedStrategy::label() const {
  std::string out = name;
  if (hierarchical) out += "/hier";
  if (site_every > 0) out += fmt::format("/site{}", site_every);
  if (lossy(compression)) out += "+" + std::string(to_string(compression));
  return out;
}

const PlannedStrategy* Plan::best() const {
  for (const PlannedStrategy& s : strategies) {
    if (s.name == recommended && s.compression == recommended_compression &&
        s.hierarchical == recommended_hierarchical && s.site_every == recommended_site_every) {
      return &s;
    }
  }
  return nullptr;
}

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
  uncompressed.hierarchical = false;  // and over one ring: what sites gain shows too
  uncompressed.site_every = 0;
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
      for (const SiteVariant& variant : site_variants(*info, cluster, options)) {  // Note [Variants across sites]
        PlanOptions with = options;
        with.strategy.compression = encoding;
        with.strategy.hierarchical = variant.hierarchical;
        with.strategy.site_every = variant.site_every;
        PlannedStrategy row = evaluate(*info, profile, cluster, with);
        row.speedup_vs_wfbp = result.wfbp_iteration / row.timeline.summary.iteration;
        const bool seen = std::any_of(result.strategies.begin(), result.strategies.end(),
                                      [&](const PlannedStrategy& s) { return s.same_row(row); });
        if (!seen) result.strategies.push_back(std::move(row));
      }
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
    result.recommended_hierarchical = best->hierarchical;
    result.recommended_site_every = best->site_every;
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
  if (!plan.cluster.topology.empty()) {  // as a topology file gives them (docs/formats.md, Topology)
    const Topology& t = plan.cluster.topology;
    auto& sites = j["topology"]["sites"] = nlohmann::json::array();
    for (const Site& site : t.sites) {
      sites.push_back({{"ranks", site.ranks}, {"bandwidth_Bps", site.bandwidth}, {"latency_s", site.latency}});
    }
    j["topology"]["wan"] = {{"bandwidth_Bps", t.wan.bandwidth}, {"latency_s", t.wan.latency}};
    if (!t.links.empty()) {
      auto& links = j["topology"]["links"] = nlohmann::json::array();
      for (const WanLink& l : t.links) {
        links.push_back({{"from", l.from}, {"to", l.to}, {"bandwidth_Bps", l.link.bandwidth},
                         {"latency_s", l.link.latency}});
      }
    }
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
    if (s.hierarchical) row["hierarchical"] = true;  // written only when set, as compression
    if (s.site_every > 0) row["site_every"] = s.site_every;
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
  if (plan.recommended_hierarchical) j["recommended_hierarchical"] = true;
  if (plan.recommended_site_every > 0) j["recommended_site_every"] = plan.recommended_site_every;
  return j.dump(2);
}

}  // namespace weft
