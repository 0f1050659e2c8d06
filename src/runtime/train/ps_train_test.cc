// `weft train --servers S` with the parameter-server strategies, as real processes
// (WEFT_BINARY): workers and servers exchanging over Gloo point-to-point.
//
// - `ps` (synchronous: the server averages the gradients and steps) ends with
//   wfbp's parameters;
// - `ps-interleaved` with T = 1, α = β = 1 and plain SGD is per-step model
//   averaging (Note [What the server does] in runtime/comm/parameter_server.h), whose
//   reference is `flsgd --H 1`, computed by all-reduce instead of servers;
// - with the defaults (T = 3, α = β/P) the workers' models differ — elastic
//   averaging keeps them apart — so the comparisons above can fail;
// - pushes and answers in int8 or fp16 (Note [Compressed exchanges]) learn as
//   float32 does, and ps's workers still end with the same bits;
// - a killed server or worker fails the job promptly, naming it, and leaves no
//   process behind.
// (ps_train_slow_test.cc: the cnn learns Fashion-MNIST with ps-interleaved.)
#include <cmath>
#include <numeric>
#include <sstream>

#include "runtime/train/train_test_util.h"

namespace {

using namespace weft::testing_util;

constexpr int kSteps = 20;

class PsTrainTest : public TrainTest {
 protected:
  // Trains mlp on synthetic data; returns each rank's final parameters.
  std::vector<std::vector<float>> train(const std::string& name, std::vector<std::string> flags, int workers) {
    const fs::path params = dir_ / (name + ".params");
    std::vector<std::string> args{"train", "--model", "mlp", "--synthetic", "--steps", std::to_string(kSteps),
                                  "--batch", "8", "--lr", "0.05", "--nproc", std::to_string(workers),
                                  "--save-params", params.string(), "--no-progress"};
    args.insert(args.end(), flags.begin(), flags.end());
    const auto [status, err] = weft(name, args);
    EXPECT_EQ(status, 0) << err;
    std::vector<std::vector<float>> out;
    for (int r = 0; r < workers; ++r) out.push_back(read_floats(params.string() + ".rank" + std::to_string(r)));
    return out;
  }

  // 2 workers and 1 server train; the process started as rank `victim` is killed.
  void expect_prompt_failure(int victim, const std::string& expected) {
    const std::string err = kill_mid_run({"--model", "mlp", "--synthetic", "--strategy", "ps-interleaved",
                                          "--servers", "1", "--nproc", "2", "--steps", "1000000", "--no-progress",
                                          "--failure-timeout", "20"},
                                         /*processes=*/3, /*workers=*/2, victim, expected);
    // The peers see the broken connection: the launcher never had to terminate
    // them at the 20 s failure timeout (how fast they saw it is the machine's).
    EXPECT_EQ(err.find("terminating"), std::string::npos) << err;
  }
};

float max_difference(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float most = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) most = std::max(most, std::abs(a[i] - b[i]));
  return most;
}

TEST_F(PsTrainTest, SynchronousPsEndsWithWfbpsParameters) {
  for (const auto& [workers, servers] : std::vector<std::pair<int, int>>{{2, 1}, {4, 2}}) {
    SCOPED_TRACE(testing::Message() << workers << " workers, " << servers << " servers");
    const auto ps = train(fmt::format("ps{}", workers), {"--strategy", "ps", "--servers", std::to_string(servers)},
                          workers);
    const auto wfbp = train(fmt::format("wfbp{}", workers), {"--strategy", "wfbp"}, workers);
    for (int r = 0; r < workers; ++r) {
      EXPECT_EQ(ps[r], ps[0]) << "rank " << r << " differs from rank 0";
      EXPECT_LE(max_difference(ps[r], wfbp[0]), 1e-5) << "rank " << r;
    }
  }
}

TEST_F(PsTrainTest, InterleavedWithFullElasticityIsPerStepModelAveraging) {
  for (const int workers : {2, 4}) {
    SCOPED_TRACE(testing::Message() << workers << " workers");
    const auto ps = train(fmt::format("psi{}", workers),
                          {"--strategy", "ps-interleaved", "--servers", "1", "--T", "1", "--easgd-alpha", "1",
                           "--easgd-beta", "1"},
                          workers);
    const auto averaged = train(fmt::format("flsgd{}", workers), {"--strategy", "flsgd", "--H", "1"}, workers);
    for (int r = 0; r < workers; ++r) EXPECT_LE(max_difference(ps[r], averaged[0]), 1e-5) << "rank " << r;
  }
}

TEST_F(PsTrainTest, ElasticAveragingKeepsTheWorkersApart) {
  const auto ps = train("psi-default", {"--strategy", "ps-interleaved", "--servers", "1"}, 2);
  EXPECT_GT(max_difference(ps[0], ps[1]), 1e-4);
}

// Note [Compressed exchanges] (runtime/comm/parameter_server.h), for real: the mlp on
// Fashion-MNIST with 2 workers and 1 server, its pushes and answers in int8 or
// fp16, learns as the float32 run does, and ps's workers end with the same bits.
TEST_F(PsTrainTest, CompressedExchangesLearnLikeFloat32) {
  // Rank 0's mean loss over its first 5 and its last 20 iterations.
  const auto losses = [&](const std::string& name, std::vector<std::string> flags) {
    const fs::path metrics = dir_ / (name + ".jsonl");
    flags.insert(flags.end(), {"--metrics", metrics.string()});
    const fs::path params = dir_ / (name + ".params");
    std::vector<std::string> args{"train", "--model", "mlp", "--steps", "80", "--batch", "32", "--lr", "0.05",
                                  "--nproc", "2", "--servers", "1", "--save-params", params.string(),
                                  "--no-progress"};
    args.insert(args.end(), flags.begin(), flags.end());
    const auto [status, err] = weft(name, args);
    EXPECT_EQ(status, 0) << err;
    std::vector<double> loss;
    std::istringstream lines(read_text(metrics));
    for (std::string line; std::getline(lines, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j["rank"] == 0 && j.contains("loss")) loss.push_back(j["loss"]);
    }
    EXPECT_EQ(loss.size(), 80u) << name;
    if (loss.size() < 25) return std::pair{0.0, 0.0};
    const auto mean = [](auto a, auto b) { return std::accumulate(a, b, 0.0) / static_cast<double>(b - a); };
    return std::pair{mean(loss.begin(), loss.begin() + 5), mean(loss.end() - 20, loss.end())};
  };
  const auto [first, exact] = losses("ps", {"--strategy", "ps"});
  EXPECT_LT(exact, 0.7 * first) << "float32 ps: " << first << " -> " << exact;
  for (const std::string codec : {"int8", "fp16"}) {
    const auto [start, last] = losses("ps-" + codec, {"--strategy", "ps", "--compression", codec});
    EXPECT_LT(last, 0.7 * start) << codec << ": " << start << " -> " << last;
    EXPECT_LT(last, 1.1 * exact) << codec << ": " << last << " against float32's " << exact;
    const fs::path params = dir_ / ("ps-" + codec + ".params");
    EXPECT_EQ(read_floats(params.string() + ".rank0"), read_floats(params.string() + ".rank1")) << codec;
  }
  const auto [start, last] =
      losses("psi-int8", {"--strategy", "ps-interleaved", "--T", "1", "--compression", "int8"});
  EXPECT_LT(last, 0.7 * start) << "ps-interleaved int8: " << start << " -> " << last;
}

TEST_F(PsTrainTest, AKilledServerFailsTheJobByName) {
  expect_prompt_failure(2, "server 0 (rank 2) failed (killed by signal 9)");
}

TEST_F(PsTrainTest, AKilledWorkerFailsTheJobByName) { expect_prompt_failure(1, "rank 1 failed (killed by signal 9)"); }

}  // namespace
