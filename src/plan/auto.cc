#include "plan/auto.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "schedule/encoding.h"
#include "units/ranges.h"

namespace weft {
namespace {

constexpr Family kFamilies[] = {Family::kSynchronous, Family::kLocalSgd, Family::kParameterServer};

bool allowed(const std::vector<std::string>& allow, std::string_view name) {
  return std::find(allow.begin(), allow.end(), name) != allow.end();
}

std::string recipe(const PlannedStrategy& row) {
  return describe_recipe(row.name, {.compression = row.compression, .hierarchical = row.hierarchical,
                                    .site_every = row.site_every});
}

Seconds iteration(const PlannedStrategy& row) { return row.timeline.summary.iteration; }

std::string ms(Seconds s) { return fmt::format("{:.2f} ms", s * 1e3); }

}  // namespace

std::string describe_recipe(std::string_view strategy, const StrategyOptions& options) {
  std::string out(strategy);
  if (lossy(options.compression)) out += " + " + to_string(options.compression);
  if (options.hierarchical) out += " by sites";
  if (options.site_every > 0) {
    out += fmt::format(", with site averages every {} iteration{}", options.site_every,
                       options.site_every == 1 ? "" : "s");
  }
  return out;
}

std::string_view family_name(Family family) {
  switch (family) {
    case Family::kSynchronous: return "ssgd";
    case Family::kLocalSgd: return "local_sgd";
    case Family::kParameterServer: return "ps";
  }
  return "?";
}

std::vector<std::string> allow_names() {
  std::vector<std::string> out;
  for (const Family f : kFamilies) out.emplace_back(family_name(f));
  out.emplace_back(kAllowLossy);
  return out;
}

void check_allow(const std::vector<std::string>& allow) {
  const std::vector<std::string> accepted = allow_names();
  const auto refuse = [&](std::string_view why) {
    throw UsageError(fmt::format("{}: {}; accepted: {} (families, and {} to let auto choose a lossy codec)",
                                 ranges::given("--allow", fmt::format("{}", fmt::join(allow, ","))), why,
                                 fmt::join(accepted, ", "), kAllowLossy));
  };
  for (const std::string& name : allow) {
    if (!allowed(accepted, name)) refuse(fmt::format("{:?} is not a family", name));
  }
  if (std::none_of(allow.begin(), allow.end(), [](const std::string& n) { return n != kAllowLossy; })) {
    refuse("no family");
  }
}

std::vector<std::string> parse_allow(std::string_view text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    out.emplace_back(text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  check_allow(out);
  return out;
}

AutoChoice choose_auto(const Profile& profile, const Cluster& cluster, const AutoOptions& options) {
  check_allow(options.allow);
  // Note [What auto may choose]
  PlanOptions plan_options{.strategy = options.strategy};
  std::vector<std::string> others;  // the candidates that are not local SGD
  for (const StrategyInfo& info : strategies()) {
    if (info.arch != cluster.arch || !allowed(options.allow, family_name(info.family))) continue;
    (info.family == Family::kLocalSgd ? plan_options.strategies : others).emplace_back(info.name);
  }
  if (plan_options.strategies.empty() && others.empty()) {
    throw UsageError(fmt::format(
        "{}: none of these families runs on {}; {}",
        ranges::given("--allow", fmt::format("{}", fmt::join(options.allow, ","))),
        cluster.arch == Arch::kParameterServer ? "parameter servers" : "all-reduce without parameter servers",
        cluster.arch == Arch::kParameterServer ? "with servers allow ps" : "allow ssgd or local_sgd"));
  }
  const bool codecs = allowed(options.allow, kAllowLossy) && !lossy(options.strategy.compression);
  if (codecs) plan_options.compressions = candidate_encodings();
  // --site-every is local SGD's: a strategy named with it would refuse it, so the
  // other families are planned without it (Note [Variants across sites]).
  PlanOptions other_options = plan_options;
  other_options.strategies = others;
  other_options.strategy.site_every = 0;
  AutoChoice out;
  if (plan_options.strategies.empty()) {
    out.plan = plan(profile, cluster, other_options);
  } else {
    out.plan = plan(profile, cluster, plan_options);
    if (!others.empty()) {
      Plan rest = plan(profile, cluster, other_options);
      out.plan.strategies.insert(out.plan.strategies.begin(), std::make_move_iterator(rest.strategies.begin()),
                                 std::make_move_iterator(rest.strategies.end()));
      out.plan.uncosted.insert(out.plan.uncosted.begin(), rest.uncosted.begin(), rest.uncosted.end());
    }
  }
  const auto fastest = [&](auto keep) {
    const PlannedStrategy* best = nullptr;
    for (const PlannedStrategy& s : out.plan.strategies) {
      if (keep(s) && (best == nullptr || iteration(s) < iteration(*best))) best = &s;
    }
    return best;
  };
  const PlannedStrategy* best = fastest([](const PlannedStrategy&) { return true; });
  if (best == nullptr) throw UsageError("strategy auto: the planner costed no strategy");  // plan() throws first
  const PlannedStrategy* exact = fastest([](const PlannedStrategy& s) { return !lossy(s.compression); });

  out.strategy = best->name;
  out.options = options.strategy;
  out.options.compression = best->compression;
  out.options.hierarchical = best->hierarchical;
  out.options.site_every = best->site_every;
  out.plan.recommended = best->name;
  out.plan.recommended_compression = best->compression;
  out.plan.recommended_hierarchical = best->hierarchical;
  out.plan.recommended_site_every = best->site_every;

  std::string reason = fmt::format("{} chose {}: {} per iteration predicted for {} workers", ranges::given("--strategy", "auto"),
                                   recipe(*best), ms(iteration(*best)), cluster.workers);
  if (exact != nullptr && exact != best) {
    reason += fmt::format(", {:.2f}x the fastest exact recipe ({}, {})", iteration(*exact) / iteration(*best),
                          recipe(*exact), ms(iteration(*exact)));
  }
  reason += fmt::format("{} {:.2f}x the default wfbp ({}), from {}", exact != nullptr && exact != best ? " and" : ",",
                        out.plan.wfbp_iteration / iteration(*best), ms(out.plan.wfbp_iteration), options.source);
  if (lossy(best->compression) && codecs) {
    reason += fmt::format("; a lossy codec changes what is learnt: {} without {} keeps it exact",
                          ranges::named("--allow"), kAllowLossy);
  }
  out.reason = std::move(reason);
  return out;
}

}  // namespace weft
