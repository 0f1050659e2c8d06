// What a weft job is, whichever front end starts it — `weft train` (runtime/
// train.h) or `weft.DataParallel` (src/python/module.cc): the strategy and the
// options it reads, the cluster it is planned for, the parameter servers, the
// length, the outer optimizer and the failure timeout; their checks, with one
// message for each bad value (named as the caller spells the option, Note [One
// message, two spellings] in units/ranges.h); the cluster a rank plans for; and
// the identity a checkpoint records. What every rank builds from it is in
// runtime/train/worker.h. This header includes no LibTorch header: the command line
// compiles against it.
//
// Thread-safety: plain data and pure functions (cluster_of reads the environment).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "cost/cluster.h"
#include "plan/auto.h"
#include "profile/profile.h"
#include "runtime/model/outer_options.h"
#include "schedulers/strategies.h"
#include "units/units.h"

namespace weft::runtime {

// No progress in a collective, or no exit after a peer failed, for this long is a
// failure. Generous: the slowest thing a healthy worker waits for is rank 0's
// evaluation of the test set (a few seconds) or its start-up profiling.
inline constexpr Seconds kDefaultFailureTimeout = 60;

struct JobOptions {
  std::string strategy = "wfbp";  // a strategy of schedulers/strategies.h
  // The last `servers` ranks of the job serve (runtime/comm/parameter_server.h); for,
  // and only for, the parameter-server strategies.
  int servers = 0;
  // Iterations the job trains. Unset: weft train counts them (--epochs, or 100);
  // the Python package trains until finish().
  std::optional<std::int64_t> steps;
  // Planner inputs for the schedule; workers, arch and servers are the job's
  // (cluster_of). Bandwidth and latency (or `fitted`) drive merging and windows.
  Cluster cluster;
  StrategyOptions strategy_options;
  OuterOptions outer;
  Seconds failure_timeout = kDefaultFailureTimeout;
  // strategy "auto": the families it may choose from, and "lossy" (Note [What
  // auto may choose] in plan/auto.h); empty = {"ssgd"}. Only with "auto".
  std::vector<std::string> allow;
  // strategy "auto": the user gave no H, so auto chooses it (Note [How auto
  // chooses H] in plan/auto.h).
  bool choose_period = false;
};

// THROW UsageError naming the option, the value and what is accepted.
// Every option alone and together: a known strategy; servers exactly for the
// parameter-server strategies; the length, the failure timeout and the outer
// optimizer in their ranges; an encoding the strategy's messages can take. A
// strategy of "auto" (the Python package chooses one once it has measured the
// model) checks the rest, and `allow`; the checks that need a strategy wait for
// its choice (with_recipe).
void validate(const JobOptions& job);
// A parameter-server strategy serves exactly the job's iterations, so a front
// end that cannot count them (the Python package) must be given `steps`.
void check_length_known(const JobOptions& job);

// strategy "auto" decided: the job that trains auto's choice, and why, in one line.
struct JobChoice {
  JobOptions job;
  std::string reason;
};
// strategy "auto" decided on rank 0 (Note [Rank 0 decides]): the fastest recipe
// among job.allow for `profile` on the job's cluster with `workers` workers
// (choose_auto), its H chosen where job.choose_period, and local SGD's outer
// optimizer where the user named none (Note [Auto's outer optimizer]); `source`
// says where the profile came from, for the reason.
// REQUIRES: job.strategy == "auto". THROWS UsageError as choose_auto.
JobChoice choose_for_job(const JobOptions& job, const Profile& profile, int workers, std::string_view source);
// What `job` trains of a recipe: auto's choice, as job_identity writes it
// ("strategy" and, where set, "compression", "hierarchical", "site_every", "H",
// the outer optimizer), so that a resumed auto job trains its checkpoint's
// recipe (Note [Auto resumes its recipe] in trainer.cc). The other fields of
// `recipe` are ignored.
// THROWS UsageError as validate, and naming `origin` for a recipe without a
// strategy.
JobOptions with_recipe(JobOptions job, const nlohmann::json& recipe, std::string_view origin);

// The job's workers among the `world` ranks of its group. THROWS UsageError
// unless at least one rank is not a server.
int workers_of(const JobOptions& job, int world);

// `given` as this process plans for it: in a rank of an emulated job, each link's
// rate as TCP delivers it (Note [Training on emulated links] in cli/
// emulated_training.h); elsewhere unchanged. THROWS UsageError for a bad
// kEmulatedMtuVariable.
Cluster planned_cluster(Cluster given);
// The cluster every rank of a job with `workers` workers plans for: the job's
// workers, architecture and servers, as planned_cluster. Before "auto" has
// chosen, the architecture is the servers': parameter servers with any.
Cluster cluster_of(const JobOptions& job, int workers);

// Note [Sites of a training job]
// -------------------------------
// The sites options give the job's cluster its topology, so that the planned
// schedule and the workers know the sites (--hierarchical, --site-every: Note
// [Sites in a schedule]). Whether the links are also emulated is a separate
// question (weft train: Note [Training on emulated links]; the Python package
// emulates none): `--sites AxB` alone only groups the ranks — a job over
// loopback, or on real links someone else built — and its sites' links are then
// all alike (the cluster's bandwidth and latency, inside and between) for the
// planner; with --topology or --wan-* they are the ones given.
// The topology of a job of `ranks` ranks whose cluster is `cluster`, as `flags`
// give it (empty when none is given). THROWS UsageError as topology_of and
// validate(Topology) do.
Topology job_topology(const SiteFlags& flags, const Cluster& cluster, int ranks);

// Set in each rank's environment by an emulated job: the emulated links' MTU.
inline constexpr const char* kEmulatedMtuVariable = "WEFT_EMULATED_MTU";

// What makes two runs one job, as checkpoints record it: the strategy and the
// options it reads, workers and servers, the outer optimizer where it steps.
// Each front end adds what it alone knows (weft train: model, batch, optimizer,
// lr, seed, data; the Python package: the rank). The length is not part of it:
// a resumed job may train longer. Keys appear only where they matter, so that
// checkpoints written before an option existed stay resumable.
nlohmann::json job_identity(const JobOptions& job, int workers);

}  // namespace weft::runtime
