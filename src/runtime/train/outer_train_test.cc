// Local SGD's outer optimizer and the evaluation of the agreed model in `weft
// train`, as real processes (WEFT_BINARY; docs/local-sgd.md):
// - the outer optimizer with lr 1 and momentum 0 is today's plain average (up to
//   rounding, after 20 iterations);
// - one Nesterov outer step, by hand: flsgd with H = 2 averages once in 2
//   iterations; from the initial parameters x0 and the plain average A of that run
//   the outer step gives x0 − lr·(1 + momentum)·(x0 − A);
// - "eval_agreed" is the evaluation of the mean of the ranks' parameters;
// - EASGD's centre (ps-interleaved) steps by the outer optimizer: lr 1 and
//   momentum 0 is the plain move, and one Nesterov step is the hand-computed one;
//   its "eval_agreed" is the evaluation of the centre.
#include <nlohmann/json.hpp>

#include "runtime/model/data.h"
#include "runtime/model/evaluation.h"
#include "runtime/model/model.h"
#include "runtime/train/train_test_util.h"

namespace {

using namespace weft::testing_util;
using json = nlohmann::json;

constexpr int kSeed = 3;

std::vector<std::string> train_args(const std::string& strategy, int H, int steps, const fs::path& params,
                                    const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args{"train", "--model", "mlp", "--synthetic", "--strategy", strategy, "--H",
                                std::to_string(H), "--nproc", "2", "--steps", std::to_string(steps), "--batch", "8",
                                "--lr", "0.05", "--seed", std::to_string(kSeed), "--save-params", params.string(),
                                "--no-progress", "--failure-timeout", "30"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

std::vector<float> rank(const fs::path& params, int r) {
  return read_floats(fmt::format("{}.rank{}", params.string(), r));
}

// The last evaluation line of a metrics file.
json last_evaluation(const fs::path& metrics) {
  json line;
  std::istringstream lines(read_text(metrics));
  for (std::string text; std::getline(lines, text);) {
    const json j = json::parse(text);
    if (j.contains("eval")) line = j;
  }
  return line;
}

// `line`'s eval_agreed is the evaluation of the mean of ranks 0 and 1's saved
// parameters (which must differ), and its eval is not.
void expect_agreed_is_the_ranks_mean(const json& line, const fs::path& params) {
  ASSERT_TRUE(line.contains("eval_agreed")) << line.dump();
  const auto a = rank(params, 0), b = rank(params, 1);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a == b) << "the ranks agree; the test needs them to differ";
  torch::Tensor mean = torch::empty({static_cast<std::int64_t>(a.size())});
  for (size_t i = 0; i < a.size(); ++i) mean[static_cast<std::int64_t>(i)] = (a[i] + b[i]) / 2.0f;
  auto model = weft::runtime::make_model("mlp", kSeed);
  weft::runtime::load_flat_parameters(*model, mean);
  auto data = weft::runtime::make_data({.model = "mlp", .synthetic = true, .rank = 0, .world = 2, .batch = 8,
                                        .seed = kSeed});
  const auto expected = weft::runtime::evaluate(*model, *data, 256);
  EXPECT_DOUBLE_EQ(line["eval_agreed"]["accuracy"].get<double>(), expected.accuracy);
  EXPECT_NEAR(line["eval_agreed"]["loss"].get<double>(), expected.loss, 1e-9);
  EXPECT_NE(line["eval"]["loss"].get<double>(), line["eval_agreed"]["loss"].get<double>());
}

using OuterOptimizerTrain = TrainTest;

TEST_F(OuterOptimizerTrain, LrOneMomentumZeroIsThePlainAverage) {
  // One profile for both runs: dreamddp-opt plans its sets from the layer times,
  // which two measurements need not agree on.
  const fs::path profile = dir_ / "mlp.json";
  {
    auto [status, err] = weft("profile", {"profile", "--model", "mlp", "--batch", "8", "--out", profile.string()});
    ASSERT_EQ(status, 0) << err;
  }
  for (const std::string strategy : {"flsgd", "plsgd", "dreamddp-opt"}) {
    SCOPED_TRACE(strategy);
    const fs::path plain = dir_ / (strategy + "-plain");
    const fs::path outer = dir_ / (strategy + "-outer");
    auto [status, err] = weft(plain.filename(), train_args(strategy, 3, 20, plain, {"--profile", profile.string()}));
    ASSERT_EQ(status, 0) << err;
    std::tie(status, err) = weft(outer.filename(), train_args(strategy, 3, 20, outer,
                                                              {"--profile", profile.string(), "--outer-optimizer",
                                                               "nesterov", "--outer-lr", "1", "--outer-momentum",
                                                               "0"}));
    ASSERT_EQ(status, 0) << err;
    for (int r = 0; r < 2; ++r) {
      const auto a = rank(plain, r), b = rank(outer, r);
      ASSERT_EQ(a.size(), b.size());
      ASSERT_FALSE(a.empty());
      double worst = 0;
      for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, static_cast<double>(std::abs(a[i] - b[i])));
      EXPECT_LE(worst, 1e-5) << "rank " << r;
    }
  }
}

TEST_F(OuterOptimizerTrain, OneNesterovStepByHand) {
  constexpr double kOuterLr = 0.7, kMomentum = 0.9;
  const fs::path plain = dir_ / "plain";
  const fs::path outer = dir_ / "outer";
  auto [status, err] = weft("plain", train_args("flsgd", 2, 2, plain));
  ASSERT_EQ(status, 0) << err;
  std::tie(status, err) = weft("outer", train_args("flsgd", 2, 2, outer,
                                                   {"--outer-optimizer", "nesterov", "--outer-lr",
                                                    fmt::format("{}", kOuterLr), "--outer-momentum",
                                                    fmt::format("{}", kMomentum)}));
  ASSERT_EQ(status, 0) << err;
  auto model = weft::runtime::make_model("mlp", kSeed);
  std::vector<std::vector<torch::Tensor>> layers;
  for (int l = 0; l < model->num_layers(); ++l) layers.push_back(model->layer_parameters(l));
  const torch::Tensor x0 = weft::runtime::flat_parameters(layers).contiguous();
  const auto average = rank(plain, 0);
  const auto result = rank(outer, 0);
  ASSERT_EQ(static_cast<std::int64_t>(average.size()), x0.numel());
  ASSERT_EQ(result.size(), average.size());
  EXPECT_TRUE(result == rank(outer, 1)) << "the ranks disagree after the outer step";
  const float* initial = x0.data_ptr<float>();
  double worst = 0, moved = 0;
  for (size_t i = 0; i < average.size(); ++i) {
    const double g = static_cast<double>(initial[i]) - average[i];  // the pseudo-gradient
    const double expected = initial[i] - kOuterLr * (1 + kMomentum) * g;
    worst = std::max(worst, std::abs(expected - result[i]));
    moved = std::max(moved, std::abs(static_cast<double>(result[i]) - average[i]));
  }
  EXPECT_LE(worst, 1e-6);
  EXPECT_GT(moved, 1e-4) << "the outer step did not move the parameters off the average";
}

// After 7 iterations of flsgd with H = 5 the ranks differ (their last average was
// after iteration 4); eval_agreed evaluates their mean, eval rank 0's own.
TEST_F(OuterOptimizerTrain, EvaluationOfTheAgreedModelIsThatOfTheRanksMean) {
  const fs::path params = dir_ / "params";
  const fs::path metrics = dir_ / "metrics.jsonl";
  auto [status, err] = weft("run", train_args("flsgd", 5, 7, params, {"--eval-every", "100", "--metrics",
                                                                      metrics.string()}));
  ASSERT_EQ(status, 0) << err;
  expect_agreed_is_the_ranks_mean(last_evaluation(metrics), params);
}

// After 10 iterations of flsgd with H = 5 the last iteration averaged the whole
// model: the ranks agree, and the agreed evaluation is rank 0's own (Note [The
// agreed model after a whole average], runtime/train/trainer.cc).
TEST_F(OuterOptimizerTrain, AfterAWholeAverageTheAgreedModelIsRankZerosOwn) {
  const fs::path params = dir_ / "params";
  const fs::path metrics = dir_ / "metrics.jsonl";
  auto [status, err] = weft("run", train_args("flsgd", 5, 10, params, {"--eval-every", "100", "--metrics",
                                                                       metrics.string()}));
  ASSERT_EQ(status, 0) << err;
  const json line = last_evaluation(metrics);
  ASSERT_TRUE(line.contains("eval_agreed")) << line.dump();
  EXPECT_EQ(rank(params, 0), rank(params, 1));
  EXPECT_EQ(line["eval"], line["eval_agreed"]);
}

// With α = β = 1 and T = 1 one exchange moves the centre from x0 to the workers'
// mean A (the plain run), and with Nesterov to x0 − lr·(1 + momentum)·(x0 − A),
// where every worker lands.
TEST_F(OuterOptimizerTrain, TheEasgdCentreStepsByTheOuterOptimizer) {
  // ps-interleaved (2 workers, 1 server) for `steps`; each worker's parameters.
  const auto train_easgd = [&](const std::string& name, int steps, const std::vector<std::string>& flags) {
    const fs::path params = dir_ / name;
    std::vector<std::string> args{"train", "--model", "mlp", "--synthetic", "--strategy", "ps-interleaved",
                                  "--servers", "1", "--nproc", "2", "--steps", std::to_string(steps), "--batch",
                                  "8", "--lr", "0.05", "--seed", std::to_string(kSeed), "--save-params",
                                  params.string(), "--no-progress", "--failure-timeout", "30"};
    args.insert(args.end(), flags.begin(), flags.end());
    const auto [status, err] = weft(name, args);
    EXPECT_EQ(status, 0) << err;
    return std::vector<std::vector<float>>{rank(params, 0), rank(params, 1)};
  };
  const auto plain = train_easgd("psi-plain", 20, {});
  const auto unit = train_easgd("psi-unit", 20, {"--outer-optimizer", "nesterov", "--outer-lr", "1",
                                                       "--outer-momentum", "0"});
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(plain[r].size(), unit[r].size());
    double worst = 0;
    for (size_t i = 0; i < plain[r].size(); ++i) {
      worst = std::max(worst, static_cast<double>(std::abs(plain[r][i] - unit[r][i])));
    }
    EXPECT_LE(worst, 1e-5) << "rank " << r;
  }

  constexpr double kOuterLr = 0.7, kMomentum = 0.9;
  const std::vector<std::string> full{"--T", "1", "--easgd-alpha", "1", "--easgd-beta", "1"};
  const auto average = train_easgd("psi-one-plain", 1, full);
  std::vector<std::string> nesterov = full;
  nesterov.insert(nesterov.end(), {"--outer-optimizer", "nesterov", "--outer-lr", fmt::format("{}", kOuterLr),
                                   "--outer-momentum", fmt::format("{}", kMomentum)});
  const auto stepped = train_easgd("psi-one-outer", 1, nesterov);
  auto model = weft::runtime::make_model("mlp", kSeed);
  std::vector<std::vector<torch::Tensor>> layers;
  for (int l = 0; l < model->num_layers(); ++l) layers.push_back(model->layer_parameters(l));
  const torch::Tensor x0 = weft::runtime::flat_parameters(layers).contiguous();
  ASSERT_EQ(static_cast<std::int64_t>(average[0].size()), x0.numel());
  ASSERT_EQ(stepped[0].size(), average[0].size());
  const float* initial = x0.data_ptr<float>();
  double worst = 0, moved = 0;
  for (size_t i = 0; i < average[0].size(); ++i) {
    const double g = static_cast<double>(initial[i]) - average[0][i];  // the pseudo-gradient
    for (int r = 0; r < 2; ++r) {  // α = 1: each worker lands on the centre, up to x − (x − c)'s rounding
      worst = std::max(worst, std::abs(initial[i] - kOuterLr * (1 + kMomentum) * g - stepped[r][i]));
    }
    moved = std::max(moved, std::abs(static_cast<double>(stepped[0][i]) - average[0][i]));
  }
  EXPECT_LE(worst, 1e-6);
  EXPECT_GT(moved, 1e-4) << "the outer step did not move the centre off the mean";
}

// ps-interleaved with T = 1, β = 1 and α = 0: the workers are never pulled, and
// every exchange sets the centre to the mean of what they push, so after the last
// one the centre is the mean of their final parameters; eval_agreed evaluates it.
TEST_F(OuterOptimizerTrain, EvaluationOfTheEasgdCentre) {
  const fs::path params = dir_ / "params";
  const fs::path metrics = dir_ / "metrics.jsonl";
  auto [status, err] = weft("run", {"train", "--model", "mlp", "--synthetic", "--strategy", "ps-interleaved",
                                    "--servers", "1", "--T", "1", "--easgd-beta", "1", "--easgd-alpha", "0",
                                    "--nproc", "2", "--steps", "7", "--batch", "8", "--lr", "0.05", "--seed",
                                    std::to_string(kSeed), "--save-params", params.string(), "--eval-every", "100",
                                    "--metrics", metrics.string(), "--no-progress", "--failure-timeout", "30"});
  ASSERT_EQ(status, 0) << err;
  expect_agreed_is_the_ranks_mean(last_evaluation(metrics), params);
}

}  // namespace
