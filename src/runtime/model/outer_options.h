// The options of local SGD's and EASGD's outer optimizer (runtime/model/
// outer_optimizer.h, docs/local-sgd.md), their measured defaults and their
// checks, without LibTorch: a job's options (runtime/train/job.h) hold them.
//
// Note [Outer defaults, measured]
// -------------------------------
// Rule: an outer learning rate or momentum the user did not give is the one
// measured for the inner optimizer (outer_step): DiLoCo's 0.7 / 0.9 over plain
// SGD, 0.7 / 0.5 over an inner optimizer with state (momentum SGD, Adam, AdamW).
// A setting whose amplification lr / (1 − momentum) — how far the outer step
// carries a steady averaged change — exceeds the largest measured to learn about
// as well as the plain average with that inner optimizer (7 and 1.4) is warned
// about before the run starts (outer_warning). Why: the inner optimizer's own
// state is not averaged, so after an average it still pushes each worker along
// the last period's direction while the outer momentum pushes the same way.
// Measured (BENCHMARKS.md, "A safe outer optimizer", H = 4 and 16): 0.7 / 0.9
// over plain SGD gained 3–4 points at both periods; over momentum SGD, Adam or
// AdamW it lost 16–25 points at H = 4 (cnn, ViT) and raised the character LM's
// held-out loss 30%, and at H = 16 it still raised the LM's 17% where cnn and the
// ViT gained under a point; 0.7 / 0.5 stayed within a point (or 1.4% of the
// loss) of the plain average. The period did not decide it.
//
// Thread-safety: plain data and pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace weft::runtime {

// Local SGD's and EASGD's outer optimizer (runtime/model/outer_optimizer.h).
struct OuterOptions {
  // "none" | "nesterov"; empty: not named, which is "none" except that strategy
  // auto may choose (Note [Auto's outer optimizer] in runtime/train/job.cc).
  std::string kind;
  // Unset: the measured default for `inner` (Note [Outer defaults, measured]).
  std::optional<double> lr;
  std::optional<double> momentum;
  // The inner optimizer's kind (runtime/model/optimizer.h: "sgd", "momentum",
  // "adam", "adamw"; anything else is treated as adaptive), which the defaults and
  // the warning are measured for.
  std::string inner = "sgd";

  bool enabled() const { return kind == "nesterov"; }
};

// The user named an outer optimizer, "none" included.
inline bool outer_named(const OuterOptions& options) { return !options.kind.empty(); }

// The step an enabled outer optimizer takes: the given options, else the defaults.
struct OuterStep {
  double lr = 1;
  double momentum = 0;

  // lr / (1 − momentum): Note [Outer defaults, measured].
  double amplification() const { return lr / (1 - momentum); }
};

// Note [Outer defaults, measured]: `options`' lr and momentum where given, else
// the measured default for options.inner.
OuterStep outer_step(const OuterOptions& options);
// Whether the measured default for `inner` learnt more per step than the plain
// average (Note [Auto's outer optimizer] in runtime/train/job.cc).
bool outer_defaults_help(std::string_view inner);
// Where options are enabled() and their step's amplification exceeds the largest
// measured safe for options.inner: one line saying so and what to give instead,
// named as the caller spells the options; else nothing.
std::optional<std::string> outer_warning(const OuterOptions& options);

// THROW UsageError naming the option (as the caller spells it, units/ranges.h),
// the value and what is accepted.
void validate(const OuterOptions& options);
// If `options` are enabled() and `strategy` (a strategy's name, or anything else:
// "auto") has no outer step (StrategyInfo::moves_parameters).
void check_outer_step(const OuterOptions& options, std::string_view strategy);

}  // namespace weft::runtime
