// weft._C: the C++ half of the Python package (docs/python.md). It exposes the
// pieces `weft train` is made of — the job's options and identity (runtime/
// job.h), rendezvous (runtime/comm/process_group.h), the shared schedule and a
// worker's state (runtime/train/worker.h), the per-layer optimizer, the communication
// engine and the parameter server — so that python/weft/ can drive them with a
// user's torch.nn.Module. No strategy, update rule, option check or message is
// implemented on the Python side but those about Python's own types.
//
// Tensors cross the boundary without a copy: Debian's python3-torch loads the same
// libtorch the runtime links, and torch/extension.h converts torch.Tensor to
// torch::Tensor and back.
//
// Errors: UsageError becomes ValueError (bad input, named); every other exception
// pybind11's default (RuntimeError for std::runtime_error). Every call that can
// block (rendezvous, store reads, the engine's waits, serving) releases the GIL.
#include <torch/extension.h>

#include <pybind11/stl.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "plan/options.h"
#include "plan/planner.h"
#include "profile/profile.h"
#include "runtime/comm/engine.h"
#include "runtime/comm/parameter_server.h"
#include "runtime/comm/process_group.h"
#include "runtime/comm/sites.h"
#include "runtime/launch/worker_env.h"
#include "runtime/measure/layer_profiler.h"
#include "runtime/model/optimizer.h"
#include "runtime/model/outer_optimizer.h"
#include "runtime/train/divergence.h"
#include "runtime/train/job.h"
#include "runtime/train/measured_trace.h"
#include "runtime/train/train.h"
#include "runtime/train/worker.h"
#include "schedule/encoding.h"
#include "schedulers/strategies.h"
#include "timeline/recorder.h"
#include "timeline/timeline.h"
#include "units/files.h"
#include "units/ranges.h"
#include "units/units.h"

namespace py = pybind11;
using json = nlohmann::json;

namespace weft::python {
namespace {

using runtime::Group;

std::vector<std::uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }
std::string string_of(const std::vector<std::uint8_t>& b) { return {b.begin(), b.end()}; }

// ---------------------------------------------------------------------------
// The job: a Group from the torchrun variables, or a group of one.

struct Job {
  Group group;
  c10::intrusive_ptr<c10d::ProcessGroup> buffers;  // opened by open_buffer_group()
  c10::intrusive_ptr<c10d::ProcessGroup> agreed;   // opened by the first average()
  int announcement_groups = 0;                     // names of the engines' subgroups
};

std::shared_ptr<Job> join_job(double timeout) {
  auto job = std::make_shared<Job>();
  py::gil_scoped_release release;
  if (runtime::has_worker_env()) {
    job->group = runtime::connect(runtime::read_worker_env(), timeout);
  } else {
    Group& g = job->group;
    g.store = c10::make_intrusive<c10d::HashStore>();
    g.collectives = runtime::make_gloo_group(g.store, 0, 1, timeout);
    g.address = "127.0.0.1";
    g.timeout = timeout;
  }
  return job;
}

// Broadcasts `tensors` from rank 0 over `group`, one flat buffer per dtype.
void broadcast(c10d::ProcessGroup& group, const std::vector<torch::Tensor>& tensors) {
  if (group.getSize() == 1 || tensors.empty()) return;
  torch::NoGradGuard no_grad;
  std::vector<std::vector<torch::Tensor>> by_type;
  for (const torch::Tensor& t : tensors) {
    auto it = std::find_if(by_type.begin(), by_type.end(),
                           [&](const auto& same) { return same.front().scalar_type() == t.scalar_type(); });
    if (it == by_type.end()) by_type.push_back({t});
    else it->push_back(t);
  }
  for (const auto& same : by_type) {
    std::vector<torch::Tensor> flat_parts;
    for (const torch::Tensor& t : same) flat_parts.push_back(t.detach().reshape({-1}));
    std::vector<torch::Tensor> flat{torch::cat(flat_parts)};
    group.broadcast(flat)->wait();
    std::int64_t offset = 0;
    for (const torch::Tensor& t : same) {
      const std::int64_t n = t.numel();
      t.detach().copy_(flat[0].narrow(0, offset, n).view(t.sizes()));
      offset += n;
    }
  }
}

// The mean over every rank of `tensors` (float32), in place: the agreed model of
// local SGD (docs/local-sgd.md). On a group of its own, opened by the first call,
// so that it never meets the engine's collectives.
void average(Job& job, const std::vector<torch::Tensor>& tensors) {
  if (job.group.world == 1 || tensors.empty()) return;
  if (!job.agreed) job.agreed = runtime::open_subgroup(job.group, "python-agreed", 1);
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> parts;
  for (const torch::Tensor& t : tensors) parts.push_back(t.detach().reshape({-1}));
  std::vector<torch::Tensor> flat{torch::cat(parts)};
  job.agreed->allreduce(flat)->wait();
  flat[0].div_(job.group.world);
  std::int64_t offset = 0;
  for (const torch::Tensor& t : tensors) {
    t.detach().copy_(flat[0].narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

// ---------------------------------------------------------------------------
// Options with the command line's names (plan/options.h, runtime/train/job.h), checked
// in C++ and named as Python keywords (Note [One message, two spellings]).

std::string text_of(const py::handle& value) {
  if (py::isinstance<py::str>(value)) return value.cast<std::string>();
  if (py::isinstance<py::int_>(value)) return fmt::format("{}B", value.cast<std::int64_t>());
  if (py::isinstance<py::float_>(value)) return fmt::format("{}", value.cast<double>());
  throw UsageError(fmt::format("expected a string or a number, got {}", py::str(value).cast<std::string>()));
}

// The schedule options of `options` (only accepted names: checked in Python);
// unset ones keep the command line's defaults.
std::pair<ClusterSpec, StrategySpec> specs_of(const py::dict& options, int workers, int servers) {
  ClusterSpec cluster{.workers = workers, .servers = std::max(servers, 1)};
  StrategySpec strategy;
  for (const auto& [key, value] : options) {
    const std::string name = key.cast<std::string>();
    if (value.is_none()) continue;
    if (name == "bandwidth") cluster.bandwidth = text_of(value);
    else if (name == "server_bandwidth") cluster.server_bandwidth = text_of(value);
    else if (name == "latency") cluster.latency = text_of(value);
    else if (name == "network") cluster.network_file = value.cast<std::string>();
    else if (name == "host") cluster.host_file = value.cast<std::string>();
    else if (name == "H") strategy.H = value.cast<int>();
    else if (name == "T") strategy.T = value.cast<int>();
    else if (name == "partition") strategy.partition = text_of(value);
    else if (name == "credit") strategy.credit = text_of(value);
    else if (name == "easgd_alpha") strategy.easgd_alpha = value.cast<double>();
    else if (name == "easgd_beta") strategy.easgd_beta = value.cast<double>();
    else if (name == "compression") strategy.compression = text_of(value);
    else if (name == "sites") cluster.sites.sites = text_of(value);
    else if (name == "topology") cluster.sites.topology = value.cast<std::string>();
    else if (name == "wan_bandwidth") cluster.sites.wan_bandwidth = text_of(value);
    else if (name == "wan_latency") cluster.sites.wan_latency = text_of(value);
    else if (name == "hierarchical") strategy.hierarchical = value.cast<bool>();
    else if (name == "site_every") strategy.site_every = value.cast<int>();
  }
  return {cluster, strategy};
}

// The job of weft.DataParallel's arguments, checked as weft train checks its
// flags. `strategy` may be "auto": what depends on it is checked by with_strategy.
runtime::JobOptions make_job(const std::string& strategy, const py::dict& schedule_options, int servers,
                             std::optional<std::int64_t> steps, double failure_timeout, const std::string& outer,
                             std::optional<double> outer_lr, std::optional<double> outer_momentum,
                             const std::string& inner, bool choose_period, const std::vector<std::string>& allow,
                             bool steps_outside) {
  ranges::KeywordSpelling keywords;
  auto [cluster, strategy_spec] = specs_of(schedule_options, 1, servers);
  cluster.sites = {};  // Note [Python's sites]: with_world gives the job its topology
  runtime::JobOptions job{.strategy = strategy,
                          .servers = servers,
                          .steps = steps,
                          .cluster = make_cluster(cluster),
                          .strategy_options = make_strategy_options(strategy_spec),
                          .outer = {.kind = outer, .lr = outer_lr, .momentum = outer_momentum, .inner = inner},
                          .failure_timeout = failure_timeout};
  job.cluster.steps_outside = steps_outside;  // Note [The workers' own step] (sim/simulator.cc)
  if (strategy == "auto") {
    job.allow = allow;
    job.choose_period = choose_period;  // Note [How auto chooses H]
  }
  runtime::validate(job);
  if (strategy != "auto") runtime::check_length_known(job);
  return job;
}

// Note [Python's sites]
// ---------------------
// weft.DataParallel's sites= or topology= (with wan_bandwidth=, wan_latency=)
// say which ranks share a site, as weft train's flags do (Note [Sites of a
// training job] in runtime/train/job.h): the planner prices the links they
// give, and hierarchical= and site_every= run by them. The sites are given
// before the job's world size is known (job_options runs before connect), so the
// job's topology is built by with_world once it is; a parameter-server job has
// none (its sites are emulated only, as weft train's). An engine with sites
// opens its site groups under a store prefix of its own (PyEngine), so that a
// second weft.DataParallel in the process never meets the first one's groups.
runtime::JobOptions with_world(runtime::JobOptions job, const py::dict& schedule_options, int world) {
  ranges::KeywordSpelling keywords;
  const auto [cluster, strategy_spec] = specs_of(schedule_options, world, job.servers);
  const SiteFlags& sites = cluster.sites;
  const bool given = sites.given();
  const StrategyOptions& so = job.strategy_options;
  if (given && job.servers > 0) {
    throw UsageError(fmt::format("{}: sites group the workers of an all-reduce job; with {} the servers' links "
                                 "are planned as their own (give no sites)",
                                 ranges::named(sites.topology.empty() ? "--sites" : "--topology"),
                                 ranges::given("--servers", std::to_string(job.servers))));
  }
  if (!given && (so.hierarchical || so.site_every > 0)) {
    throw UsageError(fmt::format("{}: needs sites: give {} or {}",
                                 so.hierarchical ? ranges::given("--hierarchical", "True")
                                                 : ranges::given("--site-every", std::to_string(so.site_every)),
                                 ranges::given("--sites", "AxB"), ranges::given("--topology", "FILE")));
  }
  job.cluster.topology = runtime::job_topology(sites, job.cluster, world);  // as weft train's
  return job;
}

// strategy="auto" on rank 0: (the recipe as with_recipe takes it, the reason).
std::pair<std::string, std::string> choose(const runtime::JobOptions& job, const std::string& profile_text,
                                           int workers, const std::string& source) {
  ranges::KeywordSpelling keywords;
  const Profile profile = parse_profile(profile_text, "profile");
  const runtime::JobChoice choice = [&] {
    py::gil_scoped_release release;
    return runtime::choose_for_job(job, profile, workers, source);
  }();
  return {runtime::job_identity(choice.job, workers).dump(), choice.reason};
}

// ---------------------------------------------------------------------------
// The shared schedule (Note [Shared schedule], runtime/train/worker.h): rank 0 gives
// the profile it measured (or `error`, which every rank then raises).

std::shared_ptr<runtime::SharedPlan> shared_schedule(Job& job, const runtime::JobOptions& options, int workers,
                                                     const std::optional<std::string>& profile,
                                                     const std::string& extra, const std::string& error) {
  py::gil_scoped_release release;
  ranges::KeywordSpelling keywords;
  return std::make_shared<runtime::SharedPlan>(runtime::share_plan(job.group, options, workers, [&] {
    if (!error.empty()) throw UsageError(error);
    if (!profile) throw std::logic_error("rank 0 needs the profile");
    return std::pair{parse_profile(*profile, "the profile"), extra};
  }));
}

// ---------------------------------------------------------------------------
// Optimizer options from Python dicts (python/weft/_optim.py builds them).

runtime::OptimizerOptions optimizer_options(const py::dict& d) {
  runtime::OptimizerOptions o;
  for (const auto& [key, value] : d) {
    const std::string name = key.cast<std::string>();
    if (name == "kind") o.kind = value.cast<std::string>();
    else if (name == "lr") o.lr = value.cast<double>();
    else if (name == "momentum") o.momentum = value.cast<double>();
    else if (name == "dampening") o.dampening = value.cast<double>();
    else if (name == "nesterov") o.nesterov = value.cast<bool>();
    else if (name == "beta1") o.beta1 = value.cast<double>();
    else if (name == "beta2") o.beta2 = value.cast<double>();
    else if (name == "eps") o.eps = value.cast<double>();
    else if (name == "weight_decay") o.weight_decay = value.cast<double>();
    else throw std::logic_error("optimizer option " + name);
  }
  return o;
}

using Layers = std::vector<std::vector<torch::Tensor>>;

std::unique_ptr<runtime::LayerOptimizer> make_optimizer(const Layers& layers, const std::vector<std::vector<py::dict>>& options) {
  std::vector<std::vector<runtime::OptimizerOptions>> each;
  for (const auto& layer : options) {
    each.emplace_back();
    for (const py::dict& d : layer) each.back().push_back(optimizer_options(d));
  }
  return std::make_unique<runtime::LayerOptimizer>(layers, std::move(each));
}

// ---------------------------------------------------------------------------
// The engine over a Python model's layers.

class PyEngine {
 public:
  // `trace_iterations` > 0: records the first ones (Note [Python's timeline]); every worker
  // constructs its engine at once.
  PyEngine(std::shared_ptr<Job> job, std::shared_ptr<runtime::SharedPlan> plan, const runtime::JobOptions& options,
           Layers layers, std::vector<std::string> names, runtime::LayerOptimizer& optimizer, int workers,
           bool zero_missing_gradients, int first_iteration, int trace_iterations)
      : job_(std::move(job)),
        plan_(std::move(plan)),
        options_(options),
        optimizer_(&optimizer),
        names_(names),
        workers_(workers) {
    Job& j = *job_;
    if (trace_iterations > 0) {
      recorder_ = std::make_unique<runtime::Recorder>(j.group.rank, first_iteration, trace_iterations,
                                                      runtime::common_origin(j.group, workers));
    }
    outer_ = runtime::make_outer(options, layers, find_strategy(options.strategy).family == Family::kLocalSgd);
    const int engine_index = j.announcement_groups++;
    const std::string announcements = fmt::format("python-announcements-{}", engine_index);
    if (runtime::uses_sites(plan_->schedule)) {  // Note [Python's sites]: a store prefix per engine
      sites_ = std::make_unique<runtime::SiteCollectives>(
          c10::make_intrusive<c10d::PrefixStore>(fmt::format("python-engine-{}/", engine_index), j.group.store),
          options.cluster.topology, j.group.rank, workers, options.failure_timeout, j.group.address);
    }
    engine_ = std::make_unique<runtime::Engine>(runtime::EngineOptions{
        .schedule = &plan_->schedule,
        .layers = std::move(layers),
        .layer_names = std::move(names),
        .optimizer = &optimizer,
        .collectives = j.group.collectives,
        .open_announcements = [&j, announcements] { return runtime::open_subgroup(j.group, announcements, 1); },
        .workers = workers,
        .gather_below = plan_->gather_below,
        .recorder = recorder_.get(),
        .stall_timeout = 2 * options.failure_timeout,
        .outer = outer_.get(),
        .sites = sites_.get(),
        .first_iteration = first_iteration,
        .zero_missing_gradients = zero_missing_gradients});
  }
  runtime::Engine& operator*() { return *engine_; }

  // Note [Python's timeline]
  // ------------------------
  // weft.DataParallel(trace=FILE) records what weft train --trace records (Note
  // [Measured timeline], runtime/train/measured_trace.h): the engine's backward,
  // messages and updates, and each layer's forward. The user's module runs its
  // own forward, so a layer's "fp" is the time from its forward pre-hook (once the
  // engine let it run) to the next layer's: the forward split at the layers'
  // starts, waits left out, what a module does around its children counted in the
  // layer that ran last. Only training forwards (begin_forward) are timed.
  void begin_forward() {
    timing_ = recorder_ && recorder_->records(engine_->iterations_done());
    layer_ = -1;
  }
  void wait_for_forward(int layer) {
    close_forward_segment();
    engine_->wait_for_forward(layer);
    if (timing_) {
      layer_ = layer;
      segment_start_ = recorder_->now();
    }
  }
  void end_forward() {
    close_forward_segment();
    timing_ = false;
  }
  // Collective over the workers (after finish()): rank 0 writes the trace beside
  // the prediction and returns its summary as JSON text (with
  // "predicted_iteration_s"); the others None. UsageError (ValueError) where
  // `file` cannot be written.
  // `steps_outside`: the run ended under the user's own step (Note [The
  // workers' own step] in sim/simulator.cc), which the prediction then prices.
  std::optional<std::string> write_trace(const std::string& file, bool steps_outside) {
    if (!recorder_) throw std::logic_error("write_trace: the engine records no timeline");
    ranges::KeywordSpelling keywords;
    runtime::JobOptions ran = options_;
    ran.cluster.steps_outside = steps_outside;
    return runtime::write_trace(job_->group, workers_, workers_, plan_.get(), ran, *recorder_,
                                engine_->iterations_done(), "--trace", file);
  }

  // What a checkpoint of this worker holds besides the module's own tensors
  // (Note [A worker's state], runtime/train/worker.h). REQUIRES: drained.
  std::map<std::string, torch::Tensor> state() const {
    return runtime::worker_state(*optimizer_, outer_.get(), engine_.get());
  }
  // Sets what state() returned. REQUIRES: before the first iteration. THROWS
  // UsageError (ValueError) naming an entry this worker does not keep or that does not fit.
  void load_state(const std::map<std::string, torch::Tensor>& state) {
    try {
      for (const auto& [name, t] : state) {
        if (!name.starts_with(runtime::kOptimizerEntries) && !name.starts_with(runtime::kOuterEntries) &&
            !name.starts_with(runtime::kEngineEntries)) {
          throw std::invalid_argument(fmt::format("{}: this job keeps no such state", name));
        }
      }
      runtime::load_worker_state(state, *optimizer_, outer_.get());
      runtime::load_engine_state(state, *engine_);
    } catch (const std::exception& e) {
      throw UsageError(fmt::format("load_state_dict: {}", e.what()));
    }
  }

 private:
  std::shared_ptr<Job> job_;
  std::shared_ptr<runtime::SharedPlan> plan_;  // the engine reads the schedule throughout
  runtime::JobOptions options_;                 // what the plan was planned for (write_trace's prediction)
  runtime::LayerOptimizer* optimizer_;    // kept alive by the Python engine object (keep_alive)
  std::unique_ptr<runtime::OuterOptimizer> outer_;  // declared before the engine, which uses it
  std::unique_ptr<runtime::SiteCollectives> sites_;  // likewise; null without sites
  std::vector<std::string> names_;
  int workers_;
  std::unique_ptr<runtime::Recorder> recorder_;  // likewise; null without trace
  std::unique_ptr<runtime::Engine> engine_;
  // The training forward being timed (Note [Python's timeline]): its layer now running, since when.
  bool timing_ = false;
  int layer_ = -1;
  Seconds segment_start_ = 0;

  void close_forward_segment() {
    if (!timing_ || layer_ < 0) return;
    recorder_->add({.lane = "compute", .name = "fp " + names_[static_cast<size_t>(layer_)], .start = segment_start_,
                    .end = recorder_->now(), .iteration = engine_->iterations_done(), .layer = layer_});
    layer_ = -1;
  }
};

// ---------------------------------------------------------------------------
// Profiles and plans.

std::string profile_json(const std::string& model, int batch, const std::vector<py::tuple>& layers) {
  Profile p{.model = model, .batch = batch, .device = "cpu"};
  for (const py::tuple& t : layers) {
    p.layers.push_back({.name = t[0].cast<std::string>(), .params = t[1].cast<std::int64_t>(),
                        .bytes_per_param = t[2].cast<int>(), .fp = t[3].cast<double>(), .bp = t[4].cast<double>(),
                        .shapes = t.size() > 5 ? t[5].cast<std::vector<std::vector<std::int64_t>>>()
                                               : std::vector<std::vector<std::int64_t>>{}});
  }
  validate(p, "the measured profile");
  return to_json(p);
}

// `steps_outside`: the workers' own optimizer steps (update="ddp"; Note [The
// workers' own step] in sim/simulator.cc).
std::string plan_of(const std::string& profile_text, int workers, const py::dict& options,
                    const std::vector<std::string>& strategies, const std::string& arch, int servers,
                    bool steps_outside) {
  ranges::KeywordSpelling keywords;
  const Profile profile = parse_profile(profile_text, "profile");
  auto [cluster_spec, strategy_spec] = specs_of(options, workers, servers);
  cluster_spec.arch = arch;
  Cluster cluster = runtime::planned_cluster(make_cluster(cluster_spec));
  cluster.steps_outside = steps_outside;
  PlanOptions plan_options{.strategies = strategies, .strategy = make_strategy_options(strategy_spec)};
  py::gil_scoped_release release;
  return plan_json(plan(profile, cluster, plan_options));
}

}  // namespace
}  // namespace weft::python

PYBIND11_MODULE(_C, m) {
  using namespace weft;
  using namespace weft::python;
  m.doc() = "weft's C++ engine, planner and simulator (docs/python.md)";
  py::register_exception<UsageError>(m, "UsageError", PyExc_ValueError);
  m.attr("TRACE_ITERATIONS") = runtime::TrainDefaults::kTraceIterations;  // weft train's --trace-iterations

  m.def("strategies", [] {
    std::vector<std::pair<std::string, std::string>> out;
    for (const StrategyInfo& s : strategies()) {
      out.emplace_back(std::string(s.name), s.family == Family::kSynchronous ? "ssgd"
                                            : s.family == Family::kLocalSgd  ? "local_sgd"
                                                                             : "ps");
    }
    return out;
  });

  py::class_<Job, std::shared_ptr<Job>>(m, "Job")
      .def_property_readonly("rank", [](const Job& j) { return j.group.rank; })
      .def_property_readonly("world", [](const Job& j) { return j.group.world; })
      .def("set", [](Job& j, const std::string& key, const std::string& value) {
        py::gil_scoped_release release;
        j.group.store->set(key, bytes_of(value));
      })
      .def("get", [](Job& j, const std::string& key) {
        std::string value;
        {
          py::gil_scoped_release release;
          value = string_of(j.group.store->get(key));
        }
        return py::bytes(value);
      })
      .def("barrier", [](Job& j) {
        py::gil_scoped_release release;
        j.group.collectives->barrier()->wait();
      })
      .def("broadcast", [](Job& j, const std::vector<torch::Tensor>& tensors) {
        py::gil_scoped_release release;
        broadcast(*j.group.collectives, tensors);
      }, "Rank 0's values of `tensors` on every rank (not while an engine exists).")
      .def("open_buffer_group", [](Job& j) {
        py::gil_scoped_release release;
        if (!j.buffers && j.group.world > 1) j.buffers = runtime::open_subgroup(j.group, "python-buffers", 1);
      })
      .def("average", [](Job& j, const std::vector<torch::Tensor>& tensors) {
        py::gil_scoped_release release;
        average(j, tensors);
      }, "Every rank's mean of `tensors`, in place, over a group of its own (collective; every rank trains).")
      .def("broadcast_buffers", [](Job& j, const std::vector<torch::Tensor>& tensors) {
        py::gil_scoped_release release;
        if (j.buffers) broadcast(*j.buffers, tensors);
      }, "Rank 0's values of `tensors` over the buffers' own group (open_buffer_group).");
  // Note [Profiled as trained] (runtime/measure/layer_profiler.h): the workers time
  // their layers together (_layers.measure calls arrive and keep_computing), and
  // rank 0 plans from the median of their profiles.
  py::class_<runtime::ProfilingTogether>(m, "ProfilingTogether")
      .def(py::init([](const Job& j, int ranks, const std::string& name) {
             return std::make_unique<runtime::ProfilingTogether>(j.group, ranks, name);
           }), py::arg("job"), py::arg("ranks"), py::arg("name"))
      .def("arrive", &runtime::ProfilingTogether::arrive, py::call_guard<py::gil_scoped_release>())
      .def("keep_computing", &runtime::ProfilingTogether::keep_computing, py::call_guard<py::gil_scoped_release>())
      .def("leave", &runtime::ProfilingTogether::leave, py::call_guard<py::gil_scoped_release>())
      .def("median", [](runtime::ProfilingTogether& t, const std::string& mine) -> std::optional<std::string> {
        const Profile profile = parse_profile(mine, "this worker's profile");
        std::optional<Profile> median;
        {
          py::gil_scoped_release release;
          median = t.median(profile);
        }
        if (!median) return std::nullopt;
        return to_json(*median);
      }, py::arg("mine"), "Rank 0: the median of every worker's profile (JSON text); the others: None.");
  m.def("connect", &join_job, py::arg("timeout"),
        "Joins the job of the torchrun variables, or a job of one when none is set.");

  py::class_<runtime::JobOptions>(m, "JobOptions")
      .def_property_readonly("strategy", [](const runtime::JobOptions& j) { return j.strategy; })
      .def_property_readonly("compression",
                             [](const runtime::JobOptions& j) { return to_string(j.strategy_options.compression); })
      .def("choose", &choose, py::arg("profile"), py::arg("workers"), py::arg("source"),
           "strategy='auto' (plan/auto.h): (the chosen recipe as JSON text, for with_recipe; the reason, one "
           "line). ValueError naming the keyword.")
      .def("with_recipe", [](const runtime::JobOptions& j, const std::string& recipe) {
        ranges::KeywordSpelling keywords;
        return runtime::with_recipe(j, json::parse(recipe), "strategy='auto'");
      }, py::arg("recipe"), "These options with the recipe `choose` returned (or a checkpoint's job), checked.")
      .def("with_world", &with_world, py::arg("schedule_options"), py::arg("world"),
           "These options with the job's sites for `world` ranks (Note [Python's sites]); ValueError naming "
           "the keyword.")
      .def_property_readonly("recipe", [](const runtime::JobOptions& j) {
        return describe_recipe(j.strategy, j.strategy_options);
      }, "The strategy and its codec and sites variant, in words.")
      .def_property_readonly("hierarchical", [](const runtime::JobOptions& j) { return j.strategy_options.hierarchical; })
      .def_property_readonly("site_every", [](const runtime::JobOptions& j) { return j.strategy_options.site_every; })
      .def_property_readonly("outer_warning", [](const runtime::JobOptions& j) {
        ranges::KeywordSpelling keywords;
        return runtime::outer_warning(j.outer);
      }, "Note [Outer defaults, measured]: why these outer settings are risky, or None.")
      .def("identity", [](const runtime::JobOptions& j, int workers) {
        return runtime::job_identity(j, workers).dump();
      }, py::arg("workers"), "What a checkpoint records of the job (runtime/train/job.h), as JSON text.");
  m.def("check_trace", [](const std::string& file, int iterations) {
    ranges::KeywordSpelling keywords;
    ranges::check(ranges::kTraceIterations, iterations);
    check_output("--trace", file);
  }, py::arg("file"), py::arg("iterations"),
        "ValueError unless `file` could be written and `iterations` is in --trace-iterations' range.");
  m.def("job_options", &make_job, py::arg("strategy"), py::arg("schedule_options"), py::arg("servers"),
        py::arg("steps"), py::arg("failure_timeout"), py::arg("outer_optimizer"), py::arg("outer_lr"),
        py::arg("outer_momentum"), py::arg("inner_optimizer"), py::arg("choose_period"),
        py::arg("allow") = std::vector<std::string>{}, py::arg("steps_outside") = false,
        "The job's options, checked as weft train checks its flags; ValueError naming the keyword.");
  py::class_<runtime::DivergenceWatch>(m, "DivergenceWatch")
      .def(py::init([](const runtime::JobOptions& j) {
        ranges::KeywordSpelling keywords;  // its advice names keywords
        return runtime::DivergenceWatch(j);
      }), py::arg("job"))
      .def("add", &runtime::DivergenceWatch::add, py::arg("loss"),
           "One iteration's loss; the warning, the first time the run diverges (Note [A diverging run]).");
  m.def("workers_of", [](const runtime::JobOptions& j, int world) {
    ranges::KeywordSpelling keywords;
    return runtime::workers_of(j, world);
  }, py::arg("job"), py::arg("world"), "The job's workers among `world` ranks; ValueError if none.");

  py::class_<runtime::SharedPlan, std::shared_ptr<runtime::SharedPlan>>(m, "SharedPlan")
      .def_property_readonly("extra", [](const runtime::SharedPlan& s) { return s.extra; })
      .def_property_readonly("profile_json", [](const runtime::SharedPlan& s) { return to_json(s.profile); })
      .def_property_readonly("options_json", [](const runtime::SharedPlan& s) { return s.schedule.options_json; })
      .def_property_readonly("messages_per_iteration",
                             [](const runtime::SharedPlan& s) { return s.schedule.ops(0).size(); });
  m.def("shared_schedule", &shared_schedule, py::arg("job"), py::arg("options"), py::arg("workers"),
        py::arg("profile"), py::arg("extra"), py::arg("error") = "",
        "Every rank's copy of rank 0's schedule (rank 0 gives `profile`, or `error` to fail every rank).");

  py::class_<runtime::LayerOptimizer>(m, "LayerOptimizer")
      .def(py::init(&make_optimizer), py::arg("layers"), py::arg("options"))
      .def("set_options", [](runtime::LayerOptimizer& o, int layer, std::size_t parameter, const py::dict& options) {
        o.set_options(layer, parameter, optimizer_options(options));
      }, py::arg("layer"), py::arg("parameter"), py::arg("options"))
      .def("step", &runtime::LayerOptimizer::step, py::call_guard<py::gil_scoped_release>())
      .def("zero_grad", &runtime::LayerOptimizer::zero_grad)
      .def("state", &runtime::LayerOptimizer::state, "\"steps\" per layer, \"m/<l>/<i>\", \"v/<l>/<i>\" (copies).")
      .def("load_state", [](runtime::LayerOptimizer& o, const std::map<std::string, torch::Tensor>& state) {
        try {
          o.load_state(state);
        } catch (const std::logic_error& e) {
          throw UsageError(e.what());
        }
      }, py::arg("state"), "Sets what state() returned; ValueError naming a tensor that does not fit.");

  py::class_<PyEngine>(m, "Engine")
      .def(py::init<std::shared_ptr<Job>, std::shared_ptr<runtime::SharedPlan>, const runtime::JobOptions&, Layers,
                    std::vector<std::string>, runtime::LayerOptimizer&, int, bool, int, int>(),
           py::arg("job"), py::arg("schedule"), py::arg("options"), py::arg("layers"), py::arg("names"),
           py::arg("optimizer"), py::arg("workers"), py::arg("zero_missing_gradients"), py::arg("first_iteration"),
           py::arg("trace_iterations"), py::keep_alive<1, 7>(), py::call_guard<py::gil_scoped_release>())
      .def("state", &PyEngine::state, "The worker's state besides the module's tensors (REQUIRES: drained).")
      .def("load_state", &PyEngine::load_state, py::arg("state"), "Sets state() before the first iteration.")
      .def("wait_for_forward", &PyEngine::wait_for_forward, py::call_guard<py::gil_scoped_release>())
      .def("begin_forward", &PyEngine::begin_forward, "A training forward starts (Note [Python's timeline]).")
      .def("end_forward", &PyEngine::end_forward, "The training forward returned.")
      .def("write_trace", &PyEngine::write_trace, py::arg("file"), py::arg("steps_outside"),
           py::call_guard<py::gil_scoped_release>(),
           "Collective, after finish(): rank 0 writes the measured timeline and returns its summary (JSON text).")
      .def("start_backward", [](PyEngine& e) { (*e).start_backward(); })
      .def("end_backward", [](PyEngine& e) { (*e).end_backward(); }, py::call_guard<py::gil_scoped_release>())
      .def("stepped_outside", [](PyEngine& e) { (*e).stepped_outside(); },
           py::call_guard<py::gil_scoped_release>(),
           "The user's optimizer stepped an iteration the engine did not see (update='ddp' under local SGD).")
      .def("drain", [](PyEngine& e) { (*e).drain(); }, py::call_guard<py::gil_scoped_release>())
      .def("finish", [](PyEngine& e) { (*e).finish(); }, py::call_guard<py::gil_scoped_release>())
      .def("agreed_parameters", [](PyEngine& e) { return (*e).agreed_parameters(); },
           py::call_guard<py::gil_scoped_release>(),
           "Every layer's agreed parameters, flat in layer order, or None (Engine::agreed_parameters; REQUIRES: drained).")
      .def_property_readonly("iterations_done", [](PyEngine& e) { return (*e).iterations_done(); });

  m.def("serve", [](std::shared_ptr<Job> job, std::shared_ptr<runtime::SharedPlan> plan,
                    const runtime::JobOptions& options, Layers layers, runtime::LayerOptimizer& optimizer,
                    int workers) {
    py::gil_scoped_release release;
    // EASGD's centre (ServerOptions::outer).
    const auto centre = runtime::make_outer(options, layers, plan->schedule.easgd.beta > 0);
    runtime::run_server({.schedule = &plan->schedule, .layers = std::move(layers), .optimizer = &optimizer,
                         .outer = centre.get(), .group = job->group.collectives, .workers = workers,
                         .server = job->group.rank - workers, .iterations = *options.steps});
  }, "Serves the job's steps as parameter server rank - workers (REQUIRES: options.steps set).");

  m.def("profile_json", &profile_json, py::arg("model"), py::arg("batch"), py::arg("layers"),
        "The profile file's JSON (profile/profile.h) of layers (name, params, bytes_per_param, fp_s, bp_s[, shapes]).");
  m.def("plan_json", &plan_of, py::arg("profile"), py::arg("workers"), py::arg("options"),
        py::arg("strategies"), py::arg("arch"), py::arg("servers"), py::arg("steps_outside") = false,
        "`weft plan --json` for a profile's JSON text.");
}
