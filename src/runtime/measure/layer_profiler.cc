#include "runtime/measure/layer_profiler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <ctime>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include <sched.h>
#include <unistd.h>

#include <fmt/format.h>

#include "runtime/comm/process_group.h"
#include "runtime/launch/launcher.h"
#include "runtime/launch/worker_env.h"
#include "units/units.h"

namespace weft::runtime {
namespace {

using Clock = std::chrono::steady_clock;

Seconds since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

void check(const LayerProfilerOptions& o) {
  const auto require = [](bool ok, std::string_view flag, int value, std::string_view accepted) {
    if (!ok) throw UsageError(fmt::format("{} {} is not accepted; expected {}", flag, value, accepted));
  };
  require(o.batch >= 1, "--batch", o.batch, "an integer >= 1");
  require(o.warmup >= 0, "--warmup", o.warmup, "an integer >= 0");
  require(o.iterations >= 1, "--iterations", o.iterations, "an integer >= 1");
  require(o.threads >= 1, "--threads", o.threads, "an integer >= 1");
}

struct LayerTimes {
  std::vector<Seconds> forward;
  std::vector<Seconds> backward;
};

// One iteration, layer by layer (the method in layer_profiler.h).
LayerTimes time_iteration(LayeredModel& model, const Batch& batch) {
  const int layers = model.num_layers();
  LayerTimes times{std::vector<Seconds>(layers), std::vector<Seconds>(layers)};
  std::vector<torch::Tensor> inputs(layers);
  std::vector<torch::Tensor> outputs(layers);
  for (int l = 0; l < layers; ++l) {
    inputs[l] = l == 0 ? batch.input : outputs[l - 1].detach().requires_grad_(true);
    const auto start = Clock::now();
    outputs[l] = model.forward_layer(l, inputs[l]);
    if (l == layers - 1) outputs[l] = model.loss(outputs[l], batch.target);
    times.forward[l] = since(start);
  }
  torch::Tensor gradient;  // of the loss with respect to the current layer's output
  for (int l = layers - 1; l >= 0; --l) {
    const auto start = Clock::now();
    if (l == layers - 1) outputs[l].backward();
    else outputs[l].backward(gradient);
    times.backward[l] = since(start);
    if (l > 0) gradient = inputs[l].grad();
  }
  return times;
}

}  // namespace

Profile profile_model(LayeredModel& model, const Batch& batch, const LayerProfilerOptions& options) {
  check(options);
  torch::set_num_threads(options.threads);
  const int layers = model.num_layers();
  std::vector<std::vector<Seconds>> forward(layers), backward(layers);
  std::vector<Seconds> iteration_times;
  const int total = options.warmup + options.iterations;
  const auto iteration = [&] {
    for (const torch::Tensor& p : model.parameters()) {
      if (p.grad().defined()) p.grad().zero_();
    }
    return time_iteration(model, batch);
  };
  for (int i = 0; i < total; ++i) {
    if (i == options.warmup && options.before_timing) options.before_timing();
    const LayerTimes times = iteration();
    if (i >= options.warmup) {
      Seconds sum = 0;
      for (int l = 0; l < layers; ++l) {
        forward[l].push_back(times.forward[l]);
        backward[l].push_back(times.backward[l]);
        sum += times.forward[l] + times.backward[l];
      }
      iteration_times.push_back(sum);
    }
    if (options.progress) options.progress(i + 1, total);
  }
  if (options.keep_computing) {
    while (options.keep_computing()) iteration();
  }
  Profile profile = model.layer_profile(options.model, static_cast<int>(batch.input.size(0)));
  profile.device = fmt::format("cpu, {} thread{}", options.threads, options.threads == 1 ? "" : "s");
  // Note [Time slices]: the layers' medians, scaled to add up to the median iteration.
  Seconds medians = 0;
  for (int l = 0; l < layers; ++l) {
    profile.layers[l].fp = median(forward[l]);
    profile.layers[l].bp = median(backward[l]);
    medians += profile.layers[l].fp + profile.layers[l].bp;
  }
  const double scale = medians > 0 ? median(iteration_times) / medians : 1.0;
  for (Layer& layer : profile.layers) {
    layer.fp *= scale;
    layer.bp *= scale;
  }
  return profile;
}

Profile profile_model(const LayerProfilerOptions& options) {
  check(options);
  const std::shared_ptr<LayeredModel> model = make_model(options.model, options.seed);
  const Batch batch =
      make_data({.model = options.model, .synthetic = true, .batch = options.batch, .seed = options.seed})->next();
  return profile_model(*model, batch, options);
}

namespace {

// Rounds of collectives back to back on their own Gloo group, opened under `name`
// (one no other group of the job has used), until stop(), each round timed (Note
// [Measuring the cores]). Round k all-reduces one buffer of each size of
// rounds[k % rounds.size()] at once and ends when they all have. A collective error ends the stream, wakes wait_for() and is rethrown
// by stop().
class CollectiveStream {
 public:
  CollectiveStream(const Group& group, const std::string& name, std::vector<std::vector<Bytes>> rounds)
      : collectives_(open_subgroup(group, name, kRuntimeCollectiveThreads)),
        thread_([this, rounds = std::move(rounds)] { run(rounds); }) {}
  CollectiveStream(const CollectiveStream&) = delete;
  CollectiveStream& operator=(const CollectiveStream&) = delete;
  ~CollectiveStream() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

  // Blocks until `count` rounds have completed (or the stream failed).
  void wait_for(std::size_t count) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return timed_.size() >= count || ended_; });
  }

  void stop() {
    stop_ = true;
    thread_.join();
    if (error_) std::rethrow_exception(error_);
  }

 private:
  struct Round {
    std::size_t kind;
    Clock::time_point start, end;
  };

  void run(const std::vector<std::vector<Bytes>>& rounds) {
    try {
      // Per round, one buffer per all-reduce (zeros, so sums stay finite), and
      // last in the first buffer a flag: every rank stops after the same round.
      std::vector<std::vector<torch::Tensor>> buffers;
      for (const std::vector<Bytes>& sizes : rounds) {
        auto& round = buffers.emplace_back();
        for (std::size_t i = 0; i < sizes.size(); ++i) {
          round.push_back(torch::zeros({std::max<Bytes>(sizes[i] / 4, 1) + (i == 0 ? 1 : 0)}));
        }
      }
      for (std::size_t k = 0;; ++k) {
        const std::size_t kind = k % rounds.size();
        std::vector<torch::Tensor>& round = buffers[kind];
        float* flag = round[0].data_ptr<float>() + (round[0].numel() - 1);
        *flag = stop_ ? 1 : 0;
        const auto start = Clock::now();
        std::vector<c10::intrusive_ptr<c10d::Work>> works;
        for (torch::Tensor& buffer : round) {
          std::vector<torch::Tensor> one{buffer};
          works.push_back(collectives_->allreduce(one));
        }
        for (const auto& work : works) work->wait();
        const auto end = Clock::now();
        const bool last = *flag > 0;
        {
          std::lock_guard lock(mutex_);
          timed_.push_back({kind, start, end});
          changed_.notify_all();
        }
        if (last) break;
      }
    } catch (...) {
      error_ = std::current_exception();
    }
    std::lock_guard lock(mutex_);
    ended_ = true;
    changed_.notify_all();
  }

  c10::intrusive_ptr<c10d::ProcessGroup> collectives_;
  std::atomic<bool> stop_ = false;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Round> timed_;  // guarded by mutex_
  bool ended_ = false;        // guarded by mutex_
  std::exception_ptr error_;
  std::thread thread_;  // last: starts once the rest is built
};

// One timing phase of Note [Profiling together], every rank of `group` profiling.
Profile profile_phase(const Group& group, const LayerProfilerOptions& options, const std::string& name) {
  ProfilingTogether together(group, group.world, name);
  return profile_model(together.hooked(options));
}

constexpr std::size_t kQuietRounds = 10;  // after one that warms the connections up

// This process's CPU time so far, all threads.
Seconds process_cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Note [Measuring the cores]: comm_cores from a buffer of the model's size
// all-reduced back to back while this rank only waits, then comm_weight from
// the layers timed beside that stream. REQUIRES: host.processes and host.cores.
void measure_comm_cores(const Group& group, const LayerProfilerOptions& options, const Profile& mine, Host& host) {
  constexpr double kAllReducesTimedLoaded = 10;
  constexpr Seconds kTimedLoadedAtLeast = 0.5;  // mlp computes 40 iterations in ~15 ms
  CollectiveStream stream(group, "stream", {{mine.total_bytes()}});
  stream.wait_for(1);  // warms the connections up
  const Seconds cpu = process_cpu_seconds();
  const auto start = Clock::now();
  stream.wait_for(1 + kQuietRounds);
  const Seconds used = process_cpu_seconds() - cpu;
  const Seconds wall = since(start);
  host.comm_cores = wall > 0 ? std::clamp(used / wall, 0.0, 1.0) : 0;
  // The timed iterations must last at least ten quiet all-reduces and half a
  // second, whatever --iterations says.
  LayerProfilerOptions loaded_options = options;
  const Seconds quiet = mine.forward_time() + mine.backward_time();
  if (quiet > 0) {
    const Seconds at_least = std::max(kTimedLoadedAtLeast, kAllReducesTimedLoaded * wall / kQuietRounds);
    loaded_options.iterations = std::max(options.iterations, static_cast<int>(std::ceil(at_least / quiet)));
  }
  const Profile loaded = profile_phase(group, loaded_options, "weft/profiled-communicating");
  stream.stop();
  const Seconds communicating = loaded.forward_time() + loaded.backward_time();
  host.comm_weight = comm_weight_of(host, quiet > 0 ? std::max(0.0, communicating / quiet - 1) : 0);
}

// The bytes of the model's median layer, of those with parameters (0 if none).
Bytes median_layer_bytes(const Profile& profile) {
  std::vector<double> sizes;
  for (const Layer& layer : profile.layers) {
    if (layer.bytes() > 0) sizes.push_back(static_cast<double>(layer.bytes()));
  }
  return sizes.empty() ? 0 : static_cast<Bytes>(median(std::move(sizes)));
}

// Note [Measuring skew]: how much later than the average process the last one
// reaches a collective, the processes training in step, and how much further it
// falls behind when they compute several iterations apart, and how much later a
// collective issued as they compute ends than the shared cores explain; sets
// host.skew, host.back_to_back_skew, host.drift and host.core_wait. REQUIRES:
// host's cores measured (Note [Measuring the cores]).
void measure_skew(const Group& group, const LayerProfilerOptions& options, const Profile& mine, Host& host) {
  const std::shared_ptr<LayeredModel> model = make_model(options.model, options.seed);
  const Batch batch =
      make_data({.model = options.model, .synthetic = true, .batch = options.batch, .seed = options.seed})->next();
  // The collectives aside, on a group of their own so that they never queue
  // behind the meetings' (Note [Measuring skew]): all-reduces of the model's
  // median layer, one as each in-step backward starts, as many again at the end
  // while the processes wait.
  const c10::intrusive_ptr<c10d::ProcessGroup> aside = open_subgroup(group, "aside", kRuntimeCollectiveThreads);
  std::vector<torch::Tensor> aside_buffer{torch::zeros({std::max<Bytes>(median_layer_bytes(mine) / 4, 1)})};
  // In step, per iteration: after the forward, after the backward, and right after
  // that. Then after each of `iterations` whole iterations with nothing aside,
  // and after kApart iterations without meeting, at least 5 times.
  enum Meeting { kAfterForward, kAfterBackward, kBackToBack, kMeetings };
  constexpr int kApart = 5;
  const int in_step = kMeetings * options.iterations;
  const int whole = options.iterations;                       // meetings
  const int apart = std::max(5, options.iterations / kApart);  // meetings
  // [0][rank][m]: how long the rank waited in meeting m; [1][rank][m]: how long
  // it computed between the meeting before and m.
  std::vector<torch::Tensor> times{torch::zeros({2, group.world, in_step + whole + apart}, torch::kDouble)};
  auto my_times = times[0].accessor<double, 3>();
  std::vector<torch::Tensor> token{torch::zeros({1})};
  // [0][rank][i]: from the rank's issue of timed iteration i's collective aside
  // during the backward to its end there; [1][rank][i]: the same for the i-th
  // one issued while the processes wait.
  enum AsideRound { kComputing, kWaiting, kAsideRounds };
  std::vector<torch::Tensor> aside_times{
      torch::zeros({kAsideRounds, group.world, options.iterations}, torch::kDouble)};
  auto my_aside_times = aside_times[0].accessor<double, 3>();
  auto left = Clock::now();
  int m = -1;  // the meeting being timed; -1 while warming up
  const auto meet = [&] {
    const auto arrived = Clock::now();
    group.collectives->allreduce(token)->wait();
    const auto computed = arrived - left;
    left = Clock::now();
    if (m < 0) return;
    my_times[0][group.rank][m] = std::chrono::duration<double>(left - arrived).count();
    my_times[1][group.rank][m] = std::chrono::duration<double>(computed).count();
    ++m;
  };
  const auto forward = [&] {
    torch::Tensor x = batch.input;
    for (int l = 0; l < model->num_layers(); ++l) x = model->forward_layer(l, x);
    return model->loss(x, batch.target);
  };
  // An iteration in step, meeting after the forward, with a collective aside
  // issued as its backward starts; returns how long that took here, from issue
  // to end (a callback times the end: the backward may still be running then).
  const auto iterate_in_step = [&] {
    const torch::Tensor loss = forward();
    meet();
    // The callback shares the promise: it may still be inside set_value when
    // this thread has the value and goes on.
    const auto ended = std::make_shared<std::promise<Clock::time_point>>();
    std::future<Clock::time_point> end_time = ended->get_future();
    const auto issued = Clock::now();
    const c10::intrusive_ptr<c10d::Work> work = aside->allreduce(aside_buffer);
    work->getFuture()->addCallback([ended](c10::ivalue::Future&) { ended->set_value(Clock::now()); });
    loss.backward();
    const Clock::time_point end = end_time.get();
    work->wait();  // rethrows the collective's error
    return std::chrono::duration<double>(end - issued).count();
  };
  meet();
  for (int i = 0; i < options.warmup + options.iterations; ++i) {
    if (i == options.warmup) m = 0;
    const Seconds computing = iterate_in_step();
    if (i >= options.warmup) my_aside_times[kComputing][group.rank][i - options.warmup] = computing;
    meet();
    meet();
  }
  for (int i = 0; i < whole; ++i) {
    forward().backward();
    meet();
  }
  for (int period = 0; period < apart; ++period) {
    for (int i = 0; i < kApart; ++i) forward().backward();
    meet();
  }
  // The same collectives aside while every process waits, each right after an
  // untimed meeting (one after the back-to-back meeting would change what that
  // meeting measures: Note [Measuring skew]).
  for (int i = 0; i < options.iterations; ++i) {
    group.collectives->allreduce(token)->wait();
    const auto issued = Clock::now();
    aside->allreduce(aside_buffer)->wait();
    my_aside_times[kWaiting][group.rank][i] = since(issued);
  }
  group.collectives->allreduce(times)->wait();  // every rank's rows, on every rank
  group.collectives->allreduce(aside_times)->wait();
  const auto all = times[0].accessor<double, 3>();
  const auto least_over_ranks = [&](auto value_of) {
    Seconds least = value_of(0);
    for (int r = 1; r < group.world; ++r) least = std::min(least, value_of(r));
    return least;
  };
  // How long the collective took after the last rank reached it: the least wait.
  const auto least_wait_at = [&](int k) { return least_over_ranks([&](int r) { return all[0][r][k]; }); };
  // How much later than the average rank the last one reached meeting k, and how
  // long the ranks computed before it, on average.
  const auto mean_over_ranks = [&](int row, int k) {
    Seconds sum = 0;
    for (int r = 0; r < group.world; ++r) sum += all[row][r][k];
    return sum / group.world;
  };
  const auto skew_at = [&](int k) { return mean_over_ranks(0, k) - least_wait_at(k); };
  const auto computed_before = [&](int k) { return mean_over_ranks(1, k); };
  // Where the ranks computed between meetings [from, to): the skews and the mean compute.
  const auto meetings = [&](int from, int to) {
    std::pair<std::vector<Seconds>, Seconds> skews_and_compute{{}, 0};
    for (int k = from; k < to; ++k) {
      skews_and_compute.first.push_back(skew_at(k));
      skews_and_compute.second += computed_before(k) / (to - from);
    }
    return skews_and_compute;
  };
  std::vector<Seconds> back_to_back, aside_computing, aside_waiting;
  for (int k = kBackToBack; k < in_step; k += kMeetings) back_to_back.push_back(skew_at(k));
  const auto [from_whole, computed_whole] = meetings(in_step, in_step + whole);
  const auto [from_apart, computed_apart] = meetings(in_step + whole, in_step + whole + apart);
  const auto all_aside = aside_times[0].accessor<double, 3>();
  for (int i = 0; i < options.iterations; ++i) {
    aside_computing.push_back(least_over_ranks([&](int r) { return all_aside[kComputing][r][i]; }));
    aside_waiting.push_back(least_over_ranks([&](int r) { return all_aside[kWaiting][r][i]; }));
  }
  host.skew = median(from_whole);
  host.back_to_back_skew = median(back_to_back);
  // Beside the layers the collective also advances slower, by the shared cores.
  const double stretch = core_shares(host, host.processes, host.processes).message;
  host.core_wait = std::max(0.0, median(aside_computing) - median(aside_waiting) * stretch);
  const Seconds longer = computed_apart - computed_whole;
  if (longer > 0) host.drift = std::max(0.0, (median(from_apart) - host.skew) / longer);
}

// One of the processes of Note [Profiling together].
// The cores this process may run on (its affinity mask, which a cpuset or
// taskset narrows), or 0 if they cannot be told.
int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return ::sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
}

std::string host_name() {
  char name[256] = {};
  return ::gethostname(name, sizeof(name) - 1) == 0 ? std::string(name) : std::string();
}

int profile_together(const ModelProfileJob& job, const WorkerEnv& env) {
  const Group group = connect(env, job.failure_timeout);
  LayerProfilerOptions options = job.profiler;
  if (group.rank != 0) options.progress = nullptr;
  Profile mine = profile_phase(group, options, "weft/profiled");
  Host mine_host;
  if (job.interference) {
    // Provisional: every process on this machine, as rank 0 counts them below.
    mine_host.processes = group.world;
    mine_host.cores = available_cores();
    measure_comm_cores(group, options, mine, mine_host);
    measure_skew(group, options, mine, mine_host);
  }
  const auto put = [&](const std::string& key, const std::string& text) {
    group.store->set(fmt::format("weft/{}/{}", key, group.rank), std::vector<std::uint8_t>(text.begin(), text.end()));
  };
  const auto get = [&](const std::string& key, int r) {
    const std::vector<std::uint8_t> text = group.store->get(fmt::format("weft/{}/{}", key, r));
    return std::string(text.begin(), text.end());
  };
  put("host", to_json(mine_host));
  const std::string name = host_name();
  put("hostname", name);
  ProfilingTogether gathered(group, group.world, "weft/profiled/gathered");
  if (std::optional<Profile> median = gathered.median(mine)) {  // rank 0
    std::vector<Host> hosts;
    int beside = 0;  // processes on rank 0's machine, itself included (Note [Shared cores], sim/simulator.cc)
    for (int r = 0; r < group.world; ++r) {
      hosts.push_back(parse_host(get("host", r), fmt::format("rank {}'s host", r)));
      if (!name.empty() && get("hostname", r) == name) ++beside;
    }
    Profile merged = std::move(*median);
    merged.device = fmt::format("{}, {} processes profiling together{}", mine.device, group.world,
                                job.interference ? ", then all-reducing" : "");
    Host host = median_host(hosts);
    host.processes = beside;
    host.cores = beside > 0 ? available_cores() : 0;
    host.description = fmt::format("{}: {} processes on {} cores{}", name, beside, host.cores,
                                   job.interference ? ", measured while profiling " + merged.model : "");
    job.report(merged, host);
  }
  group.collectives->barrier()->wait();  // rank 0 hosts the store: nobody leaves before it is done
  return 0;
}

// One process of a job: launched by weft, or started by hand with the torchrun variables.
bool in_a_job(std::optional<int> nproc) { return is_launched_worker() || (has_worker_env() && !nproc); }

}  // namespace

ProfilingTogether::ProfilingTogether(const Group& group, int ranks, std::string name)
    : store_(group.store), rank_(group.rank), ranks_(ranks), name_(std::move(name)) {}

void ProfilingTogether::count(const std::string& what, bool& counted) {
  if (counted) return;
  counted = true;
  if (store_->add(name_ + what, 1) == ranks_) store_->set(name_ + what + "/all", std::vector<std::uint8_t>{1});
}

void ProfilingTogether::arrive() {
  count("/arrived", arrived_);
  store_->wait({name_ + "/arrived/all"});
}

bool ProfilingTogether::keep_computing() {
  count("/done", done_);
  return !store_->check({name_ + "/done/all"});
}

void ProfilingTogether::leave() {
  count("/arrived", arrived_);
  count("/done", done_);
  publish("");  // none: rank 0 goes on without it
}

void ProfilingTogether::publish(const std::string& profile_json) {
  if (published_) return;
  published_ = true;
  store_->set(fmt::format("{}/profile/{}", name_, rank_),
              std::vector<std::uint8_t>(profile_json.begin(), profile_json.end()));
}

std::optional<Profile> ProfilingTogether::median(const Profile& mine) {
  publish(to_json(mine));
  if (rank_ != 0) return std::nullopt;
  std::vector<Profile> profiles;
  for (int r = 0; r < ranks_; ++r) {
    const std::vector<std::uint8_t> text = store_->get(fmt::format("{}/profile/{}", name_, r));
    if (text.empty()) continue;
    profiles.push_back(parse_profile(std::string(text.begin(), text.end()), fmt::format("rank {}'s profile", r)));
  }
  return median_profile(profiles);  // rank 0's own is among them
}

LayerProfilerOptions ProfilingTogether::hooked(LayerProfilerOptions options) {
  options.before_timing = [this] { arrive(); };
  options.keep_computing = [this] { return keep_computing(); };
  return options;
}

int profiled_processes(std::optional<int> nproc) {
  return in_a_job(nproc) ? read_worker_env().world : nproc.value_or(1);
}

int run_model_profile(const ModelProfileJob& job) {
  if (job.nproc && *job.nproc < 1) {
    throw UsageError(fmt::format("--nproc {}: expected an integer >= 1", *job.nproc));
  }
  if (job.interference && profiled_processes(job.nproc) < 2) {
    throw UsageError("--interference times the layers while the processes all-reduce: give --nproc 2 or more "
                     "(or run inside a job of 2 or more workers)");
  }
  if (in_a_job(job.nproc)) return profile_together(job, read_worker_env());
  if (job.nproc && *job.nproc > 1) {
    return launch({.nproc = *job.nproc, .failure_timeout = job.failure_timeout, .cores = job.cores});
  }
  job.report(profile_model(job.profiler), Host{});
  return 0;
}

}  // namespace weft::runtime
