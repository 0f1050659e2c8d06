// The parameter-server runtime in one process: EASGD's arithmetic by hand, and a
// real server (run_server) answering real Gloo pushes from worker threads over an
// in-memory store, checked against a hand computation for both updates.
#include "runtime/comm/parameter_server.h"

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <gtest/gtest.h>

#include <future>
#include <set>
#include <thread>

#include "runtime/comm/process_group.h"

namespace weft::runtime {
namespace {

torch::Tensor vec(std::vector<float> v) { return torch::tensor(v, torch::kFloat32); }

void expect_equal(const torch::Tensor& actual, const torch::Tensor& expected) {
  EXPECT_TRUE(torch::allclose(actual, expected, 1e-6, 1e-6)) << actual << "\nexpected\n" << expected;
}

TEST(Easgd, ElasticPullMatchesAHandComputation) {
  // w − α·(w − w̃) with α = 0.25: 1 − 0.25·(1 − 0) = 0.75; 2 − 0.25·(2 − 4) = 2.5; 3.
  expect_equal(elastic_pull(vec({1, 2, 3}), vec({0, 4, 3}), 0.25), vec({0.75f, 2.5f, 3}));
  // α = 1 lands on the centre, α = 0 stays.
  expect_equal(elastic_pull(vec({1, 2, 3}), vec({0, 4, 3}), 1), vec({0, 4, 3}));
  expect_equal(elastic_pull(vec({1, 2, 3}), vec({0, 4, 3}), 0), vec({1, 2, 3}));
}

TEST(Easgd, MoveCentreMatchesAHandComputation) {
  // (1 − β)·w̃ + β·mean with β = 0.5: 0.5·0 + 0.5·2 = 1; 0.5·4 + 0.5·2 = 3; 2.5.
  torch::Tensor centre = vec({0, 4, 3});
  move_centre(centre, vec({2, 2, 2}), 0.5);
  expect_equal(centre, vec({1, 3, 2.5f}));
}

TEST(ExchangeTag, DistinctForEveryOperationOfNearbyIterations) {
  Schedule schedule{.period = 2, .iterations = {std::vector<CommOp>(3), std::vector<CommOp>(1)}};
  std::set<int> tags;
  for (int t = 0; t < 100; ++t) {
    for (int i = 0; i < static_cast<int>(schedule.ops(t).size()); ++i) {
      const int tag = exchange_tag(schedule, t, i);
      EXPECT_GE(tag, 0);
      EXPECT_TRUE(tags.insert(tag).second) << "iteration " << t << " operation " << i;
    }
  }
}

// Two layers of one and two parameters; each layer one exchange with server 0.
struct Fixture {
  static constexpr int kWorkers = 2;

  Schedule schedule(Easgd easgd) const {
    Schedule s{.strategy = "test", .period = 1, .easgd = easgd};
    s.dispatch.kind = DispatchPolicy::Kind::kCredit;
    s.dispatch.credit = 1 << 20;
    s.iterations.emplace_back();
    for (int l : {1, 0}) {
      const Bytes bytes = (l == 0 ? 3 : 2) * static_cast<Bytes>(sizeof(float));
      s.iterations[0].push_back({.chunks = {{.layer = l, .offset = 0, .length = bytes}},
                                 .kind = OpKind::kParameterServer, .ready_after = l, .needed_by = l});
    }
    return s;
  }

  // The server's copy: layer 0 = {[1, 2], [3]}, layer 1 = {[4, 5]}.
  static std::vector<std::vector<torch::Tensor>> server_layers() {
    return {{vec({1, 2}).requires_grad_(), vec({3}).requires_grad_()}, {vec({4, 5}).requires_grad_()}};
  }
};

// Runs one server (rank 2) and two "workers" (ranks 0, 1) that push `pushes[t][k][i]`
// (iteration t, worker k, operation i) by hand; returns what each worker received.
std::vector<std::vector<std::vector<torch::Tensor>>> exchange(
    const Schedule& schedule, std::vector<std::vector<torch::Tensor>> server_layers, LayerOptimizer* optimizer,
    const std::vector<std::vector<std::vector<torch::Tensor>>>& pushes) {
  constexpr int kWorld = Fixture::kWorkers + 1;
  auto store = c10::make_intrusive<c10d::HashStore>();
  const auto iterations = static_cast<std::int64_t>(pushes.size());
  std::vector<std::future<std::vector<std::vector<torch::Tensor>>>> workers;
  auto server = std::async(std::launch::async, [&] {
    auto group = make_gloo_group(store, Fixture::kWorkers, kWorld, 30);
    run_server({.schedule = &schedule, .layers = server_layers, .optimizer = optimizer, .group = group,
                .workers = Fixture::kWorkers, .server = 0, .iterations = iterations});
  });
  for (int k = 0; k < Fixture::kWorkers; ++k) {
    workers.push_back(std::async(std::launch::async, [&, k] {
      auto group = make_gloo_group(store, k, kWorld, 30);
      std::vector<std::vector<torch::Tensor>> received;
      for (std::int64_t t = 0; t < iterations; ++t) {
        auto& answers = received.emplace_back();
        for (int i = 0; i < static_cast<int>(schedule.ops(static_cast<int>(t)).size()); ++i) {
          const int tag = exchange_tag(schedule, t, i);
          const auto& push = pushes[static_cast<size_t>(t)][static_cast<size_t>(k)][static_cast<size_t>(i)];
          std::vector<torch::Tensor> out{push};
          std::vector<torch::Tensor> in{torch::empty_like(out.front())};
          group->send(out, Fixture::kWorkers, tag)->wait();
          group->recv(in, Fixture::kWorkers, tag)->wait();
          answers.push_back(in.front());
        }
      }
      return received;
    }));
  }
  std::vector<std::vector<std::vector<torch::Tensor>>> out;
  for (auto& w : workers) out.push_back(w.get());
  server.get();
  return out;
}

TEST(Server, EasgdMovesTheCentreTowardsTheWorkersMean) {
  const Fixture f;
  const Schedule schedule = f.schedule({.alpha = 0.2, .beta = 0.5});
  auto layers = Fixture::server_layers();
  // Operation 0 carries layer 1 (centre [4, 5]), operation 1 layer 0 ([1, 2, 3]).
  const std::vector<std::vector<std::vector<torch::Tensor>>> pushes{
      {{vec({0, 1}), vec({1, 1, 1})}, {vec({2, 3}), vec({3, 3, 3})}},  // iteration 0: worker 0, worker 1
      {{vec({8, 8}), vec({0, 0, 0})}, {vec({8, 8}), vec({2, 2, 2})}},  // iteration 1
  };
  const auto received = exchange(schedule, layers, nullptr, pushes);
  // Iteration 0: layer 1: 0.5·[4, 5] + 0.5·mean([0, 1], [2, 3]) = [2.5, 3.5];
  //              layer 0: 0.5·[1, 2, 3] + 0.5·[2, 2, 2] = [1.5, 2, 2.5].
  // Iteration 1: layer 1: 0.5·[2.5, 3.5] + 0.5·[8, 8] = [5.25, 5.75];
  //              layer 0: 0.5·[1.5, 2, 2.5] + 0.5·[1, 1, 1] = [1.25, 1.5, 1.75].
  for (int k = 0; k < Fixture::kWorkers; ++k) {
    expect_equal(received[k][0][0], vec({2.5f, 3.5f}));
    expect_equal(received[k][0][1], vec({1.5f, 2, 2.5f}));
    expect_equal(received[k][1][0], vec({5.25f, 5.75f}));
    expect_equal(received[k][1][1], vec({1.25f, 1.5f, 1.75f}));
  }
  // The server keeps the centre in its copy of the model.
  expect_equal(layers[1][0], vec({5.25f, 5.75f}));
  expect_equal(torch::cat({layers[0][0], layers[0][1]}), vec({1.25f, 1.5f, 1.75f}));
}

TEST(Server, SynchronousPsStepsItsOptimizerWithTheMeanGradient) {
  const Fixture f;
  const Schedule schedule = f.schedule({.alpha = 0, .beta = 0});
  auto layers = Fixture::server_layers();
  LayerOptimizer sgd(layers, {.kind = "sgd", .lr = 0.5});
  const std::vector<std::vector<std::vector<torch::Tensor>>> pushes{
      {{vec({2, 0}), vec({1, 1, 1})}, {vec({0, 2}), vec({3, 1, -1})}},  // gradients, iteration 0
  };
  const auto received = exchange(schedule, layers, &sgd, pushes);
  // layer 1: [4, 5] − 0.5·mean([2, 0], [0, 2]) = [3.5, 4.5];
  // layer 0: [1, 2, 3] − 0.5·mean([1, 1, 1], [3, 1, −1]) = [0, 1.5, 3].
  for (int k = 0; k < Fixture::kWorkers; ++k) {
    expect_equal(received[k][0][0], vec({3.5f, 4.5f}));
    expect_equal(received[k][0][1], vec({0, 1.5f, 3}));
  }
}

// Note [Compressed exchanges]: two workers' real executors
// (make_parameter_server_executor) and a real server over Gloo, every operation
// encoded `codec`. Worker k pushes pushes[t][k][i] (gradients or parameters);
// returns what each worker's executor completed, [worker][iteration][operation].
std::vector<std::vector<std::vector<torch::Tensor>>> executor_exchanges(
    Schedule schedule, const std::string& codec, std::vector<std::vector<torch::Tensor>> server_layers,
    LayerOptimizer* optimizer, const std::vector<std::vector<std::vector<torch::Tensor>>>& pushes) {
  for (auto& ops : schedule.iterations) {
    for (CommOp& op : ops) op.encoding = parse_encoding(codec, "test");
  }
  constexpr int kWorld = Fixture::kWorkers + 1;
  auto store = c10::make_intrusive<c10d::HashStore>();
  const auto iterations = static_cast<std::int64_t>(pushes.size());
  auto server = std::async(std::launch::async, [&] {
    auto group = make_gloo_group(store, Fixture::kWorkers, kWorld, 30);
    run_server({.schedule = &schedule, .layers = server_layers, .optimizer = optimizer, .group = group,
                .workers = Fixture::kWorkers, .server = 0, .iterations = iterations});
  });
  std::vector<std::future<std::vector<std::vector<torch::Tensor>>>> workers;
  for (int k = 0; k < Fixture::kWorkers; ++k) {
    workers.push_back(std::async(std::launch::async, [&, k] {
      const EngineOptions options{.schedule = &schedule, .layers = Fixture::server_layers(),  // the common start
                                  .collectives = make_gloo_group(store, k, kWorld, 30),
                                  .workers = Fixture::kWorkers};
      auto executor = make_parameter_server_executor(options);
      std::vector<std::vector<torch::Tensor>> received;
      for (int t = 0; t < static_cast<int>(iterations); ++t) {
        auto& answers = received.emplace_back();
        for (int i = 0; i < static_cast<int>(schedule.ops(t).size()); ++i) {
          const torch::Tensor& push = pushes[static_cast<size_t>(t)][static_cast<size_t>(k)][static_cast<size_t>(i)];
          const Message message{.ops = {{.iteration = t, .index = i}}, .bytes = schedule.ops(t)[static_cast<size_t>(i)].bytes()};
          const torch::Tensor packed = push.clone();
          auto started = executor->start(schedule, message, packed);
          started.done->waitAndThrow();
          executor->complete(schedule, message, packed, started.result);
          answers.push_back(started.result);
        }
      }
      return received;
    }));
  }
  std::vector<std::vector<std::vector<torch::Tensor>>> out;
  for (auto& w : workers) out.push_back(w.get());
  server.get();
  return out;
}

// Random pushes for `iterations`, then `quiet` iterations of zeros: [t][worker][op],
// op 0 of two values (layer 1), op 1 of three (layer 0).
std::vector<std::vector<std::vector<torch::Tensor>>> random_pushes(int iterations, int quiet, double scale) {
  torch::manual_seed(42);
  std::vector<std::vector<std::vector<torch::Tensor>>> pushes(static_cast<size_t>(iterations + quiet));
  for (int t = 0; t < iterations + quiet; ++t) {
    for (int k = 0; k < Fixture::kWorkers; ++k) {
      auto& ops = pushes[static_cast<size_t>(t)].emplace_back();
      for (std::int64_t n : {2, 3}) ops.push_back(t < iterations ? torch::randn({n}) * scale : torch::zeros({n}));
    }
  }
  return pushes;
}

// Synchronous PS: the workers get the same bits after every exchange, and error
// feedback (on the pushes; relative answers) keeps the job on the float32 run's
// track: once the gradients stop, the parameters settle at the float32 run's.
TEST(CompressedExchange, SynchronousPsWorkersHoldTheSameBitsAndSettleOnFloat32) {
  const Fixture f;
  const Schedule schedule = f.schedule({.alpha = 0, .beta = 0});
  const auto pushes = random_pushes(6, 6, 1.0);
  const auto run = [&](const std::string& codec, std::vector<std::vector<torch::Tensor>>& layers) {
    LayerOptimizer sgd(layers, {.kind = "sgd", .lr = 0.5});
    return executor_exchanges(schedule, codec, layers, &sgd, pushes);
  };
  auto exact_layers = Fixture::server_layers();
  const auto exact = run("none", exact_layers);
  for (const std::string codec : {"fp16", "bf16", "int8"}) {
    auto layers = Fixture::server_layers();
    const auto received = run(codec, layers);
    for (std::size_t t = 0; t < pushes.size(); ++t) {
      for (std::size_t i = 0; i < 2; ++i) {
        EXPECT_TRUE(torch::equal(received[0][t][i], received[1][t][i]))
            << codec << " iteration " << t << " op " << i << ": " << received[0][t][i] << received[1][t][i];
        EXPECT_TRUE(torch::allclose(received[0][t][i], exact[0][t][i], 0, 0.05)) << codec << " iteration " << t;
      }
      EXPECT_FALSE(t == 0 && torch::equal(received[0][t][1], exact[0][t][1])) << codec << ": not encoded at all?";
    }
    const std::size_t last = pushes.size() - 1;
    for (std::size_t i = 0; i < 2; ++i) {
      EXPECT_TRUE(torch::allclose(received[0][last][i], exact[0][last][i], 1e-5, 1e-5))
          << codec << " op " << i << ": " << received[0][last][i] << exact[0][last][i];
    }
    // What the workers hold is the server's model.
    EXPECT_TRUE(torch::allclose(received[0][last][0], layers[1][0], 1e-5, 1e-5)) << codec;
  }
}

// ps-interleaved with α = β = 1: every worker ends each exchange at the centre
// (w − 1·(w − r): r up to the rounding of that arithmetic), near the float32 run's.
TEST(CompressedExchange, ElasticAveragingWorkersAgreeOnTheCentre) {
  const Fixture f;
  const Schedule schedule = f.schedule({.alpha = 1, .beta = 1});
  auto pushes = random_pushes(4, 0, 0.1);
  for (std::size_t t = 0; t < pushes.size(); ++t) {  // parameters near the start, as a worker's would be
    for (auto& ops : pushes[t]) {
      ops[0] += vec({4, 5});
      ops[1] += vec({1, 2, 3});
    }
  }
  const auto exact = executor_exchanges(schedule, "none", Fixture::server_layers(), nullptr, pushes);
  const auto received = executor_exchanges(schedule, "int8", Fixture::server_layers(), nullptr, pushes);
  for (std::size_t t = 0; t < pushes.size(); ++t) {
    for (std::size_t i = 0; i < 2; ++i) {
      EXPECT_TRUE(torch::allclose(received[0][t][i], received[1][t][i], 0, 1e-6)) << "iteration " << t << " op " << i;
      EXPECT_TRUE(torch::allclose(received[0][t][i], exact[0][t][i], 0, 0.01)) << "iteration " << t;
    }
  }
}

TEST(Server, RejectsAnOperationThatSplitsALayer) {
  const Fixture f;
  Schedule schedule = f.schedule({.alpha = 0.1, .beta = 0.5});
  schedule.iterations[0][1].chunks[0].length = sizeof(float);  // one of layer 0's three floats
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto layers = Fixture::server_layers();
  auto worker = std::async(std::launch::async, [&] { return make_gloo_group(store, 0, 2, 5); });
  auto group = make_gloo_group(store, 1, 2, 5);
  worker.get();
  try {
    run_server({.schedule = &schedule, .layers = layers, .group = group, .workers = 1, .server = 0,
                .iterations = 1});
    FAIL() << "expected std::logic_error";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("whole layers"), std::string::npos) << e.what();
  }
}

TEST(Server, NamesTheWorkerWhosePushNeverCame) {
  const Fixture f;
  const Schedule schedule = f.schedule({.alpha = 0.1, .beta = 0.5});
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto layers = Fixture::server_layers();
  // Worker 0 pushes; worker 1 joins the group and then pushes nothing.
  auto worker0 = std::async(std::launch::async, [&] {
    auto group = make_gloo_group(store, 0, 3, 2);
    for (int i = 0; i < 2; ++i) {
      std::vector<torch::Tensor> out{i == 0 ? vec({0, 0}) : vec({0, 0, 0})};
      group->send(out, 2, exchange_tag(schedule, 0, i))->wait();
    }
  });
  auto worker1 = std::async(std::launch::async, [&] { return make_gloo_group(store, 1, 3, 2); });
  auto group = make_gloo_group(store, 2, 3, 2);
  auto idle = worker1.get();  // keep its group alive while the server waits
  try {
    run_server({.schedule = &schedule, .layers = layers, .group = group, .workers = 2, .server = 0,
                .iterations = 1});
    FAIL() << "expected std::runtime_error";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("server 0"), std::string::npos) << what;
    EXPECT_NE(what.find("worker 1"), std::string::npos) << what;
  }
  worker0.get();
}

}  // namespace
}  // namespace weft::runtime
