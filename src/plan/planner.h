// The planner: predicts every strategy's iteration time for a model and a cluster
// with the simulator, tunes what can be tuned, and recommends one (docs/cli.md §5 `weft
// plan`, §6 plan output).
//
// Thread-safety: plan() is a pure function.
#pragma once

#include <string>
#include <vector>

#include "cost/cluster.h"
#include "profile/profile.h"
#include "schedule/schedule.h"
#include "schedulers/strategies.h"
#include "timeline/timeline.h"

namespace weft {

struct PlanOptions {
  // Strategies to evaluate; empty = every strategy for the cluster's architecture.
  std::vector<std::string> strategies;
  StrategyOptions strategy;  // H, T, partition, credit, EASGD; unset values are tuned
  bool tune = true;          // search the strategy's free parameters (plan/tuning.h)
  int record_iterations = 0; // keep events of the first N iterations (for --trace)
  // Each S-SGD strategy is planned once per encoding here (`--compression auto`);
  // empty: once, with strategy.compression. The parameter-server strategies are
  // planned uncompressed (docs/compression.md) unless named in `strategies`: then
  // with strategy.compression, and plan() THROWS UsageError where they refuse it
  // (the low-rank codecs).
  std::vector<Encoding> compressions;
  // With sites (cluster.topology), each all-reduce strategy is also planned by
  // sites (--hierarchical) and each local SGD one also with site averages every
  // iteration (--site-every 1), alone and by sites: one row per variant (Note
  // [Variants across sites], planner.cc). A variant the user set
  // (strategy.hierarchical, strategy.site_every) is planned alone. false: only
  // strategy's own, as `weft simulate` takes it.
  bool site_variants = true;
};

struct PlannedStrategy {
  std::string name;
  Schedule schedule;
  Timeline timeline;        // simulated; events only if record_iterations > 0
  double speedup_vs_wfbp = 0;
  Encoding compression;  // its messages' encoding; lossy ones trade accuracy for speed
  bool hierarchical = false;  // averages across sites by sites (--hierarchical)
  int site_every = 0;         // local SGD's site averages (--site-every); 0 = none
  // "wfbp", "wfbp+int8" where compressed; with sites, "/hier" by sites and
  // "/siteN" with site averages every N iterations: "flsgd/hier/site1+int8".
  std::string label() const;
  // The same strategy, codec and sites variant.
  bool same_row(const PlannedStrategy& other) const {
    return name == other.name && compression == other.compression && hierarchical == other.hierarchical &&
           site_every == other.site_every;
  }
};

// A row the planner could not cost (Note [Costed only with shapes], planner.cc).
struct Uncosted {
  std::string label;  // as PlannedStrategy::label
  std::string why;
};

struct Plan {
  std::string model;
  Cluster cluster;
  std::vector<PlannedStrategy> strategies;  // in the registry's order
  std::vector<Uncosted> uncosted;           // asked for, not costed, and why
  Seconds wfbp_iteration = 0;               // the reference (all-reduce WFBP, uncompressed)
  std::string recommended;                  // the fastest strategy
  Encoding recommended_compression;         // with this encoding
  bool recommended_hierarchical = false;    // by sites (--hierarchical)
  int recommended_site_every = 0;           // with site averages (--site-every); 0 = none

  // The recommended row; nullptr when none was costed.
  const PlannedStrategy* best() const;
};

// THROWS UsageError for an unknown strategy name or one that does not run on the
// cluster's architecture (naming the ones that do), for invalid options, and when
// no row asked for could be costed (saying why).
Plan plan(const Profile& profile, const Cluster& cluster, const PlanOptions& options = {});

// The JSON object of docs/formats.md §6.
std::string plan_json(const Plan& plan);

}  // namespace weft
