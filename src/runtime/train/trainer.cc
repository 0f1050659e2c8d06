#include "runtime/train/trainer.h"

#include <fcntl.h>
#include <unistd.h>

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "profile/profile.h"
#include "runtime/comm/engine.h"
#include "runtime/comm/parameter_server.h"
#include "runtime/comm/process_group.h"
#include "runtime/comm/sites.h"
#include "runtime/launch/launcher.h"
#include "runtime/measure/layer_profiler.h"
#include "runtime/model/data.h"
#include "runtime/model/evaluation.h"
#include "runtime/model/model.h"
#include "runtime/model/optimizer.h"
#include "runtime/model/outer_optimizer.h"
#include "runtime/train/checkpoint.h"
#include "runtime/train/divergence.h"
#include "runtime/train/error_text.h"
#include "runtime/train/iteration.h"
#include "runtime/train/measured_trace.h"
#include "runtime/train/worker.h"
#include "schedulers/strategies.h"
#include "timeline/recorder.h"
#include "timeline/timeline.h"
#include "units/files.h"
#include "units/ranges.h"

namespace weft::runtime {
namespace {

// Note [The agreed model after a whole average]
// ---------------------------------------------
// Where iteration t averaged every byte of every layer (flsgd every H, any local
// SGD strategy whose period ends there), each worker's parameters after it, once
// the engine has drained, are the agreed ones: averaging them again and
// evaluating a second model would cost a collective over the link and a second
// evaluation, and tell nothing. Evaluations there evaluate once and report it as
// both. Every rank reads the same schedule, so all skip the collective together.
bool averaged_whole_model(const Schedule& schedule, int t, const std::vector<std::vector<torch::Tensor>>& layers) {
  std::vector<Bytes> averaged(layers.size(), 0);
  for (const CommOp& op : schedule.ops(t)) {
    if (op.kind != OpKind::kAverageParameters || op.reach == Reach::kSite) continue;  // a site's is not everyone's
    for (const Chunk& c : op.chunks) averaged.at(static_cast<size_t>(c.layer)) += c.length;
  }
  for (std::size_t l = 0; l < layers.size(); ++l) {
    Bytes bytes = 0;
    for (const torch::Tensor& p : layers[l]) bytes += static_cast<Bytes>(p.numel()) * static_cast<Bytes>(sizeof(float));
    if (averaged[l] != bytes) return false;
  }
  return true;
}

using json = nlohmann::json;

std::vector<std::uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }
std::string string_of(const std::vector<std::uint8_t>& b) { return {b.begin(), b.end()}; }

// ---------------------------------------------------------------------------
// The schedule (Note [Shared schedule] in runtime/train/worker.h)

// The layer names and sizes of `profile` must be the model's.
void check_matches(const Profile& profile, const Profile& skeleton, const std::filesystem::path& file) {
  if (profile.size() != skeleton.size()) {
    throw UsageError(fmt::format("--profile {}: {} layers, but model {} has {}", file.string(), profile.size(),
                                 skeleton.model, skeleton.size()));
  }
  for (int l = 0; l < profile.size(); ++l) {
    const Layer& a = profile.layers[static_cast<size_t>(l)];
    const Layer& b = skeleton.layers[static_cast<size_t>(l)];
    if (a.params != b.params || a.bytes_per_param != b.bytes_per_param) {
      throw UsageError(fmt::format("--profile {}: layer {} ({}) has params {} x {} bytes, but the model's layer {} "
                                   "({}) has {} x {}",
                                   file.string(), l, a.name, a.params, a.bytes_per_param, l, b.name, b.params,
                                   b.bytes_per_param));
    }
  }
}

// Every worker, where no --profile is given: the workers profile together and
// rank 0 returns the median of their profiles, the others nothing (Note [Profiled
// as trained], runtime/measure/layer_profiler.h). A fresh model of the same seed,
// since profiling runs forwards and backwards and must leave the trained model untouched.
std::optional<Profile> profiled_as_trained(const TrainOptions& options, const Group& group, int workers) {
  if (!options.profile.empty() || group.rank >= workers) return std::nullopt;
  ProfilingTogether together(group, workers, "weft/train/profiled");
  std::optional<Profile> measured;
  try {
    measured = together.median(profile_model(together.hooked({.model = options.model,
                                                              .batch = options.batch,
                                                              .warmup = 1,
                                                              .iterations = TrainDefaults::kProfileIterations - 1,
                                                              .threads = 1,
                                                              .seed = options.seed})));
  } catch (...) {
    together.leave();  // the others go on; this rank's error ends the job
    throw;
  }
  if (!measured) return std::nullopt;
  auto model = make_model(options.model, options.seed);
  check_matches(*measured, model->layer_profile(options.model, options.batch), "(measured)");
  return measured;
}

// Rank 0: the profile the schedule is built from, `measured` or --profile's.
Profile rank0_profile(const TrainOptions& options, const std::optional<Profile>& measured) {
  if (measured) return *measured;
  auto model = make_model(options.model, options.seed);
  Profile profile = load_profile(options.profile);
  check_matches(profile, model->layer_profile(options.model, options.batch), options.profile);
  return profile;
}

// Every rank's schedule, from rank 0's profile.
SharedPlan shared_plan(const TrainOptions& options, const Group& group, int workers,
                       const std::optional<Profile>& measured) {
  return share_plan(group, options.job, workers, [&] {
    return std::pair{rank0_profile(options, measured), std::string()};
  });
}

// Note [Auto resumes its recipe]
// ------------------------------
// Rule: `--strategy auto` is decided by rank 0 from the profile it measures (or
// --profile) and published to every rank (Note [Rank 0 decides]); every rank
// then trains the chosen recipe, and the metrics and the checkpoints' identity
// record it, never "auto". A resumed auto job trains the recipe its checkpoint
// records instead of choosing again. Why: a measured profile differs from run to
// run, so a second choice may differ from the first, and a checkpoint's state
// (a codec's error feedback, local SGD's outer optimizer) belongs to the recipe
// that wrote it; the rest of the identity is checked as for any job.

// The recipe of an auto job resumed from `options.checkpoint`. THROWS UsageError
// naming --resume for a missing or unreadable manifest.
JobOptions checkpointed_recipe(const TrainOptions& options) {
  return with_recipe(options.job, checkpointed_job(options.checkpoint),
                     fmt::format("--resume {}", options.checkpoint.string()));
}

// `given` with auto's choice (Note [Auto resumes its recipe]), from rank 0's
// profile: `measured` or --profile's.
TrainOptions resolved(const TrainOptions& given, const Group& group, int workers,
                      const std::optional<Profile>& measured) {
  if (given.job.strategy != "auto") return given;
  const json recipe = json::parse(decided_by_rank0(group, "weft/auto", [&] {
    if (given.resume) {
      const JobOptions resumed = checkpointed_recipe(given);
      std::cerr << fmt::format("weft: {} resumes the recipe its checkpoint records: {}\n",
                               ranges::given("--strategy", "auto"),
                               describe_recipe(resumed.strategy, resumed.strategy_options))
                << std::flush;
      return job_identity(resumed, workers).dump();
    }
    const Profile profile = rank0_profile(given, measured);
    const std::string source = given.profile.empty() ? "the median of the workers' layer times, measured together"
                                                     : fmt::format("--profile {}", given.profile.string());
    const JobChoice choice = choose_for_job(given.job, profile, workers, source);
    std::cerr << "weft: " << choice.reason << "\n" << std::flush;
    return job_identity(choice.job, workers).dump();
  }, "rank 0 could not choose the strategy"));
  TrainOptions out = given;
  out.job = with_recipe(given.job, recipe, "rank 0's choice");
  return out;
}

// The number of iterations, which rank 0 publishes for the servers (they hold no
// data to count epochs in).
const std::string kStepsKey = "weft/steps";

// ---------------------------------------------------------------------------
// Outputs

// One JSON line per write(2) on an O_APPEND file: lines of several processes
// never interleave.
class MetricsFile {
 public:
  MetricsFile() = default;
  MetricsFile(const std::filesystem::path& file, bool truncate) {
    if (file.empty()) return;
    // Without blocking: a FIFO no program reads refuses at once (ENXIO) rather
    // than holding the job (Note [Where an output goes], units/files.cc).
    fd_ = ::open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NONBLOCK | (truncate ? O_TRUNC : 0),
                 0644);
    if (fd_ < 0) {
      throw UsageError(fmt::format("--metrics {}: cannot open it for writing: {}", file.string(),
                                   errno == ENXIO ? "a FIFO that no program reads"
                                                  : std::generic_category().message(errno)));
    }
    const int flags = ::fcntl(fd_, F_GETFL);
    if (flags < 0 || ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK) != 0) {
      throw std::system_error(errno, std::generic_category(), "--metrics: fcntl");
    }
  }
  ~MetricsFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  MetricsFile(const MetricsFile&) = delete;
  MetricsFile& operator=(MetricsFile&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }

  void write(const json& line) {
    if (fd_ < 0) return;
    const std::string text = line.dump() + "\n";
    if (::write(fd_, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
      throw std::system_error(errno, std::generic_category(), "writing --metrics");
    }
  }

 private:
  int fd_ = -1;
};

void save_parameters(LayeredModel& model, const std::filesystem::path& base, int rank) {
  const std::filesystem::path file = base.string() + ".rank" + std::to_string(rank);
  std::string bytes;
  for (int l = 0; l < model.num_layers(); ++l) {
    for (const torch::Tensor& p : model.layer_parameters(l)) {
      const torch::Tensor flat = p.detach().contiguous().to(torch::kFloat32);
      bytes.append(static_cast<const char*>(flat.data_ptr()), flat.nbytes());
    }
  }
  write_output("--save-params", file, bytes);
}

// Collective: every rank (`plan`: null on a server, never rank 0).
void write_trace_and_say(const TrainOptions& options, const Group& group, Recorder& recorder, std::int64_t trained,
                         const SharedPlan* plan) {
  const std::optional<std::string> summary =
      write_trace(group, group.world, group.world - options.job.servers, plan, options.job, recorder, trained,
                  "--trace", options.trace);
  if (summary) {
    std::cerr << fmt::format("measured timeline written to {} beside the prediction ({})\n", options.trace.string(),
                             *summary);
  }
}

// ---------------------------------------------------------------------------
// The loop

std::int64_t total_steps(const TrainOptions& options, const DataSource& data) {
  if (options.job.steps) return *options.job.steps;
  if (options.epochs) {
    const double steps = std::max(1.0, std::round(*options.epochs * static_cast<double>(data.batches_per_epoch())));
    if (!ranges::contains(ranges::kSteps, steps)) {
      throw UsageError(fmt::format("--epochs {}: {} steps of {} batches an epoch; expected at most {} steps",
                                   *options.epochs, steps, data.batches_per_epoch(), ranges::kMaxSteps));
    }
    return static_cast<std::int64_t>(steps);
  }
  return 100;
}

// Whether this process's stderr redraws a line ended by '\r' in place: a terminal,
// or the launcher's pipe to one (kTerminalVariable).
bool draws_in_place() {
  const char* piped = std::getenv(kTerminalVariable);
  return ::isatty(STDERR_FILENO) == 1 || (piped != nullptr && std::string_view(piped) == "1");
}

// Rank 0's progress line: in place on a terminal, a line every few seconds otherwise.
class ProgressLine {
 public:
  ProgressLine(bool enabled, std::int64_t total, int samples_per_step)
      : enabled_(enabled), total_(total), samples_(samples_per_step), terminal_(draws_in_place()) {}

  void update(std::int64_t done, double loss, Seconds now) {
    if (!enabled_) return;
    const Seconds interval = terminal_ ? 0.2 : 5.0;
    if (done != total_ && now - last_ < interval) return;
    last_ = now;
    const double rate = now > 0 ? static_cast<double>(done) / now : 0;
    const Seconds eta = rate > 0 ? static_cast<double>(total_ - done) / rate : 0;
    std::cerr << fmt::format("{}iteration {}/{}  loss {:.4f}  {:.0f} samples/s  ETA {}{}",
                             terminal_ ? "\r" : "", done, total_, loss, rate * samples_, format_duration(eta),
                             terminal_ && done != total_ ? "   " : "\n")
              << std::flush;
  }
  void message(const std::string& text) {
    if (!enabled_) return;
    std::cerr << (terminal_ ? "\r" : "") << text << "\n" << std::flush;
  }
  // Said whether or not progress is shown.
  void warn(const std::string& text) {
    std::cerr << (terminal_ && enabled_ ? "\r" : "") << "weft: warning: " << text << "\n" << std::flush;
  }

 private:
  bool enabled_;
  std::int64_t total_;
  int samples_;
  bool terminal_;
  Seconds last_ = -1e300;
};

// ---------------------------------------------------------------------------
// Checkpoints (docs/checkpoints.md)
//
// Note [Checkpoint commit]
// ------------------------
// A checkpoint of iteration t is every rank's file of t plus the manifest that
// names t. Each worker drains its engine (nothing in flight, every layer updated),
// each parameter server finishes iteration t − 1's exchanges; each rank writes its
// file atomically and announces it in the TCPStore; every rank then waits until
// all have, and rank 0 alone points the manifest at t. Only then does a rank
// remove its files older than its previous checkpoint p: rank 0 committed p
// before it went on to write t, so the manifest names p or t, and both exist. A job
// killed at any instant therefore leaves a manifest naming complete files. The
// store, not the process group: no collective may be issued beside the engine.

// The training state a rank checkpoints: what run_worker trains with, or serve serves with.
struct TrainState {
  LayeredModel* model = nullptr;
  LayerOptimizer* optimizer = nullptr;
  OuterOptimizer* outer = nullptr;  // optional
  DataSource* data = nullptr;  // none on a parameter server
  Engine* engine = nullptr;  // its codecs' state (set once the engine exists)
  const std::map<std::string, torch::Tensor>* exchanges = nullptr;  // a server's (ServerOptions::after_iteration)
};

RankCheckpoint capture(const TrainState& s, std::int64_t iteration) {
  RankCheckpoint c{.iteration = iteration, .data_position = s.data != nullptr ? s.data->position() : 0};
  for (int l = 0; l < s.model->num_layers(); ++l) {
    const auto params = s.model->layer_parameters(l);
    for (std::size_t i = 0; i < params.size(); ++i) c.tensors[fmt::format("param/{}/{}", l, i)] = params[i].detach();
  }
  c.tensors.merge(worker_state(*s.optimizer, s.outer, s.engine));  // Note [A worker's state]
  if (s.exchanges != nullptr) {
    for (const auto& [name, tensor] : *s.exchanges) c.tensors[kServerEntries + name] = tensor;
  }
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  c.tensors["rng/torch"] = generator.get_state();
  return c;
}

// Sets `s` to checkpoint `c`. THROWS UsageError naming the tensor that is missing or
// of another shape (a file of another model would have been refused by its job).
void restore(const TrainState& s, const RankCheckpoint& c, const std::filesystem::path& dir) {
  torch::NoGradGuard no_grad;
  const auto take = [&](const std::string& name, const torch::Tensor& into) {
    const auto found = c.tensors.find(name);
    if (found == c.tensors.end() || !found->second.sizes().equals(into.sizes()) ||
        found->second.scalar_type() != into.scalar_type()) {
      throw UsageError(fmt::format("--resume {}: the checkpoint's {} is missing or of another shape", dir.string(),
                                   name));
    }
    into.copy_(found->second);
  };
  for (int l = 0; l < s.model->num_layers(); ++l) {
    const auto params = s.model->layer_parameters(l);
    for (std::size_t i = 0; i < params.size(); ++i) take(fmt::format("param/{}/{}", l, i), params[i]);
  }
  try {
    load_worker_state(c.tensors, *s.optimizer, s.outer);  // Note [A worker's state]
  } catch (const std::invalid_argument& e) {
    throw UsageError(fmt::format("--resume {}: {}", dir.string(), e.what()));
  }
  if (s.data != nullptr) s.data->seek(c.data_position);
  const auto rng = c.tensors.find("rng/torch");
  if (rng == c.tensors.end()) throw UsageError(fmt::format("--resume {}: no rng/torch state", dir.string()));
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  generator.set_state(rng->second);
}

// Whether a checkpoint is taken once `done` of the job's `steps` iterations are.
bool checkpoint_due(const TrainOptions& options, std::int64_t done, std::int64_t steps) {
  return !options.checkpoint.empty() &&
         ((options.checkpoint_every > 0 && done % options.checkpoint_every == 0) || done == steps);
}

// Note [Checkpoint commit]. `previous`: this rank's last checkpoint (the one
// resumed from), or 0.
void write_checkpoint(const TrainOptions& options, const Group& group, const nlohmann::json& job,
                      const TrainState& state, std::int64_t iteration, std::int64_t previous) {
  save_rank_checkpoint(options.checkpoint, job, group.rank, capture(state, iteration));
  const std::string prefix = fmt::format("weft/checkpoint/{}/", iteration);
  group.store->set(prefix + std::to_string(group.rank), bytes_of("1"));
  std::vector<std::string> keys;
  for (int r = 0; r < group.world; ++r) keys.push_back(prefix + std::to_string(r));
  group.store->wait(keys);
  if (group.rank == 0) commit_checkpoint(options.checkpoint, job, iteration, group.world);
  prune_checkpoints(options.checkpoint, group.rank, previous);
}

// The iteration to resume from, read by rank 0 and published to the others.
std::int64_t resumed_iteration(const TrainOptions& options, const Group& group, const nlohmann::json& job) {
  return std::stoll(decided_by_rank0(
      group, "weft/resume", [&] { return std::to_string(latest_checkpoint(options.checkpoint, job)); }, ""));
}

// Sets the engine's state to the checkpoint's (Engine::load_state) before its first iteration.
void restore_engine(Engine& engine, const std::map<std::string, torch::Tensor>& entries,
                    const std::filesystem::path& dir) {
  try {
    load_engine_state(entries, engine);
  } catch (const std::invalid_argument& e) {
    throw UsageError(fmt::format("--resume {}: {}", dir.string(), e.what()));
  }
}

// Parameter server `server` of a job with `workers` workers
// (runtime/comm/parameter_server.h). It checkpoints its layers, optimizer and
// exchanges' state as a worker does, in its own file (Note [Checkpoint commit]).
int serve(const TrainOptions& options, const Group& group, int workers, int server) {
  auto model = make_model(options.model, options.seed);  // the workers' initial parameters
  const Schedule schedule = shared_plan(options, group, workers, std::nullopt).schedule;  // never rank 0
  std::vector<std::vector<torch::Tensor>> layers;
  for (int l = 0; l < model->num_layers(); ++l) layers.push_back(model->layer_parameters(l));
  LayerOptimizer optimizer(layers, {.kind = options.optimizer, .lr = options.lr});
  const auto outer = make_outer(options.job, layers, schedule.easgd.beta > 0);  // EASGD's centre (ServerOptions::outer)
  const TrainState state{.model = model.get(), .optimizer = &optimizer, .outer = outer.get()};
  const json job = job_identity(options, workers);
  std::int64_t first = 0;
  std::map<std::string, torch::Tensor> exchanges;  // the checkpoint's (ServerOptions::state)
  if (options.resume) {
    first = resumed_iteration(options, group, job);
    const RankCheckpoint checkpoint = load_rank_checkpoint(options.checkpoint, job, group.rank, first);
    restore(state, checkpoint, options.checkpoint);
    exchanges = entries_under(checkpoint.tensors, kServerEntries);
  }

  group.collectives->barrier()->wait();  // the workers' common time origin
  Recorder recorder(group.rank, first, options.trace.empty() ? 0 : options.trace_iterations,
                    common_origin(group, group.world));
  const std::int64_t steps = std::stoll(string_of(group.store->get(kStepsKey)));
  std::int64_t previous_checkpoint = first;
  try {
    run_server({.schedule = &schedule, .layers = layers, .optimizer = &optimizer, .outer = outer.get(),
                .group = group.collectives, .workers = workers, .server = server, .iterations = steps,
                .recorder = &recorder, .first_iteration = first, .state = std::move(exchanges),
                .after_iteration = [&](std::int64_t done, const std::map<std::string, torch::Tensor>& now) {
                  if (!checkpoint_due(options, done, steps)) return;
                  TrainState with_exchanges = state;
                  with_exchanges.exchanges = &now;
                  write_checkpoint(options, group, job, with_exchanges, done, previous_checkpoint);
                  previous_checkpoint = done;
                }});
  } catch (const std::invalid_argument& e) {  // run_server's only one: a checkpoint's state does not fit
    throw UsageError(fmt::format("--resume {}: {}", options.checkpoint.string(), e.what()));
  }
  if (!options.trace.empty()) write_trace_and_say(options, group, recorder, steps, nullptr);
  return 0;
}

// ---------------------------------------------------------------------------
// The agreed model (docs/local-sgd.md)

// The workers' mean of their parameters, summed on `agreed` (a group of its own:
// the engine owns the other). Every worker calls it at the same iterations, with
// its engine drained so that no update writes the parameters meanwhile.
torch::Tensor average_parameters(const std::vector<std::vector<torch::Tensor>>& layers, c10d::ProcessGroup& agreed,
                                 int workers) {
  torch::Tensor flat = flat_parameters(layers).contiguous();
  std::vector<torch::Tensor> tensors{flat};
  agreed.allreduce(tensors)->wait();
  return flat.div_(static_cast<double>(workers));
}

int train(const TrainOptions& given, const WorkerEnv& env) {
  // Note [One thread per worker] (runtime/measure/layer_profiler.h): K workers share the
  // machine's cores; intra-op threads would only fight over them.
  torch::set_num_threads(1);
  Group group = connect(env, given.job.failure_timeout);
  const int workers = workers_of(given.job, group.world);
  const std::optional<Profile> measured = profiled_as_trained(given, group, workers);  // rank 0's median
  const TrainOptions options = resolved(given, group, workers, measured);  // Note [Auto resumes its recipe]
  if (group.rank >= workers) return serve(options, group, workers, group.rank - workers);
  const bool leader = group.rank == 0;
  const StrategyInfo& info = find_strategy(options.job.strategy);

  auto model = make_model(options.model, options.seed);
  auto data = make_data({.model = options.model, .synthetic = options.synthetic, .rank = group.rank,
                         .world = workers, .batch = options.batch, .seed = options.seed});
  const SharedPlan plan = shared_plan(options, group, workers, measured);
  const Schedule& schedule = plan.schedule;
  // Every worker opens its site's groups (and a leader the leaders') before any
  // trains: runtime/comm/sites.h.
  std::unique_ptr<SiteCollectives> sites;
  if (uses_sites(schedule)) {
    sites = std::make_unique<SiteCollectives>(group.store, options.job.cluster.topology, group.rank, workers,
                                              options.job.failure_timeout, group.address);
  }

  std::vector<std::vector<torch::Tensor>> layers;
  std::vector<std::string> names;
  for (int l = 0; l < model->num_layers(); ++l) {
    layers.push_back(model->layer_parameters(l));
    names.push_back(model->layer_name(l));
  }
  OptimizerOptions optimizer_options{.kind = options.optimizer, .lr = options.lr};
  validate(optimizer_options);
  LayerOptimizer optimizer(layers, optimizer_options);
  // Local SGD's (EASGD's is the servers').
  const auto outer = make_outer(options.job, layers, info.family == Family::kLocalSgd);

  TrainState state{.model = model.get(), .optimizer = &optimizer, .outer = outer.get(), .data = data.get()};
  const json job = job_identity(options, workers);
  std::int64_t first = 0;
  std::map<std::string, torch::Tensor> engine_state;  // the checkpoint's, for the engine once it exists
  if (options.resume) {
    first = resumed_iteration(options, group, job);
    const RankCheckpoint checkpoint = load_rank_checkpoint(options.checkpoint, job, group.rank, first);
    restore(state, checkpoint, options.checkpoint);
    engine_state = checkpoint.tensors;
  }

  // The agreed model (docs/local-sgd.md): local SGD's workers differ between
  // averages, so each evaluation also evaluates their mean; EASGD's workers are
  // pulled towards the servers' centre, which rank 0 evaluates as last answered.
  const bool evaluate_agreed = options.eval_every > 0 && info.family == Family::kLocalSgd && workers > 1;
  const bool evaluate_centre = options.eval_every > 0 && schedule.easgd.beta > 0;
  c10::intrusive_ptr<c10d::ProcessGroup> agreed_group;
  std::shared_ptr<LayeredModel> agreed_model;
  if (evaluate_agreed) agreed_group = open_subgroup(group, "agreed", /*threads=*/1);
  if ((evaluate_agreed || evaluate_centre) && leader) agreed_model = make_model(options.model, options.seed);

  MetricsFile metrics;
  if (leader) metrics = MetricsFile(options.metrics, /*truncate=*/!options.resume);
  group.collectives->barrier()->wait();  // the common time origin, and the metrics file exists
  Recorder recorder(group.rank, first, options.trace.empty() ? 0 : options.trace_iterations,
                    common_origin(group, group.world));
  if (!leader) metrics = MetricsFile(options.metrics, /*truncate=*/false);

  const std::int64_t steps = total_steps(options, *data);
  if (leader) group.store->set(kStepsKey, bytes_of(std::to_string(steps)));
  ProgressLine progress(leader && options.progress, steps, options.batch * workers);
  DivergenceWatch diverging(options.job);
  if (leader) {
    if (const auto risky = outer_warning(options.job.outer)) progress.warn(*risky);  // Note [Outer defaults, measured]
    progress.message(fmt::format("weft train: {} on {} worker{}{}, {}{} ({} messages per iteration), {} steps{}",
                                 options.model, workers, workers == 1 ? "" : "s",
                                 options.job.servers == 0 ? ""
                                 : fmt::format(" and {} server{}", options.job.servers, options.job.servers == 1 ? "" : "s"),
                                 options.job.strategy, schedule.options_json == "{}" ? "" : " " + schedule.options_json,
                                 schedule.ops(0).size(), steps,
                                 first > 0 ? fmt::format(", resumed after iteration {}", first - 1) : ""));
  }
  // Every worker calls it at the same iterations (the average is a collective);
  // rank 0 evaluates and writes the line.
  auto eval_line = [&](std::int64_t t, const Engine& engine) {
    std::optional<EvalResult> on_agreed;
    if (evaluate_centre && leader) {
      if (const std::optional<torch::Tensor> centre = engine.agreed_parameters()) {
        load_flat_parameters(*agreed_model, *centre);
        on_agreed = evaluate(*agreed_model, *data, 256);
      }
    }
    // Note [The agreed model after a whole average].
    const bool own_is_agreed = evaluate_agreed && averaged_whole_model(schedule, static_cast<int>(t), layers);
    if (evaluate_agreed && !own_is_agreed) {
      const torch::Tensor mean = average_parameters(layers, *agreed_group, workers);
      if (leader) {
        load_flat_parameters(*agreed_model, mean);
        on_agreed = evaluate(*agreed_model, *data, 256);
      }
    }
    if (!leader) return;
    const EvalResult r = evaluate(*model, *data, 256);
    if (own_is_agreed) on_agreed = r;
    json line{{"rank", group.rank}, {"iter", t}, {"time_s", recorder.now()},
              {"eval", {{"accuracy", r.accuracy}, {"loss", r.loss}}}};
    if (on_agreed) line["eval_agreed"] = {{"accuracy", on_agreed->accuracy}, {"loss", on_agreed->loss}};
    metrics.write(line);
    progress.message(fmt::format("evaluation after iteration {}: accuracy {:.4f}, loss {:.4f}{}", t, r.accuracy,
                                 r.loss,
                                 on_agreed ? fmt::format(" ({}: accuracy {:.4f}, loss {:.4f})",
                                                         evaluate_centre ? "the servers' centre" : "the workers' average",
                                                         on_agreed->accuracy, on_agreed->loss)
                                           : ""));
  };

  {
    Engine engine({.schedule = &schedule, .layers = layers, .layer_names = names, .optimizer = &optimizer,
                   .collectives = group.collectives,
                   .open_announcements = [&group] { return open_subgroup(group, "announcements", /*threads=*/1); },
                   .workers = workers,
                   .gather_below = plan.gather_below,
                   .recorder = &recorder, .stall_timeout = 2 * options.job.failure_timeout, .outer = outer.get(),
                   .sites = sites.get(),
                   .first_iteration = static_cast<int>(first)});
    restore_engine(engine, engine_state, options.checkpoint);
    state.engine = &engine;
    Seconds previous_end = recorder.now();
    std::int64_t previous_checkpoint = first;
    for (std::int64_t t = first; t < steps; ++t) {
      const IterationResult step = train_iteration(engine, *model, data->next(), recorder, static_cast<int>(t));
      const double loss_value = step.loss.item<double>();
      if (leader) {
        if (const auto said = diverging.add(loss_value)) progress.warn(*said);  // Note [A diverging run]
      }
      const Seconds end = recorder.now();
      metrics.write({{"rank", group.rank}, {"iter", t}, {"time_s", end}, {"iteration_s", end - previous_end},
                     {"compute_s", step.compute}, {"loss", loss_value}, {"strategy", options.job.strategy}});
      previous_end = end;
      progress.update(t + 1, loss_value, end);
      if (checkpoint_due(options, t + 1, steps)) {
        engine.drain();
        write_checkpoint(options, group, job, state, t + 1, previous_checkpoint);
        previous_checkpoint = t + 1;
      }
      if (options.eval_every > 0 && (t + 1) % options.eval_every == 0 && t + 1 < steps &&
          (leader || evaluate_agreed)) {
        engine.drain();
        eval_line(t, engine);
      }
    }
    engine.finish();
    if (options.eval_every > 0) eval_line(steps - 1, engine);
  }
  if (!options.save_params.empty()) save_parameters(*model, options.save_params, group.rank);
  if (!options.trace.empty()) write_trace_and_say(options, group, recorder, steps, &plan);
  return 0;
}

}  // namespace

json job_identity(const TrainOptions& options, int workers) {
  json job = job_identity(options.job, workers);
  job.update({{"model", options.model}, {"batch", options.batch}, {"optimizer", options.optimizer},
              {"lr", options.lr}, {"seed", options.seed}, {"synthetic", options.synthetic}});
  return job;
}

void check_checkpoint_options(const TrainOptions& o) {
  if (o.checkpoint_every < 0) {
    throw UsageError(fmt::format("--checkpoint-every {}: expected an integer >= 0", o.checkpoint_every));
  }
  if (o.checkpoint.empty()) {
    if (o.checkpoint_every > 0) throw UsageError("--checkpoint-every: give --checkpoint DIR as well");
    if (o.resume) throw UsageError("--resume: give --checkpoint DIR, the directory of the job's checkpoints");
    return;
  }
  std::error_code ec;
  if (std::filesystem::exists(o.checkpoint, ec) && !std::filesystem::is_directory(o.checkpoint, ec)) {
    throw UsageError(fmt::format("--checkpoint {}: not a directory", o.checkpoint.string()));
  }
  if (!std::filesystem::exists(o.checkpoint, ec)) {
    if (o.resume) {
      throw UsageError(fmt::format("--resume {}: no such directory; start the job without --resume",
                                   o.checkpoint.string()));
    }
    const auto parent = o.checkpoint.has_parent_path() ? o.checkpoint.parent_path() : ".";
    if (!std::filesystem::is_directory(parent, ec)) {
      throw UsageError(fmt::format("--checkpoint {}: its parent directory {} does not exist",
                                   o.checkpoint.string(), parent.string()));
    }
    std::filesystem::create_directory(o.checkpoint, ec);
    if (ec && !std::filesystem::is_directory(o.checkpoint)) {
      throw UsageError(fmt::format("--checkpoint {}: cannot create it ({})", o.checkpoint.string(), ec.message()));
    }
  }
  check_output("--checkpoint", o.checkpoint / "latest.json");
}

void check_resumable(const TrainOptions& given, int workers) {
  TrainOptions options = given;
  if (options.job.strategy == "auto") options.job = checkpointed_recipe(options);  // Note [Auto resumes its recipe]
  const json job = job_identity(options, workers);
  const std::int64_t iteration = latest_checkpoint(options.checkpoint, job);
  for (int rank = 0; rank < workers + options.job.servers; ++rank) {
    load_rank_checkpoint(options.checkpoint, job, rank, iteration);
  }
}

int run_worker(const TrainOptions& options, const WorkerEnv& env) {
  try {
    return train(options, env);
  } catch (const UsageError&) {
    throw;
  } catch (const std::exception& e) {
    // The engine's and rendezvous's messages already start with "rank N:".
    const std::string what = without_backtrace(e.what());
    const std::string prefix = fmt::format("rank {}:", env.rank);
    std::cerr << "weft: " << (what.starts_with(prefix) ? what : prefix + " " + what) << "\n" << std::flush;
    return 1;
  }
}

}  // namespace weft::runtime
