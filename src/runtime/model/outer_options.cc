#include "runtime/model/outer_options.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "schedulers/strategies.h"
#include "units/ranges.h"
#include "units/units.h"

namespace weft::runtime {

void validate(const OuterOptions& o) {
  if (o.kind != "none" && o.kind != "nesterov") {
    throw UsageError(fmt::format("{}: not an outer optimizer; accepted: none, nesterov",
                                 ranges::given("--outer-optimizer", o.kind)));
  }
  ranges::check(ranges::kOuterLr, o.lr);
  ranges::check(ranges::kOuterMomentum, o.momentum);
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
