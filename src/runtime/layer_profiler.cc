#include "runtime/layer_profiler.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "runtime/launcher.h"
#include "runtime/process_group.h"
#include "runtime/worker_env.h"
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

// One of the processes of Note [Profiling together].
int profile_together(const ModelProfileJob& job, const WorkerEnv& env) {
  const Group group = connect(env, job.failure_timeout);
  LayerProfilerOptions options = job.profiler;
  if (group.rank != 0) options.progress = nullptr;
  options.before_timing = [&] { group.collectives->barrier()->wait(); };
  const std::string done = "weft/profiled";
  bool counted = false;
  options.keep_computing = [&] {
    if (!counted) group.store->add(done, 1);
    counted = true;
    return group.store->add(done, 0) < group.world;
  };
  const Profile mine = profile_model(options);
  const std::string json = to_json(mine);
  group.store->set(fmt::format("weft/profile/{}", group.rank), std::vector<std::uint8_t>(json.begin(), json.end()));
  if (group.rank == 0) {
    std::vector<Profile> all;
    for (int r = 0; r < group.world; ++r) {
      const std::vector<std::uint8_t> text = group.store->get(fmt::format("weft/profile/{}", r));
      all.push_back(parse_profile(std::string(text.begin(), text.end()), fmt::format("rank {}'s profile", r)));
    }
    Profile merged = median_profile(all);
    merged.device = fmt::format("{}, {} processes profiling together", mine.device, group.world);
    job.report(merged);
  }
  group.collectives->barrier()->wait();  // rank 0 hosts the store: nobody leaves before it is done
  return 0;
}

}  // namespace

int run_model_profile(const ModelProfileJob& job) {
  if (job.nproc && *job.nproc < 1) {
    throw UsageError(fmt::format("--nproc {}: expected an integer >= 1", *job.nproc));
  }
  if (is_launched_worker()) return profile_together(job, read_worker_env());
  if (job.nproc && *job.nproc > 1) return launch({.nproc = *job.nproc, .failure_timeout = job.failure_timeout});
  if (has_worker_env() && !job.nproc) return profile_together(job, read_worker_env());
  job.report(profile_model(job.profiler));
  return 0;
}

}  // namespace weft::runtime
