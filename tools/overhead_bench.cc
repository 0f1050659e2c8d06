// Engine overhead (issue 3): with one process, the iteration time of a model trained
// through weft's communication engine against a plain LibTorch training loop of
// the same model. Goal: ≤ 1.05×.
//
//   (a) plain: forward of every layer, loss, backward, torch::optim::SGD step,
//       zero_grad;
//   (b) weft:  runtime/train/iteration.h's train_iteration, the very iteration of weft
//       train — wait_for_forward before each layer, start_backward /
//       end_backward around the backward — with an Engine over a world-1 Gloo
//       group (a c10d::HashStore instead of the TCPStore, so no port is needed)
//       executing the strategy's schedule, its layer-wise SGD steps and zeroing
//       done by the engine's thread.
//
// Both use the same model (same seed), the same pre-made batches (synthetic data,
// so no file is read while timing) and one intra-op thread, as `weft train` does.
// A repetition times `--iterations` iterations of (a) and of (b) back to back —
// (b) ending with Engine::drain(), so its last update is inside the time — in
// alternating order (ab, ba, ab, ...), so that slow drift of a shared, noisy machine
// falls on both alike; the figure is the per-repetition ratio b/a, summarised by
// its median and quartiles. A second table says where weft's extra time goes: how
// long the training thread spends outside its layers (blocked in the engine,
// mostly), and, from the timeline of the (untimed) warm-up run, how long messages
// take from issue to unpacked. Prints Markdown on stdout; the load average before
// and after goes with it, since the machine is shared.
//
// Run: build/tools/bench_overhead [--models mlp,cnn] [--strategies wfbp]
//        [--iterations 40] [--repetitions 15] [--batch 32]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/torch.h>

#include "cost/cluster.h"
#include "runtime/comm/engine.h"
#include "runtime/comm/process_group.h"
#include "runtime/model/data.h"
#include "runtime/model/model.h"
#include "runtime/model/optimizer.h"
#include "runtime/train/iteration.h"
#include "schedule/schedule.h"
#include "schedulers/strategies.h"
#include "timeline/recorder.h"

namespace weft::runtime {
namespace {

using namespace literals;
using Clock = std::chrono::steady_clock;

struct Options {
  std::vector<std::string> models{"mlp", "cnn"};
  std::vector<std::string> strategies{"wfbp"};
  int iterations = 40;   // per timed run
  int repetitions = 15;  // interleaved pairs of runs
  int batch = 32;
  double lr = 0.01;
};

// Batches generated before timing and cycled through; a handful keeps the data
// different from iteration to iteration without measuring the generator.
constexpr int kBatches = 8;

std::vector<Batch> make_batches(const std::string& model, int batch) {
  auto data = make_data({.model = model, .synthetic = true, .rank = 0, .world = 1, .batch = batch, .seed = 1});
  std::vector<Batch> out;
  for (int i = 0; i < kBatches; ++i) out.push_back(data->next());
  return out;
}

Seconds since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// (a) A plain LibTorch training loop.
class PlainLoop {
 public:
  PlainLoop(const std::string& model, double lr)
      : model_(make_model(model, /*seed=*/1)), optimizer_(model_->parameters(), torch::optim::SGDOptions(lr)) {}

  Seconds run(const std::vector<Batch>& batches, int iterations) {
    const auto start = Clock::now();
    for (int t = 0; t < iterations; ++t) {
      const Batch& b = batches[static_cast<size_t>(t % kBatches)];
      torch::Tensor x = b.input;
      for (int l = 0; l < model_->num_layers(); ++l) x = model_->forward_layer(l, x);
      torch::Tensor loss = model_->loss(x, b.target);
      loss.backward();
      optimizer_.step();
      optimizer_.zero_grad();
      sink_ += loss.item<double>();  // weft train reads the loss too (metrics)
    }
    return since(start);
  }

 private:
  std::shared_ptr<LayeredModel> model_;
  torch::optim::SGD optimizer_;
  double sink_ = 0;
};

// (b) The same model trained through the engine, as runtime/train/trainer.cc does.
class WeftLoop {
 public:
  // Records the timeline of its first `recorded` iterations (the warm-up run).
  WeftLoop(const std::string& model, const std::string& strategy, int batch, double lr, int recorded)
      : model_(make_model(model, /*seed=*/1)), recorder_(/*worker=*/0, /*first=*/0, recorded) {
    const Profile profile = model_->layer_profile(model, batch);
    // `weft train`'s defaults; with one worker they only shape mgwfbp/dcredit choices.
    const Cluster cluster{.workers = 1, .bandwidth = 1_Gbit, .latency = 50_us};
    validate(cluster);
    schedule_ = find_strategy(strategy).make(profile, cluster, StrategyOptions{});
    validate(schedule_, profile, 1);
    std::vector<std::vector<torch::Tensor>> layers;
    for (int l = 0; l < model_->num_layers(); ++l) {
      layers.push_back(model_->layer_parameters(l));
      names_.push_back(model_->layer_name(l));
    }
    optimizer_ = std::make_unique<LayerOptimizer>(layers, OptimizerOptions{.kind = "sgd", .lr = lr});
    store_ = c10::make_intrusive<c10d::HashStore>();
    group_ = make_gloo_group(store_, /*rank=*/0, /*world=*/1, /*timeout=*/60);
    engine_ = std::make_unique<Engine>(EngineOptions{.schedule = &schedule_, .layers = layers,
                                                     .layer_names = names_, .optimizer = optimizer_.get(),
                                                     .collectives = group_, .recorder = &recorder_});
  }
  ~WeftLoop() {
    try {
      engine_->finish();
    } catch (const std::exception& e) {
      std::cerr << "bench_overhead: finishing the engine: " << e.what() << "\n";
    }
  }

  struct Times {
    Seconds total = 0;
    Seconds blocked = 0;  // the training thread outside its layers: in the engine, mostly waiting
  };

  Times run(const std::vector<Batch>& batches, int iterations) {
    Times times;
    Seconds compute = 0;
    const auto start = Clock::now();
    for (int t = 0; t < iterations; ++t) {
      const IterationResult step =
          train_iteration(*engine_, *model_, batches[static_cast<size_t>(t % kBatches)], recorder_, iteration_++);
      compute += step.compute;
      sink_ += step.loss.item<double>();
    }
    engine_->drain();
    times.total = since(start);
    times.blocked = times.total - compute;
    return times;
  }

  // Per iteration of the recorded run, iteration 0 (first collective, allocator)
  // left out: messages, their issue-to-unpacked time summed (it holds the
  // layer-wise updates, which run on the engine's thread as part of unpacking),
  // and the updates alone; milliseconds.
  struct Breakdown {
    double messages = 0;
    double message_ms = 0;
    double update_ms = 0;
  };
  Breakdown breakdown() {
    Breakdown b;
    int last = 0;
    for (const Event& e : recorder_.take()) {
      last = std::max(last, e.iteration);
      if (e.iteration == 0) continue;
      if (e.lane == "comm") {
        b.messages += 1;
        b.message_ms += (e.end - e.start) * 1e3;
      } else if (e.lane == "update") {
        b.update_ms += (e.end - e.start) * 1e3;
      }
    }
    if (last > 0) {
      b.messages /= last;
      b.message_ms /= last;
      b.update_ms /= last;
    }
    return b;
  }

 private:
  std::shared_ptr<LayeredModel> model_;
  Schedule schedule_;
  std::vector<std::string> names_;
  std::unique_ptr<LayerOptimizer> optimizer_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  Recorder recorder_;
  int iteration_ = 0;  // over every run: the recorder keeps the first (warm-up) run's
  std::unique_ptr<Engine> engine_;  // last: destroyed first
  double sink_ = 0;
};

// The q-quantile (0..1) of `v`, linearly interpolated.
double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double at = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(at);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (at - static_cast<double>(lo));
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  double one = 0, five = 0, fifteen = 0;
  in >> one >> five >> fifteen;
  return fmt::format("{:.2f} {:.2f} {:.2f}", one, five, fifteen);
}

// One row of each table: the interleaved comparison, then the breakdown.
struct Row {
  std::string model, strategy;
  std::vector<double> plain_ms, weft_ms, blocked_ms, ratio;  // per repetition; ms per iteration
  WeftLoop::Breakdown breakdown;
};

Row measure(const Options& o, const std::string& model, const std::string& strategy) {
  const std::vector<Batch> batches = make_batches(model, o.batch);
  PlainLoop plain(model, o.lr);
  WeftLoop weft(model, strategy, o.batch, o.lr, /*recorded=*/o.iterations);
  // Warm-up (allocator, Gloo's first collective, caches), not timed; weft's is recorded.
  plain.run(batches, o.iterations);
  weft.run(batches, o.iterations);
  Row row{.model = model, .strategy = strategy, .breakdown = weft.breakdown()};
  for (int r = 0; r < o.repetitions; ++r) {
    Seconds a = 0;
    WeftLoop::Times b;
    if (r % 2 == 0) {
      a = plain.run(batches, o.iterations);
      b = weft.run(batches, o.iterations);
    } else {
      b = weft.run(batches, o.iterations);
      a = plain.run(batches, o.iterations);
    }
    row.plain_ms.push_back(a / o.iterations * 1e3);
    row.weft_ms.push_back(b.total / o.iterations * 1e3);
    row.blocked_ms.push_back(b.blocked / o.iterations * 1e3);
    row.ratio.push_back(b.total / a);
  }
  return row;
}

int run(int argc, char** argv) {
  Options o;
  CLI::App app("Engine overhead: weft's engine on 1 process against a plain LibTorch loop (issue 3)");
  app.add_option("--models", o.models, "runtime models")->delimiter(',');
  app.add_option("--strategies", o.strategies, "schedules the engine executes")->delimiter(',');
  app.add_option("--iterations", o.iterations, "iterations per timed run")->check(CLI::PositiveNumber);
  app.add_option("--repetitions", o.repetitions, "interleaved pairs of timed runs")->check(CLI::PositiveNumber);
  app.add_option("--batch", o.batch, "samples per iteration")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  // As `weft train` (Note [One thread per worker], runtime/measure/layer_profiler.h).
  torch::set_num_threads(1);
  const std::string before = load_average();
  fmt::print("Batch {}, SGD, 1 intra-op thread, synthetic data; {} repetitions of {} iterations each, "
             "interleaved.\n\n",
             o.batch, o.repetitions, o.iterations);
  std::vector<Row> rows;
  for (const std::string& model : o.models) {
    for (const std::string& strategy : o.strategies) rows.push_back(measure(o, model, strategy));
  }
  const auto median = [](const std::vector<double>& v) { return quantile(v, 0.5); };
  fmt::print("| model | strategy | plain ms/iter | weft ms/iter | weft / plain (median) | quartiles | min–max |\n");
  fmt::print("|---|---|---:|---:|---:|---:|---:|\n");
  for (const Row& r : rows) {
    fmt::print("| {} | {} | {:.3f} | {:.3f} | **{:.3f}** | {:.3f}–{:.3f} | {:.3f}–{:.3f} |\n", r.model, r.strategy,
               median(r.plain_ms), median(r.weft_ms), median(r.ratio), quantile(r.ratio, 0.25),
               quantile(r.ratio, 0.75), quantile(r.ratio, 0), quantile(r.ratio, 1));
  }
  fmt::print("\nWhere weft's extra time goes, per iteration: the training thread outside its layers, blocked in "
             "the engine mostly (median over repetitions), and from the warm-up run's timeline the messages, "
             "their issue-to-unpacked time (engine and Gloo threads; includes the layer-wise updates) and the "
             "updates alone.\n\n");
  fmt::print("| model | strategy | weft − plain ms | blocked ms | messages | issue→unpacked ms | updates ms |\n");
  fmt::print("|---|---|---:|---:|---:|---:|---:|\n");
  for (const Row& r : rows) {
    fmt::print("| {} | {} | {:.3f} | {:.3f} | {:.0f} | {:.3f} | {:.3f} |\n", r.model, r.strategy,
               median(r.weft_ms) - median(r.plain_ms), median(r.blocked_ms), r.breakdown.messages,
               r.breakdown.message_ms, r.breakdown.update_ms);
  }
  fmt::print("\nLoad average (1, 5, 15 min) before: {}; after: {}; {} cores.\n", before, load_average(),
             std::thread::hardware_concurrency());
  return 0;
}

}  // namespace
}  // namespace weft::runtime

int main(int argc, char** argv) {
  try {
    return weft::runtime::run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "bench_overhead: " << e.what() << "\n";
    return 1;
  }
}
