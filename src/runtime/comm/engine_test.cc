// The communication engine, with ranks as threads over an in-memory store (as
// Gloo's own tests run): the property that matters is that data-parallel training
// through any valid schedule ends where single-process training on the combined
// batch ends, bit-identical on every rank.
#include "runtime/comm/engine.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <gtest/gtest.h>

#include <filesystem>
#include <future>
#include <random>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "profile/profile.h"
#include "runtime/comm/process_group.h"

namespace weft::runtime {
namespace {

constexpr double kLr = 0.1;

// Ranks run as threads: random tensors come from generators of their own, never
// from the global one (a race between threads).
at::Generator generator(std::uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

// A small tanh network whose layer l is (W_l, b_l): every parameter used once.
struct Net {
  std::vector<std::vector<torch::Tensor>> layers;

  static Net make(const std::vector<int>& widths, std::uint64_t seed) {
    auto gen = generator(seed);
    Net net;
    for (size_t l = 0; l + 1 < widths.size(); ++l) {
      net.layers.push_back({(torch::randn({widths[l + 1], widths[l]}, gen) * 0.5).requires_grad_(),
                            (torch::randn({widths[l + 1]}, gen) * 0.1).requires_grad_()});
    }
    return net;
  }
  int size() const { return static_cast<int>(layers.size()); }

  torch::Tensor forward_layer(int l, const torch::Tensor& x) const {
    const auto& p = layers[static_cast<size_t>(l)];
    auto y = torch::addmm(p[1], x, p[0].t());
    return l + 1 < size() ? torch::tanh(y) : y;
  }
  torch::Tensor flat() const {
    std::vector<torch::Tensor> all;
    for (const auto& layer : layers) {
      for (const auto& p : layer) all.push_back(p.detach().flatten());
    }
    return torch::cat(all);
  }
  Profile profile() const {
    Profile profile{.model = "test-net"};
    for (int l = 0; l < size(); ++l) {
      std::int64_t params = 0;
      for (const auto& p : layers[static_cast<size_t>(l)]) params += p.numel();
      profile.layers.push_back({.name = "l" + std::to_string(l), .params = params, .fp = 1e-3, .bp = 2e-3});
    }
    return profile;
  }
};

const std::vector<int> kWidths{6, 8, 5, 7, 3};

// Rank r's batch in iteration t; the combined batch is the ranks' in rank order.
std::pair<torch::Tensor, torch::Tensor> batch(int rank, int t, int per_rank) {
  auto gen = generator(static_cast<std::uint64_t>(1000 + 100 * t + rank));
  return {torch::randn({per_rank, kWidths.front()}, gen), torch::randn({per_rank, kWidths.back()}, gen)};
}

// Single-process S-SGD on the combined batch of `world` ranks.
torch::Tensor reference(int world, int iterations, int per_rank) {
  Net net = Net::make(kWidths, 7);
  LayerOptimizer optimizer(net.layers, {.kind = "sgd", .lr = kLr});
  for (int t = 0; t < iterations; ++t) {
    std::vector<torch::Tensor> xs, ys;
    for (int r = 0; r < world; ++r) {
      auto [x, y] = batch(r, t, per_rank);
      xs.push_back(x);
      ys.push_back(y);
    }
    torch::Tensor x = torch::cat(xs);
    for (int l = 0; l < net.size(); ++l) x = net.forward_layer(l, x);
    torch::mse_loss(x, torch::cat(ys)).backward();
    for (int l = 0; l < net.size(); ++l) {
      optimizer.step(l);
      optimizer.zero_grad(l);
    }
  }
  return net.flat();
}

// Runs `world` ranks as threads, each training `iterations` steps through an engine
// executing `schedule`; returns each rank's final parameters. `body` may replace a
// rank's behaviour (failure tests).
std::vector<torch::Tensor> train_threads(const Schedule& schedule, int world, int iterations, int per_rank,
                                         Seconds timeout = 30, Bytes gather_below = 0) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<torch::Tensor> result(static_cast<size_t>(world));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        auto group = make_gloo_group(store, rank, world, timeout);
        Net net = Net::make(kWidths, 7);
        LayerOptimizer optimizer(net.layers, {.kind = "sgd", .lr = kLr});
        // Each rank's backward dawdles differently before each layer, so that the
        // ranks see their gradients become ready in different interleavings with
        // completed messages — what makes credit and window decisions diverge
        // between ranks unless the engine makes them agree (Note [Collective order]).
        std::mt19937 jitter(static_cast<unsigned>(rank + 1));
        auto dawdle = [&jitter](const torch::Tensor& grad) {
          std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, 3000)(jitter)));
          return grad;
        };
        {
          auto open_announcements = [&] {
            return make_gloo_group(c10::make_intrusive<c10d::PrefixStore>("announcements", store), rank, world,
                                   timeout, "127.0.0.1", /*threads=*/1);
          };
          Engine engine({.schedule = &schedule, .layers = net.layers, .optimizer = &optimizer, .collectives = group,
                         .open_announcements = open_announcements,
                         .gather_below = gather_below});
          for (int t = 0; t < iterations; ++t) {
            auto [x, y] = batch(rank, t, per_rank);
            for (int l = 0; l < net.size(); ++l) {
              engine.wait_for_forward(l);
              x = net.forward_layer(l, x);
              x.register_hook(dawdle);
            }
            auto loss = torch::mse_loss(x, y);
            engine.start_backward();
            loss.backward();
            engine.end_backward();
          }
          engine.finish();
        }
        result[static_cast<size_t>(rank)] = net.flat();
      } catch (...) {
        errors[static_cast<size_t>(rank)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return result;
}

// A random valid gradient schedule: every layer cut into 1..3 chunks, consecutive
// chunks in backward order fused into operations of 1..3 chunks, a random
// needed_by (any layer: Note [Dependencies of an operation] in schedule/index.h)
// and priority; `policy` 0, 1, 2 = in order, a random credit, random windows.
Schedule random_schedule(const Profile& profile, int policy, std::mt19937& rng) {
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<Chunk> chunks;  // backward order
  for (int l = profile.size() - 1; l >= 0; --l) {
    const std::int64_t elements = profile.layers[static_cast<size_t>(l)].params;
    const int pieces = std::min<std::int64_t>(uniform(1, 3), elements);
    std::set<std::int64_t> cuts;
    while (static_cast<int>(cuts.size()) < pieces - 1) cuts.insert(uniform(1, static_cast<int>(elements) - 1));
    std::int64_t begin = 0;
    cuts.insert(elements);
    for (std::int64_t end : cuts) {
      chunks.push_back({.layer = l, .offset = begin * 4, .length = (end - begin) * 4});
      begin = end;
    }
  }
  Schedule s{.strategy = "random"};
  s.iterations.emplace_back();
  for (size_t i = 0; i < chunks.size();) {
    CommOp op;
    const size_t n = std::min<size_t>(static_cast<size_t>(uniform(1, 3)), chunks.size() - i);
    int lowest = profile.size();
    for (size_t k = 0; k < n; ++k) {
      op.chunks.push_back(chunks[i + k]);
      lowest = std::min(lowest, chunks[i + k].layer);
    }
    i += n;
    op.ready_after = lowest;
    op.needed_by = uniform(0, 2) == 0 ? kBarrier : uniform(0, profile.size() - 1);
    op.priority = uniform(0, 4);
    s.iterations[0].push_back(std::move(op));
  }
  switch (policy) {
    case 0: s.dispatch = {.kind = DispatchPolicy::Kind::kInOrder}; break;
    case 1: s.dispatch = {.kind = DispatchPolicy::Kind::kCredit, .credit = uniform(50, 600)}; break;
    default:
      s.dispatch.kind = DispatchPolicy::Kind::kWindows;
      for (int k = uniform(1, 4); k > 0; --k) s.dispatch.windows.push_back(uniform(1, 600));
  }
  return s;
}

void expect_equal_to_reference(const std::vector<torch::Tensor>& ranks, const torch::Tensor& expected) {
  for (size_t r = 0; r < ranks.size(); ++r) {
    EXPECT_TRUE(torch::equal(ranks[r], ranks[0])) << "rank " << r << " differs from rank 0";
    EXPECT_LE((ranks[r] - expected).abs().max().item<double>(), 1e-5) << "rank " << r;
  }
}

// wfbp: one operation per layer, in backward order.
Schedule layer_by_layer(const Net& net) {
  Schedule s{.strategy = "wfbp"};
  s.iterations.emplace_back();
  for (int l = net.size() - 1; l >= 0; --l) {
    const auto bytes = net.profile().layers[static_cast<size_t>(l)].bytes();
    s.iterations[0].push_back({.chunks = {{.layer = l, .offset = 0, .length = bytes}}, .ready_after = l});
  }
  return s;
}

TEST(Engine, OneRankInOrderMatchesPlainTraining) {
  Net net = Net::make(kWidths, 7);
  const Schedule s = layer_by_layer(net);
  validate(s, net.profile(), 1);
  expect_equal_to_reference(train_threads(s, 1, 3, 8), reference(1, 3, 8));
}

int threads_of_this_process() {
  return static_cast<int>(std::distance(std::filesystem::directory_iterator("/proc/self/task"),
                                        std::filesystem::directory_iterator()));
}

// With one worker nothing travels, so the engine starts no thread and each layer is
// stepped by the training thread inside the backward (Note [One worker inline]):
// when backward() returns, every layer already holds its new parameters.
TEST(Engine, OneWorkerStepsEveryLayerInsideTheBackward) {
  Net net = Net::make(kWidths, 7);
  const Schedule s = layer_by_layer(net);
  validate(s, net.profile(), 1);
  LayerOptimizer optimizer(net.layers, {.kind = "sgd", .lr = kLr});
  auto group = make_gloo_group(c10::make_intrusive<c10d::HashStore>(), 0, 1, 30);
  const int threads_before = threads_of_this_process();
  Engine engine({.schedule = &s, .layers = net.layers, .optimizer = &optimizer, .collectives = group});
  EXPECT_EQ(threads_of_this_process(), threads_before);

  auto [x, y] = batch(0, 0, 8);
  for (int l = 0; l < net.size(); ++l) {
    engine.wait_for_forward(l);
    x = net.forward_layer(l, x);
  }
  engine.start_backward();
  torch::mse_loss(x, y).backward();
  EXPECT_TRUE(torch::equal(net.flat(), reference(1, 1, 8)));
  engine.end_backward();
  engine.finish();
}

TEST(Engine, RandomSchedulesOnTwoAndThreeRanksEndAsCombinedBatchTraining) {
  std::mt19937 rng(2024);
  const Profile profile = Net::make(kWidths, 7).profile();
  for (int round = 0; round < 6; ++round) {
    const int world = 2 + round / 3;  // every policy on 2 and 3 ranks
    const Schedule s = random_schedule(profile, round % 3, rng);
    SCOPED_TRACE(fmt::format("round {}: world {}, {} ops, policy {}", round, world, s.iterations[0].size(),
                             to_string(s.dispatch.kind)));
    validate(s, profile, world);
    expect_equal_to_reference(train_threads(s, world, 4, 4), reference(world, 4, 4));
  }
}

// Rank 0's announcements need a group of their own (Note [Collective order]):
// without one, a credit schedule on two ranks is refused on both, saying what is
// missing, before anything is sent.
TEST(Engine, LeaderPolicyWithoutAnnouncementGroupIsRefused) {
  std::mt19937 rng(3);
  const Profile profile = Net::make(kWidths, 7).profile();
  const Schedule s = random_schedule(profile, /*policy=*/1, rng);
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto construct = [&](int rank) -> std::string {
    auto group = make_gloo_group(store, rank, 2, /*timeout=*/10);
    Net net = Net::make(kWidths, 7);
    LayerOptimizer optimizer(net.layers, {.kind = "sgd", .lr = kLr});
    try {
      Engine engine({.schedule = &s, .layers = net.layers, .optimizer = &optimizer, .collectives = group});
    } catch (const std::logic_error& e) {
      return e.what();
    }
    return "";
  };
  auto other = std::async(std::launch::async, construct, 1);
  EXPECT_NE(construct(0).find("open_announcements"), std::string::npos);
  EXPECT_NE(other.get().find("open_announcements"), std::string::npos);
}

// Messages of up to 100 bytes summed by all-gather, the larger ones by ring
// all-reduce, in one run (Note [Small all-reduces by all-gather]): the same
// training, and the same bits on every rank.
TEST(Engine, SmallMessagesSummedByAllGatherEndAsCombinedBatchTraining) {
  std::mt19937 rng(7);
  const Profile profile = Net::make(kWidths, 7).profile();
  for (int world : {2, 3}) {
    const Schedule s = random_schedule(profile, /*policy=*/0, rng);
    bool small = false, large = false;
    for (const CommOp& op : s.iterations[0]) (op.bytes() <= 100 ? small : large) = true;
    ASSERT_TRUE(small && large) << "the schedule should have messages on both sides of 100 bytes";
    SCOPED_TRACE(fmt::format("world {}", world));
    validate(s, profile, world);
    expect_equal_to_reference(train_threads(s, world, 4, 4, /*timeout=*/30, /*gather_below=*/100),
                              reference(world, 4, 4));
  }
}

// Local SGD with period 2: every layer's parameters averaged after the local step
// of iteration 1 (of each period), each layer as soon as its backward ends.
TEST(Engine, ParameterAveragingMatchesLocalSgdWithPeriodicAveraging) {
  constexpr int kWorld = 2, kIterations = 5, kPerRank = 4;
  Net probe = Net::make(kWidths, 7);
  Schedule s{.strategy = "flsgd", .period = 2};
  s.iterations.resize(2);
  for (int l = probe.size() - 1; l >= 0; --l) {
    const auto bytes = probe.profile().layers[static_cast<size_t>(l)].bytes();
    s.iterations[1].push_back({.chunks = {{.layer = l, .offset = 0, .length = bytes}},
                               .kind = OpKind::kAverageParameters,
                               .ready_after = l,
                               .needed_by = l});
  }
  validate(s, probe.profile(), kWorld);

  std::vector<Net> nets;
  std::vector<LayerOptimizer> optimizers;
  for (int r = 0; r < kWorld; ++r) {
    nets.push_back(Net::make(kWidths, 7));
    optimizers.emplace_back(nets.back().layers, OptimizerOptions{.kind = "sgd", .lr = kLr});
  }
  for (int t = 0; t < kIterations; ++t) {
    for (int r = 0; r < kWorld; ++r) {
      auto [x, y] = batch(r, t, kPerRank);
      for (int l = 0; l < nets[r].size(); ++l) x = nets[r].forward_layer(l, x);
      torch::mse_loss(x, y).backward();
      for (int l = 0; l < nets[r].size(); ++l) {
        optimizers[r].step(l);
        optimizers[r].zero_grad(l);
      }
    }
    if (t % 2 == 1) {
      torch::NoGradGuard no_grad;
      for (size_t l = 0; l < nets[0].layers.size(); ++l) {
        for (size_t i = 0; i < nets[0].layers[l].size(); ++i) {
          auto mean = (nets[0].layers[l][i] + nets[1].layers[l][i]) / kWorld;
          for (auto& net : nets) net.layers[l][i].copy_(mean);
        }
      }
    }
  }
  const auto ranks = train_threads(s, kWorld, kIterations, kPerRank);
  // The last iteration (4) is local only: the ranks differ, each as its reference.
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_LE((ranks[r] - nets[r].flat()).abs().max().item<double>(), 1e-5) << "rank " << r;
  }
  EXPECT_FALSE(torch::equal(ranks[0], ranks[1])) << "iteration 4 was local; the ranks should differ";
}

// A rank that leaves (its process group closed, as when its process dies) makes
// the other's engine fail with its rank and elapsed time, instead of hanging; and
// a rank that stays but stops taking part is caught by the group's timeout.
void expect_failure_surfaces(bool peer_closes) {
  Net probe = Net::make(kWidths, 7);
  Schedule s{.strategy = "wfbp"};
  s.iterations.emplace_back();
  for (int l = probe.size() - 1; l >= 0; --l) {
    const auto bytes = probe.profile().layers[static_cast<size_t>(l)].bytes();
    s.iterations[0].push_back({.chunks = {{.layer = l, .offset = 0, .length = bytes}}, .ready_after = l});
  }
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::promise<std::string> survivor_error;
  std::shared_future<std::string> error = survivor_error.get_future().share();
  auto run = [&](int rank) {
    auto group = make_gloo_group(store, rank, 2, /*timeout=*/2);
    Net net = Net::make(kWidths, 7);
    LayerOptimizer optimizer(net.layers, {.kind = "sgd", .lr = kLr});
    Engine engine({.schedule = &s, .layers = net.layers, .optimizer = &optimizer, .collectives = group});
    const int iterations = rank == 1 ? 1 : 50;
    try {
      for (int t = 0; t < iterations; ++t) {
        auto [x, y] = batch(rank, t, 4);
        for (int l = 0; l < net.size(); ++l) {
          engine.wait_for_forward(l);
          x = net.forward_layer(l, x);
        }
        engine.start_backward();
        torch::mse_loss(x, y).backward();
        engine.end_backward();
      }
      if (rank == 1) {
        engine.drain();
        if (!peer_closes) error.wait();  // alive but silent until the survivor gave up
        return;                          // closes the group
      }
      engine.finish();
      survivor_error.set_value("");
    } catch (const std::exception& e) {
      survivor_error.set_value(e.what());
    }
  };
  std::thread survivor(run, 0), leaver(run, 1);
  survivor.join();
  leaver.join();
  const std::string message = error.get();
  EXPECT_NE(message.find("rank 0:"), std::string::npos) << message;
  EXPECT_NE(message.find("failed after"), std::string::npos) << message;
}

TEST(Engine, PeerThatLeavesFailsTheSurvivor) { expect_failure_surfaces(/*peer_closes=*/true); }
TEST(Engine, SilentPeerTimesOut) { expect_failure_surfaces(/*peer_closes=*/false); }

}  // namespace
}  // namespace weft::runtime
