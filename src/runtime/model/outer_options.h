// The options of local SGD's and EASGD's outer optimizer (runtime/model/
// outer_optimizer.h, docs/local-sgd.md) and their checks, without LibTorch: a
// job's options (runtime/train/job.h) hold them.
//
// Thread-safety: plain data and pure functions.
#pragma once

#include <string>
#include <string_view>

namespace weft::runtime {

// Local SGD's and EASGD's outer optimizer (runtime/model/outer_optimizer.h).
struct OuterOptions {
  std::string kind = "none";  // "none" | "nesterov"
  double lr = 1.0;
  double momentum = 0.0;

  bool enabled() const { return kind != "none"; }
};

// THROW UsageError naming the option (as the caller spells it, units/ranges.h),
// the value and what is accepted.
void validate(const OuterOptions& options);
// If `options` are enabled() and `strategy` (a strategy's name, or anything else:
// "auto") has no outer step (StrategyInfo::moves_parameters).
void check_outer_step(const OuterOptions& options, std::string_view strategy);

}  // namespace weft::runtime
