// Each codec's mean all-reduce on 2-4 ranks (threads, each with its own Gloo group
// over loopback TCP, as engine_test.cc runs them): bit-identical on every rank,
// within the codec's documented bound of the float32 mean (docs/compression.md),
// and, with error feedback, a sum over steps that converges to the float32 sum.
#include "runtime/comm/codecs.h"

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <stdexcept>
#include <thread>

#include <ATen/CPUGeneratorImpl.h>

#include "runtime/comm/process_group.h"

namespace weft::runtime {
namespace {

// A small model: a matrix and its bias, a 3-D kernel and its bias, a vector; and
// a long vector, whose ring segments move in many pieces (whole_layers leaves it out).
constexpr int kLongLayer = 3;
std::vector<std::vector<torch::Tensor>> model() {
  return {{torch::zeros({24, 18}), torch::zeros({24})},
          {torch::zeros({16, 8, 3}), torch::zeros({16})},
          {torch::zeros({700})},
          {torch::zeros({300'000})}};
}

std::int64_t layer_values(const std::vector<torch::Tensor>& layer) {
  std::int64_t n = 0;
  for (const auto& t : layer) n += t.numel();
  return n;
}

// Whole layers 2, 1, 0 (backward order).
std::vector<Chunk> whole_layers(const std::vector<std::vector<torch::Tensor>>& layers) {
  std::vector<Chunk> chunks;
  for (int l = kLongLayer - 1; l >= 0; --l) {
    chunks.push_back({.layer = l, .offset = 0, .length = 4 * layer_values(layers[static_cast<size_t>(l)])});
  }
  return chunks;
}

std::int64_t values(const std::vector<Chunk>& chunks) {
  std::int64_t n = 0;
  for (const Chunk& c : chunks) n += c.length / 4;
  return n;
}

using Input = std::function<torch::Tensor(int rank, int step)>;

// results[rank][step]: the mean each rank got for `steps` messages of `chunks`.
// With `states`, each rank's codec starts from (*states)[rank] (Codec::load_state)
// and its steps are first..first+steps-1; its state at the end is stored there.
std::vector<std::vector<torch::Tensor>> run(const Encoding& encoding, int world, int steps,
                                            const std::vector<Chunk>& chunks, const Input& input,
                                            std::vector<std::map<std::string, torch::Tensor>>* states = nullptr,
                                            int first = 0) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  const auto layers = model();
  std::vector<std::vector<torch::Tensor>> results(static_cast<size_t>(world));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back([&, r] {
      try {
        auto group = make_gloo_group(store, r, world, /*timeout=*/30);
        auto codec = make_codec(encoding, {.group = group.get(), .workers = world, .layers = &layers});
        if (states != nullptr) codec->load_state((*states)[static_cast<size_t>(r)]);
        for (int t = first; t < first + steps; ++t) {
          OpExecutor::Started s = codec->start(chunks, input(r, t).clone());
          s.done->wait();
          if (s.done->hasError()) std::rethrow_exception(s.done->exception_ptr());
          codec->complete(s.result);
          results[static_cast<size_t>(r)].push_back(s.result.clone());
        }
        if (states != nullptr) {
          auto& state = (*states)[static_cast<size_t>(r)];
          state.clear();
          for (const auto& [name, value] : codec->state()) state[name] = value.clone();
        }
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : ranks) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return results;
}

// Its own generator: the ranks draw at once, on their threads.
torch::Tensor randn(std::int64_t seed, at::IntArrayRef size) {
  return torch::randn(size, at::detail::createCPUGenerator(static_cast<std::uint64_t>(seed)));
}

torch::Tensor random_input(int rank, int step, std::int64_t n) { return randn(100 * rank + step, {n}) * (1 + rank); }

torch::Tensor mean_of(int world, int step, std::int64_t n) {
  torch::Tensor sum = torch::zeros({n});
  for (int r = 0; r < world; ++r) sum += random_input(r, step, n);
  return sum / world;
}

// The documented bound on |mean - float32 mean| of one message without carried
// error, for values of magnitude at most m (docs/compression.md).
double bound(const Encoding& e, int world, double m) {
  switch (e.codec) {
    case Encoding::Codec::kFp16: return world * std::ldexp(m, -11);
    case Encoding::Codec::kBf16: return (world + 1) / 2.0 * std::ldexp(m, -8);
    case Encoding::Codec::kInt8: return (world + 1) / 2.0 * m / 254;
    default: return 0;
  }
}

void expect_identical_across_ranks(const std::vector<std::vector<torch::Tensor>>& results) {
  for (std::size_t r = 1; r < results.size(); ++r) {
    for (std::size_t t = 0; t < results[r].size(); ++t) {
      EXPECT_TRUE(torch::equal(results[r][t], results[0][t])) << "rank " << r << " step " << t;
    }
  }
}

class ElementwiseCodec : public testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(ElementwiseCodec, MeanIsIdenticalOnEveryRankAndWithinItsBound) {
  const auto& [name, world] = GetParam();
  const Encoding encoding = parse_encoding(name, "test");
  const auto layers = model();
  // Whole layers; a message of a partial chunk whose values do not fill a ring
  // segment; one whose segments move in several pieces (up to the most a segment has).
  const Chunk long_layer{.layer = kLongLayer, .offset = 0, .length = 4 * layer_values(layers[kLongLayer])};
  for (const std::vector<Chunk>& chunks :
       {whole_layers(layers), std::vector<Chunk>{{2, 40, 12}}, std::vector<Chunk>{long_layer}}) {
    const std::int64_t n = values(chunks);
    const auto results = run(encoding, world, 2, chunks, [&](int r, int t) { return random_input(r, t, n); });
    expect_identical_across_ranks(results);
    // The bound is of a message without carried error: the first, or any without feedback.
    const int checked = encoding.codec == Encoding::Codec::kInt8 ? 1 : 2;
    for (int t = 0; t < checked; ++t) {
      double m = 0;
      for (int r = 0; r < world; ++r) m = std::max(m, random_input(r, t, n).abs().max().item<double>());
      const double err = (results[0][static_cast<size_t>(t)] - mean_of(world, t, n)).abs().max().item<double>();
      EXPECT_LE(err, bound(encoding, world, m)) << name << " on " << world << " ranks, step " << t;
      EXPECT_GT(err, 0) << "lossy codec " << name << " was exact: is it encoding at all?";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Codecs, ElementwiseCodec,
                         testing::Combine(testing::Values("fp16", "bf16", "int8"), testing::Values(1, 2, 3, 4)));

// Σ_t mean_t of a repeated message against t times the float32 mean, relative.
double relative_error_of_sum(const std::vector<torch::Tensor>& means, const torch::Tensor& mean, int steps) {
  torch::Tensor sum = torch::zeros_like(mean);
  for (int t = 0; t < steps; ++t) sum += means[static_cast<size_t>(t)];
  return ((sum - steps * mean).norm() / (steps * mean).norm()).item<double>();
}

TEST(Int8Codec, ErrorFeedbackKeepsTheSumOverStepsWithinOneStepsError) {
  const int world = 3, steps = 40;
  const auto chunks = whole_layers(model());
  const std::int64_t n = values(chunks);
  const auto results = run({.codec = Encoding::Codec::kInt8}, world, steps, chunks,
                           [&](int r, int) { return random_input(r, 0, n); });
  expect_identical_across_ranks(results);
  torch::Tensor sum = torch::zeros({n});
  for (const auto& mean : results[0]) sum += mean;
  const torch::Tensor mean = mean_of(world, 0, n);
  const double first = (results[0][0] - mean).abs().max().item<double>();
  const double after = (sum - steps * mean).abs().max().item<double>();
  // Without feedback the same rounding would repeat: `steps` times the first error.
  EXPECT_LE(after, 3 * first) << "first step's error " << first;
  EXPECT_LT(relative_error_of_sum(results[0], mean, steps), relative_error_of_sum(results[0], mean, 1) / 10);
}

TEST(PowerSgdCodec, RecoversAMeanOfRankAtMostRExactly) {
  const int world = 3, rank = 2;
  const auto layers = model();
  const auto chunks = whole_layers(layers);
  const std::int64_t n = values(chunks);
  // Every rank's matrices share one column and one row space of dimension R;
  // the rest is random (sent in fp16).
  auto input = [&](int r, int) {
    torch::Tensor x = random_input(r, 0, n);
    const torch::Tensor u = randn(7, {24, rank}), v = randn(8, {18, rank});
    // Layer 0's weight is packed after layers 2 and 1.
    const std::int64_t at = layer_values(layers[2]) + layer_values(layers[1]);
    x.narrow(0, at, 24 * 18).copy_(torch::matmul(u * (r + 1), v.t()).reshape({-1}));
    return x;
  };
  const auto results = run({.codec = Encoding::Codec::kPowerSgd, .rank = rank}, world, 1, chunks, input);
  expect_identical_across_ranks(results);
  torch::Tensor mean = torch::zeros({n});
  double m = 0;
  for (int r = 0; r < world; ++r) {
    mean += input(r, 0) / world;
    m = std::max(m, input(r, 0).abs().max().item<double>());
  }
  const std::int64_t at = layer_values(layers[2]) + layer_values(layers[1]);
  const torch::Tensor matrix = results[0][0].narrow(0, at, 24 * 18), expected = mean.narrow(0, at, 24 * 18);
  EXPECT_LE((matrix - expected).abs().max().item<double>(), 1e-4 * expected.abs().max().item<double>());
  // The vectors travel in fp16: layer 2, then layer 1's bias, then layer 0's.
  for (auto [begin, count] : {std::pair<std::int64_t, std::int64_t>{0, 700}, {700 + 384, 16}, {at + 24 * 18, 24}}) {
    EXPECT_LE((results[0][0].narrow(0, begin, count) - mean.narrow(0, begin, count)).abs().max().item<double>(),
              bound({.codec = Encoding::Codec::kFp16}, world, m))
        << "values [" << begin << ", " << begin + count << ")";
  }
}

// Note [Alternating factors]: with the same input each time, acpsgd's first
// message projects the mean on a random space, its second on the mean's own
// column space, which holds the error fed back too: the two sum to twice the mean.
TEST(AcpSgdCodec, RecoversAMeanOfRankAtMostRInTwoMessages) {
  const int world = 3, rank = 2;
  const auto layers = model();
  const auto chunks = whole_layers(layers);
  const std::int64_t n = values(chunks);
  const std::int64_t at = layer_values(layers[2]) + layer_values(layers[1]);  // layer 0's weight
  auto input = [&](int r, int) {
    torch::Tensor x = random_input(r, 0, n);
    const torch::Tensor u = randn(7, {24, rank}), v = randn(8, {18, rank});
    x.narrow(0, at, 24 * 18).copy_(torch::matmul(u * (r + 1), v.t()).reshape({-1}));
    return x;
  };
  const auto results = run({.codec = Encoding::Codec::kAcpSgd, .rank = rank}, world, 2, chunks, input);
  expect_identical_across_ranks(results);
  torch::Tensor mean = torch::zeros({n});
  for (int r = 0; r < world; ++r) mean += input(r, 0) / world;
  const torch::Tensor expected = mean.narrow(0, at, 24 * 18);
  const torch::Tensor first = results[0][0].narrow(0, at, 24 * 18), second = results[0][1].narrow(0, at, 24 * 18);
  EXPECT_GT((first - expected).abs().max().item<double>(), 0.2 * expected.abs().max().item<double>())
      << "a random space should miss some of the mean";
  // Up to the second message's fp16 rounding of Q̄ (the first's is fed back), whose
  // values, sums over 24 rows, are several times the mean's.
  EXPECT_LE((first + second - 2 * expected).abs().max().item<double>(), 5e-3 * expected.abs().max().item<double>());
  // The vectors travel in fp16, in the same sum, their rounding fed back: layer 2,
  // layer 1's bias, layer 0's.
  for (auto [begin, count] : {std::pair<std::int64_t, std::int64_t>{0, 700}, {700 + 384, 16}, {at + 24 * 18, 24}}) {
    for (int t = 0; t < 2; ++t) {
      const torch::Tensor got = results[0][static_cast<size_t>(t)].narrow(0, begin, count);
      double m = 0;
      for (int r = 0; r < world; ++r) m = std::max(m, input(r, t).narrow(0, begin, count).abs().max().item<double>());
      EXPECT_LE((got - mean.narrow(0, begin, count)).abs().max().item<double>(),
                bound({.codec = Encoding::Codec::kFp16}, world, m))
          << "values at " << begin;
    }
  }
}

class LowRankCodec : public testing::TestWithParam<std::string> {};

TEST_P(LowRankCodec, ErrorFeedbackMakesTheSumOverStepsConverge) {
  const int world = 3, steps = 100;
  const auto chunks = whole_layers(model());
  const std::int64_t n = values(chunks);
  const auto results = run(parse_encoding(GetParam(), "test"), world, steps, chunks,
                           [&](int r, int) { return random_input(r, 0, n); });
  expect_identical_across_ranks(results);
  const torch::Tensor mean = mean_of(world, 0, n);
  const double first = relative_error_of_sum(results[0], mean, 1);
  const double half = relative_error_of_sum(results[0], mean, steps / 2);
  const double last = relative_error_of_sum(results[0], mean, steps);
  EXPECT_GT(first, 0.3) << "a random full-rank matrix at rank 1 should be far from its approximation";
  // The error of the sum stays bounded, so its relative error falls as 1/steps.
  EXPECT_LT(last, first / 5);
  EXPECT_LT(last, 0.7 * half) << "first " << first;
}

// The rest (here layer 2: 700 values that are no matrix) travels in fp16 with each
// rank's rounding fed back, so over steps that rounding cancels. One worker: with
// more, the sum's own fp16 rounding, which no rank can see, comes on top.
TEST_P(LowRankCodec, TheRestsRoundingIsFedBack) {
  const int world = 1, steps = 40;
  const auto chunks = whole_layers(model());
  const std::int64_t n = values(chunks);
  const auto results = run(parse_encoding(GetParam(), "test"), world, steps, chunks,
                           [&](int r, int) { return random_input(r, 0, n); });
  std::vector<torch::Tensor> rest;
  for (const auto& m : results[0]) rest.push_back(m.narrow(0, 0, 700));
  const torch::Tensor mean = mean_of(world, 0, n).narrow(0, 0, 700);
  const double first = relative_error_of_sum(rest, mean, 1);
  EXPECT_GT(first, 0) << "fp16 should round some of these values";
  // Without feedback the same rounding would repeat: the relative error would stay `first`.
  EXPECT_LT(relative_error_of_sum(rest, mean, steps), first / 10);
}

INSTANTIATE_TEST_SUITE_P(Codecs, LowRankCodec, testing::Values("powersgd:1", "acpsgd:1"));

// A codec's state (error feedback, PowerSGD's Q) is all it carries between
// messages: a codec stopped after 3 messages and a fresh one loaded with its state
// go on exactly as one never stopped (docs/checkpoints.md).
class CodecState : public testing::TestWithParam<std::string> {};

TEST_P(CodecState, ACodecLoadedWithAnothersStateContinuesBitIdentically) {
  const Encoding encoding = parse_encoding(GetParam(), "test");
  const int world = 2;
  const auto chunks = whole_layers(model());
  const std::int64_t n = values(chunks);
  const Input input = [&](int r, int t) { return random_input(r, t, n); };
  const auto straight = run(encoding, world, 6, chunks, input);
  std::vector<std::map<std::string, torch::Tensor>> states(world);
  run(encoding, world, 3, chunks, input, &states, 0);
  EXPECT_FALSE(states[0].empty()) << "the codec keeps state between messages";
  const auto resumed = run(encoding, world, 3, chunks, input, &states, 3);
  for (int r = 0; r < world; ++r) {
    for (int t = 0; t < 3; ++t) {
      EXPECT_TRUE(torch::equal(resumed[static_cast<size_t>(r)][static_cast<size_t>(t)],
                               straight[static_cast<size_t>(r)][static_cast<size_t>(t + 3)]))
          << "rank " << r << " step " << t + 3;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Codecs, CodecState, testing::Values("int8", "powersgd:1", "acpsgd:1", "acpsgd:2"));

TEST(CodecState, AnEntryTheCodecDoesNotKeepIsRefused) {
  const auto layers = model();
  const CodecContext context{.workers = 2, .layers = &layers};
  auto powersgd = make_codec({.codec = Encoding::Codec::kPowerSgd, .rank = 1}, context);
  EXPECT_THROW(powersgd->load_state({{"q/9/0", torch::zeros({18, 1})}}), std::invalid_argument);
  EXPECT_THROW(powersgd->load_state({{"q/0/0", torch::zeros({18, 2})}}), std::invalid_argument);
  EXPECT_THROW(powersgd->load_state({{"feedback/0", torch::zeros({5})}}), std::invalid_argument);
  EXPECT_THROW(powersgd->load_state({{"momentum/0", torch::zeros({5})}}), std::invalid_argument);
  EXPECT_THROW(powersgd->load_state({{"p/0/0", torch::zeros({24, 1})}}), std::invalid_argument);
  powersgd->load_state({{"q/0/0", torch::ones({18, 1})}, {"feedback/2", torch::ones({700})}});
  EXPECT_EQ(powersgd->state().size(), 2u);
  // acpsgd keeps P or Q, whichever its next message reuses.
  auto acpsgd = make_codec({.codec = Encoding::Codec::kAcpSgd, .rank = 1}, context);
  EXPECT_THROW(acpsgd->load_state({{"p/0/0", torch::zeros({18, 1})}}), std::invalid_argument);
  acpsgd->load_state({{"p/0/0", torch::ones({24, 1})}, {"q/1/0", torch::ones({24, 1})}});
  EXPECT_EQ(acpsgd->state().count("p/0/0"), 1u);
  auto fp16 = make_codec({.codec = Encoding::Codec::kFp16}, context);
  EXPECT_THROW(fp16->load_state({{"feedback/0", torch::zeros({456})}}), std::invalid_argument);
  auto bf16 = make_codec({.codec = Encoding::Codec::kBf16}, context);
  EXPECT_THROW(bf16->load_state({{"feedback/0", torch::zeros({456})}}), std::invalid_argument);
}

// The parameter servers' element-wise formats (runtime/comm/parameter_server.h): their
// bytes are elementwise_wire_bytes', and a round trip is within one value's error.
TEST(WireFormat, RoundTripWithinTheCodecsErrorInItsBytes) {
  const torch::Tensor x = torch::randn({1000});
  const double m = x.abs().max().item<double>();
  for (const auto& [codec, bound] : std::map<std::string, double>{
           {"fp16", m * std::pow(2.0, -11)}, {"bf16", m * std::pow(2.0, -8)}, {"int8", m / 254}}) {
    const Encoding encoding = parse_encoding(codec, "test");
    const auto format = make_wire_format(encoding);
    const torch::Tensor wire = format->encoded(x);
    EXPECT_EQ(wire.numel(), elementwise_wire_bytes(encoding, 1000)) << codec;
    const double error = (format->decoded(wire, 1000) - x).abs().max().item<double>();
    EXPECT_LE(error, bound * 1.0001) << codec;
    EXPECT_GT(error, 0) << codec << ": exact, is it encoding at all?";
  }
  EXPECT_THROW(make_wire_format(parse_encoding("powersgd:2", "test")), std::logic_error);
}

}  // namespace
}  // namespace weft::runtime
