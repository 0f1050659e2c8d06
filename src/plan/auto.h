// strategy auto: the planner's fastest recipe — strategy, codec, by sites or
// not, site averages — among the families a user allows, with one line saying
// why (docs/cli.md `weft train --strategy auto`, docs/python.md). Both front ends
// call it: `weft train` on rank 0 (runtime/train/trainer.cc), weft.DataParallel
// through src/python/module.cc.
//
// Note [What auto may choose]
// ---------------------------
// Rule: auto plans every strategy of the allowed families that runs on the
// cluster's architecture (with parameter servers: the ps family only), each in
// every variant across sites the planner tries (Note [Variants across sites]),
// and takes the fastest predicted row. Lossy codecs are among the candidates
// only where "lossy" is allowed and no --compression was given; local SGD only
// where "local_sgd" is. Why: a codec and local SGD change what is learnt, not
// only how fast, and the planner predicts only the speed; a user who did not
// say they accept that gets an exact recipe (S-SGD, any schedule, flat or by
// sites: sums by sites are the same sums). The default allows "ssgd" alone.
// The lossy candidates are the element-wise codecs (fp16, bf16, int8:
// auto_encodings), each measured within 0.5 points of float32 on cnn; never a
// low-rank one. Why: what a low-rank codec costs in learning depends on the
// model, and the planner cannot see it: chosen by auto, dreamddp + powersgd:1
// never reached the ViT's 80%, and dreamddp + acpsgd:2 left the LM at a held-out
// loss of 3.18 after 400 steps where every other run reached 2.42-2.51 (BENCHMARKS.md
// "Races" at commit c118acc8). They stay a user's choice, by name (--compression powersgd:2).
// A lossy row is taken only where it is predicted more than kLossyMargin faster
// than the fastest exact row: a codec learns less per step, and a gain within
// the planner's own error (10-15% on these machines, BENCHMARKS.md) may not be
// one at all.
//
// Note [How auto chooses H]
// -------------------------
// Rule: unless the user gave H, auto plans each local SGD row at every H of
// kPeriods and keeps the smallest H whose predicted iteration is within
// kPeriodSlack of that row's fastest. Why: a longer period only hides the
// average's cost, which stops paying once the average is mostly hidden, while
// every extra local step makes the workers drift further apart. The periods end
// at 8. Why: at H = 16 four of five families learnt less per step than at H = 4
// (BENCHMARKS.md, "A safe outer optimizer"), and chosen by auto at 20Mbit, plsgd
// with H = 16 did not reach the LM's loss of 2.7 in 300 steps, where H = 5 (torch's
// PostLocalSGD) reached it in 200 and H = 8 in 200-250 (BENCHMARKS.md, "Races"):
// the planner predicts speed per step, not the steps a period costs.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "cost/cluster.h"
#include "plan/planner.h"
#include "profile/profile.h"
#include "schedulers/strategies.h"

namespace weft {

// "ssgd", "local_sgd", "ps": a strategy's family as `allow` names it.
std::string_view family_name(Family family);
// In `allow`: auto may choose a lossy codec too.
inline constexpr std::string_view kAllowLossy = "lossy";
// The encodings auto may choose where "lossy" is allowed (Note [What auto may
// choose]): candidate_encodings() without the low-rank ones.
std::vector<Encoding> auto_encodings();
// Every name `allow` accepts, in this order: the families, then kAllowLossy.
std::vector<std::string> allow_names();

// `text` as --allow takes it: names joined by commas ("ssgd,local_sgd,lossy").
// THROWS UsageError naming --allow (allow= under KeywordSpelling) and the accepted
// names, as check_allow.
std::vector<std::string> parse_allow(std::string_view text);
// THROWS UsageError naming --allow and listing the accepted names unless every
// name is one of allow_names() and at least one is a family.
void check_allow(const std::vector<std::string>& allow);

// A recipe in words, the same in either spelling of the options: "flsgd +
// powersgd:2 by sites, with site averages every 1 iteration".
std::string describe_recipe(std::string_view strategy, const StrategyOptions& options);

inline constexpr double kLossyMargin = 0.10;  // Note [What auto may choose]
// Note [How auto chooses H]
inline constexpr int kPeriods[] = {2, 4, 8};
inline constexpr double kPeriodSlack = 0.10;

struct AutoOptions {
  std::vector<std::string> allow = {"ssgd"};  // Note [What auto may choose]
  // Local SGD's H is chosen (Note [How auto chooses H]); false: strategy.H, as given.
  bool choose_period = false;
  // The options the user gave: H, T, EASGD's, --compression (kept: no codec is
  // then tried), --hierarchical and --site-every (kept: planned alone).
  StrategyOptions strategy;
  std::string source = "the profile";  // where the profile came from, for the reason
};

struct AutoChoice {
  std::string strategy;
  // options.strategy with the chosen row's compression, hierarchical, site_every and H.
  StrategyOptions options;
  // One line: the recipe, its predicted iteration, how much faster than the
  // fastest exact row and than the default (flat, uncompressed wfbp), and the
  // profile it was predicted from. Options named as the caller spells them.
  std::string reason;
  Plan plan;  // every row planned
};

// THROWS UsageError as check_allow, naming --allow where no allowed family runs
// on cluster.arch (with servers only ps does), and as plan().
AutoChoice choose_auto(const Profile& profile, const Cluster& cluster, const AutoOptions& options);

}  // namespace weft
