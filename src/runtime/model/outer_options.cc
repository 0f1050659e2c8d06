#include "runtime/model/outer_options.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "schedulers/strategies.h"
#include "units/ranges.h"
#include "units/units.h"

namespace weft::runtime {
namespace {

// Note [Outer defaults, measured]: what the sweep measured for an inner optimizer.
struct Measured {
  OuterStep step;             // the default
  double safe_amplification;  // the largest measured to learn about as well as the plain average
  bool helps;                 // the default learnt more per step than the plain average
};

// An inner optimizer with state: momentum SGD, Adam, AdamW, and anything weft
// does not mirror.
bool stateful(std::string_view inner) { return inner != "sgd"; }

Measured measured(std::string_view inner) {
  if (!stateful(inner)) return {.step = {.lr = 0.7, .momentum = 0.9}, .safe_amplification = 7, .helps = true};
  return {.step = {.lr = 0.7, .momentum = 0.5}, .safe_amplification = 1.4, .helps = false};
}

}  // namespace

OuterStep outer_step(const OuterOptions& o) {
  const OuterStep fallback = measured(o.inner).step;
  return {.lr = o.lr.value_or(fallback.lr), .momentum = o.momentum.value_or(fallback.momentum)};
}

bool outer_defaults_help(std::string_view inner) { return measured(inner).helps; }

std::optional<std::string> outer_warning(const OuterOptions& o) {
  if (!o.enabled()) return std::nullopt;
  const OuterStep step = outer_step(o);
  const Measured m = measured(o.inner);
  if (step.amplification() <= m.safe_amplification * (1 + 1e-9)) return std::nullopt;
  return fmt::format("the outer optimizer (lr {}, momentum {}) carries each averaged change {:.3g}x; over {} inner "
                     "steps more than {:g}x learnt less than the plain average or diverged on a model measured "
                     "(docs/local-sgd.md): {} and {} are the measured default",
                     step.lr, step.momentum, step.amplification(), o.inner, m.safe_amplification,
                     ranges::given("--outer-lr", fmt::format("{}", m.step.lr)),
                     ranges::given("--outer-momentum", fmt::format("{}", m.step.momentum)));
}

void validate(const OuterOptions& o) {
  if (outer_named(o) && o.kind != "none" && o.kind != "nesterov") {
    throw UsageError(fmt::format("{}: not an outer optimizer; accepted: none, nesterov",
                                 ranges::given("--outer-optimizer", o.kind)));
  }
  if (o.lr) ranges::check(ranges::kOuterLr, *o.lr);
  if (o.momentum) ranges::check(ranges::kOuterMomentum, *o.momentum);
}

void check_outer_step(const OuterOptions& o, std::string_view strategy) {
  if (!o.enabled()) return;
  std::vector<std::string_view> stepping;
  for (const StrategyInfo& s : strategies()) {
    if (s.moves_parameters) stepping.push_back(s.name);
  }
  if (std::find(stepping.begin(), stepping.end(), strategy) != stepping.end()) return;
  throw UsageError(fmt::format("{}: only local SGD's averages and EASGD's centre have an outer step ({}); {} has "
                               "none",
                               ranges::given("--outer-optimizer", o.kind), fmt::join(stepping, ", "),
                               ranges::given("--strategy", strategy)));
}

}  // namespace weft::runtime
