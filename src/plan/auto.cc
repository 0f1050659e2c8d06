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

// A planned row and the local SGD period it was planned with (0: not local SGD).
struct Candidate {
  PlannedStrategy row;
  int H = 0;
};

// Note [How auto chooses H]: each row of `by_period` (one plan per period of
// `periods`, the same rows in each) at its smallest period within kPeriodSlack
// of its fastest.
std::vector<Candidate> shortest_periods(std::vector<Plan> by_period, const std::vector<int>& periods) {
  std::vector<Candidate> out;
  const std::vector<PlannedStrategy> rows = by_period.front().strategies;
  for (const PlannedStrategy& row : rows) {
    std::vector<Candidate> same;
    for (std::size_t p = 0; p < periods.size(); ++p) {
      for (PlannedStrategy& s : by_period[p].strategies) {
        if (s.same_row(row)) same.push_back({std::move(s), periods[p]});
      }
    }
    const Seconds fastest = iteration(std::min_element(same.begin(), same.end(), [](const Candidate& a,
                                                                                    const Candidate& b) {
                                        return iteration(a.row) < iteration(b.row);
                                      })->row);
    out.push_back(std::move(*std::find_if(same.begin(), same.end(), [&](const Candidate& c) {
      return iteration(c.row) <= (1 + kPeriodSlack) * fastest;
    })));
  }
  return out;
}

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

std::vector<Encoding> auto_encodings() {
  std::vector<Encoding> out;
  for (const Encoding& e : candidate_encodings()) {
    if (!low_rank(e)) out.push_back(e);
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
  if (codecs) plan_options.compressions = auto_encodings();
  // --site-every is local SGD's: a strategy named with it would refuse it, so the
  // other families are planned without it (Note [Variants across sites]).
  PlanOptions other_options = plan_options;
  other_options.strategies = others;
  other_options.strategy.site_every = 0;
  std::vector<Candidate> candidates;
  AutoChoice out;
  std::vector<Uncosted> uncosted;
  const auto keep = [&](const Plan& p) {  // all but its rows: the model, the cluster, the wfbp reference
    uncosted.insert(uncosted.end(), p.uncosted.begin(), p.uncosted.end());
    out.plan = p;
    out.plan.strategies.clear();
  };
  if (!others.empty()) {
    Plan rest = plan(profile, cluster, other_options);
    keep(rest);
    for (PlannedStrategy& s : rest.strategies) candidates.push_back({std::move(s), 0});
  }
  if (!plan_options.strategies.empty()) {
    // Note [How auto chooses H]; a period must be a multiple of --site-every.
    std::vector<int> periods;
    for (const int H : kPeriods) {
      const int every = options.strategy.site_every;
      if (options.choose_period && (every == 0 || H % every == 0)) periods.push_back(H);
    }
    if (periods.empty()) periods = {options.strategy.H};
    std::vector<Plan> by_period;
    for (const int H : periods) {
      PlanOptions at = plan_options;
      at.strategy.H = H;
      by_period.push_back(plan(profile, cluster, at));
    }
    keep(by_period.front());
    for (Candidate& c : shortest_periods(std::move(by_period), periods)) candidates.push_back(std::move(c));
  }
  out.plan.uncosted = std::move(uncosted);
  const auto fastest = [&](auto keep_row) {
    const Candidate* best = nullptr;
    for (const Candidate& c : candidates) {
      if (keep_row(c.row) && (best == nullptr || iteration(c.row) < iteration(best->row))) best = &c;
    }
    return best;
  };
  const Candidate* exact_candidate = fastest([](const PlannedStrategy& s) { return !lossy(s.compression); });
  const Candidate* lossy_candidate = fastest([](const PlannedStrategy& s) { return lossy(s.compression); });
  // Note [What auto may choose]: a codec must gain more than kLossyMargin.
  const bool codec_gains = lossy_candidate != nullptr &&
                           (exact_candidate == nullptr ||
                            (1 + kLossyMargin) * iteration(lossy_candidate->row) < iteration(exact_candidate->row));
  const Candidate* chosen = codec_gains ? lossy_candidate : exact_candidate;
  if (chosen == nullptr) throw UsageError("strategy auto: the planner costed no strategy");  // plan() throws first
  const PlannedStrategy* best = &chosen->row;
  const PlannedStrategy* exact = exact_candidate != nullptr ? &exact_candidate->row : nullptr;

  out.strategy = best->name;
  out.options = options.strategy;
  out.options.compression = best->compression;
  out.options.hierarchical = best->hierarchical;
  out.options.site_every = best->site_every;
  if (chosen->H > 0) out.options.H = chosen->H;
  out.plan.recommended = best->name;
  out.plan.recommended_compression = best->compression;
  out.plan.recommended_hierarchical = best->hierarchical;
  out.plan.recommended_site_every = best->site_every;

  std::string reason = fmt::format("{} chose {}{}: {} per iteration predicted for {} workers",
                                   ranges::given("--strategy", "auto"), recipe(*best),
                                   chosen->H == 0 ? ""
                                   : fmt::format(" with {}{}", ranges::given("--H", std::to_string(chosen->H)),
                                                 options.choose_period ? " (the shortest period within 10% of the "
                                                                         "fastest)" : ""),
                                   ms(iteration(*best)), cluster.workers);
  if (exact != nullptr && exact != best) {
    reason += fmt::format(", {:.2f}x the fastest exact recipe ({}, {})", iteration(*exact) / iteration(*best),
                          recipe(*exact), ms(iteration(*exact)));
  }
  reason += fmt::format("{} {:.2f}x the default wfbp ({}), from {}", exact != nullptr && exact != best ? " and" : ",",
                        out.plan.wfbp_iteration / iteration(*best), ms(out.plan.wfbp_iteration), options.source);
  if (lossy_candidate != nullptr && !codec_gains && iteration(lossy_candidate->row) < iteration(*best)) {
    reason += fmt::format("; exact: the fastest lossy recipe ({}, {}) gains less than the {:.0f}% a codec must",
                          recipe(lossy_candidate->row), ms(iteration(lossy_candidate->row)), 100 * kLossyMargin);
  }
  if (lossy(best->compression) && codecs) {
    reason += fmt::format("; a lossy codec changes what is learnt: {} without {} keeps it exact",
                          ranges::named("--allow"), kAllowLossy);
  }
  out.reason = std::move(reason);
  for (Candidate& c : candidates) out.plan.strategies.push_back(std::move(c.row));
  return out;
}

}  // namespace weft
