#include "runtime/train/divergence.h"

#include <cmath>
#include <utility>

#include <fmt/format.h>

#include "units/ranges.h"

namespace weft::runtime {
namespace {

// Note [A diverging run]: at least kWindow iterations, local SGD's whole periods.
int window_of(const JobOptions& job) {
  constexpr int kWindow = 50;
  const bool local_sgd = find_strategy(job.strategy).family == Family::kLocalSgd;
  const int H = local_sgd ? job.strategy_options.H : 1;
  return (kWindow + H - 1) / H * H;
}

}  // namespace

std::string divergence_advice(const JobOptions& job) {
  if (job.outer.enabled()) {
    const OuterStep step = outer_step(job.outer);
    return fmt::format("the outer optimizer ({} with lr {} and momentum {}) may be diverging with the inner "
                       "optimizer: try {} or {}, or the plain average ({}; docs/local-sgd.md)",
                       job.outer.kind, step.lr, step.momentum,
                       ranges::given("--outer-momentum", fmt::format("{}", step.momentum / 2)),
                       ranges::given("--outer-lr", fmt::format("{}", step.lr / 2)),
                       ranges::given("--outer-optimizer", "none"));
  }
  if (lossy(job.strategy_options.compression)) {
    return fmt::format("try a lower learning rate, or {}", ranges::given("--compression", "none"));
  }
  return "try a lower learning rate";
}

DivergenceWatch::DivergenceWatch(const JobOptions& job) : DivergenceWatch(window_of(job), divergence_advice(job)) {}

DivergenceWatch::DivergenceWatch(int window, std::string advice) : window_(window), advice_(std::move(advice)) {}

std::optional<std::string> DivergenceWatch::add(double loss) {
  if (said_) return std::nullopt;
  if (!std::isfinite(loss)) {
    said_ = true;
    return fmt::format("the loss is {}: the run has diverged; {}", loss, advice_);
  }
  sum_ += loss;
  if (++in_window_ < window_) return std::nullopt;
  means_.push_back(sum_ / window_);
  sum_ = 0;
  in_window_ = 0;
  if (means_.size() > static_cast<std::size_t>(kRises) + 1) means_.erase(means_.begin());
  if (means_.size() <= static_cast<std::size_t>(kRises)) return std::nullopt;
  for (std::size_t i = 1; i < means_.size(); ++i) {
    if (!(means_[i] > means_[i - 1])) return std::nullopt;
  }
  if (!(means_.back() >= (1 + kRise) * means_.front())) return std::nullopt;
  said_ = true;
  return fmt::format("the loss rose over the last {} windows of {} iterations ({:.4g} -> {:.4g}): the run may be "
                     "diverging; {}",
                     kRises, window_, means_.front(), means_.back(), advice_);
}

}  // namespace weft::runtime
