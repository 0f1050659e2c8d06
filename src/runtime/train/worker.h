// What every rank of a job builds from its JobOptions (runtime/train/job.h), whichever
// front end starts it — `weft train` (runtime/train/trainer.cc) or `weft.DataParallel`
// (src/python/module.cc): the shared plan and its schedule, and the names its
// state has in a checkpoint. The front ends differ only in where the model and
// the profile come from and in the loop around the engine.
//
// Note [Shared schedule]
// ----------------------
// Every rank must execute the identical Schedule (Note [Collective order] in
// runtime/comm/engine.h). Schedulers are pure functions, so it suffices that every rank
// feeds them identical inputs; the only input that is measured is the profile's
// layer times, and measurements differ between ranks. So rank 0 alone measures (or
// reads a profile file), tunes the strategy's free options as `weft plan` would
// (plan/tuning.h), publishes both as JSON in the TCPStore, and every rank — rank
// 0 included — parses that JSON and builds the schedule from it (nlohmann-json
// writes doubles so that they read back bit-exactly). A failure on rank 0 while
// doing so (a bad profile file) is published instead, and every rank reports it,
// rather than waiting for a profile that never comes (Note [Rank 0 decides]).
//
// Note [A worker's state]
// -----------------------
// Besides its parameters (the front end's: "param/<l>/<i>" in weft train's
// files, the module's own tensors in the Python package's state_dict), a worker's
// state is its optimizer's ("opt/": LayerOptimizer::state), its outer optimizer's
// ("outer/agreed/<l>", "outer/momentum/<l>") and its engine's ("codec/":
// Engine::state). A parameter server keeps its exchanges' state under
// kServerEntries, named as the workers' engines name theirs. Both front ends name
// them through these functions, so a checkpoint of one reads as the other's.
//
// Thread-safety: one worker per process.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <torch/torch.h>

#include "profile/profile.h"
#include "runtime/comm/process_group.h"
#include "runtime/model/outer_optimizer.h"
#include "runtime/train/job.h"
#include "schedule/schedule.h"
#include "timeline/recorder.h"
#include "timeline/timeline.h"

namespace weft::runtime {

class Engine;
class LayerOptimizer;

// Every rank's copy of what rank 0 decided (Note [Shared schedule]).
struct SharedPlan {
  Profile profile;
  StrategyOptions strategy;  // the job's, with the free ones tuned
  Schedule schedule;
  std::string extra;         // what rank 0's front end published beside it
  Bytes gather_below = 0;    // EngineOptions::gather_below, from the cluster's fit
};

// What rank 0 alone computes: the profile and anything else its front end must
// publish (the Python package: the layers it found). May throw; every rank then
// reports rank 0's message.
using Rank0Plan = std::function<std::pair<Profile, std::string>()>;

// Collective over `group` (every rank calls it once, at the same point): the
// schedule of `job` on `workers` workers. THROWS UsageError with rank 0's
// message if rank 0 failed, or what the strategy's scheduler throws.
SharedPlan share_plan(const Group& group, const JobOptions& job, int workers, const Rank0Plan& rank0);

// Collective over ranks [0, ranks) of `group`, the last `ranks - workers` being
// servers (every rank once, after `trained` iterations; `plan`: rank 0's, null
// elsewhere allowed): writes the measured trace of `recorder`'s iterations to
// `file` beside the simulator's timeline of the same schedule on the cluster it
// was planned for (Note [Measured timeline] in runtime/train/measured_trace.h).
// Rank 0 returns the summary's JSON with "predicted_iteration_s"; the others
// nullopt. THROWS UsageError (rank 0) naming `flag` where `file` cannot be written.
std::optional<std::string> write_trace(const Group& group, int ranks, int workers, const SharedPlan* plan,
                                       const JobOptions& job, Recorder& recorder, std::int64_t trained,
                                       std::string_view flag, const std::filesystem::path& file);

// The outer optimizer a rank steps with: the job's where it is enabled() and
// this rank `steps` (local SGD's workers, EASGD's servers); else none.
std::unique_ptr<OuterOptimizer> make_outer(const JobOptions& job,
                                           const std::vector<std::vector<torch::Tensor>>& layers, bool steps);

// Note [A worker's state]: where a checkpoint keeps each part.
inline const std::string kOptimizerEntries = "opt/";
inline const std::string kOuterEntries = "outer/";
inline const std::string kEngineEntries = "codec/";
extern const std::string kServerEntries;  // "codec/parameter-server/"

// The worker's state but its parameters (copies). `outer` and `engine` may be
// null (none, or not built yet). REQUIRES: the engine drained.
std::map<std::string, torch::Tensor> worker_state(const LayerOptimizer& optimizer, OuterOptimizer* outer,
                                                  const Engine* engine);
// Sets the optimizer's and outer optimizer's state to `state`'s entries under
// kOptimizerEntries and kOuterEntries (none under the first: a state before any
// step). Entries under other names are left to the caller. THROWS
// std::invalid_argument naming an entry that is missing, of another shape, or
// that this worker does not keep (outer entries without an outer optimizer).
void load_worker_state(const std::map<std::string, torch::Tensor>& state, LayerOptimizer& optimizer,
                       OuterOptimizer* outer);
// Sets the engine's state to `state`'s entries under kEngineEntries.
// REQUIRES: before the engine's first iteration. THROWS std::invalid_argument as
// Engine::load_state.
void load_engine_state(const std::map<std::string, torch::Tensor>& state, Engine& engine);

// `state`'s entries under `prefix`, without it.
std::map<std::string, torch::Tensor> entries_under(const std::map<std::string, torch::Tensor>& state,
                                                   const std::string& prefix);

}  // namespace weft::runtime
