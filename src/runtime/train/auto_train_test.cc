// `weft train --strategy auto` as real processes (WEFT_BINARY), 2 workers over
// loopback: rank 0 chooses, says why, and every rank trains the recipe; the
// metrics and the checkpoint record it, and a resumed job trains it again (Note
// [Auto resumes its recipe] in trainer.cc). A profile with fixed layer times
// makes the choice the same on every run.
#include "runtime/train/train_test_util.h"
#include "schedulers/strategies.h"

namespace {

using namespace weft::testing_util;

class AutoTrain : public TrainTest {};

// The strategy of "--strategy auto chose NAME[ + codec][ by sites]: ...".
std::string chosen_in(const std::string& err) {
  const std::string said = "--strategy auto chose ";
  const auto at = err.find(said);
  if (at == std::string::npos) return {};
  const auto start = at + said.size();
  return err.substr(start, err.find_first_of(" :", start) - start);
}

TEST_F(AutoTrain, RankZeroChoosesAndEveryRankTrainsAndRecordsTheRecipe) {
  const fs::path profile = fixed_time_profile("mlp", 8, 1e-3, 2e-3);
  const fs::path metrics = dir_ / "metrics.jsonl";
  const fs::path checkpoint = dir_ / "checkpoint";
  const auto args = [&](int steps) {
    return std::vector<std::string>{"train", "--model", "mlp", "--synthetic", "--nproc", "2", "--steps",
                                    std::to_string(steps), "--batch", "8", "--strategy", "auto", "--allow",
                                    "ssgd,local_sgd,lossy", "--profile", profile.string(), "--metrics",
                                    metrics.string(), "--checkpoint", checkpoint.string(), "--no-progress"};
  };
  const auto [status, err] = weft("first", args(4));
  ASSERT_EQ(status, 0) << err;
  const std::string chosen = chosen_in(err);
  ASSERT_FALSE(chosen.empty()) << err;
  EXPECT_NO_THROW(weft::find_strategy(chosen)) << err;
  for (const char* part : {"per iteration predicted for 2 workers", "x the default wfbp", "from --profile"}) {
    EXPECT_NE(err.find(part), std::string::npos) << part << " in: " << err;
  }
  const auto strategies_in_metrics = [&] {
    std::vector<std::string> out;
    std::istringstream lines(read_text(metrics));
    for (std::string line; std::getline(lines, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j.contains("strategy")) out.push_back(j["strategy"].get<std::string>());
    }
    return out;
  };
  const auto first = strategies_in_metrics();
  EXPECT_EQ(first, std::vector<std::string>(8, chosen));  // 4 iterations of 2 ranks
  const auto job = nlohmann::json::parse(read_text(checkpoint / "latest.json"))["job"];
  EXPECT_EQ(job["strategy"], chosen);

  const auto [resumed, resumed_err] = weft("resumed", [&] {
    auto a = args(6);
    a.push_back("--resume");
    return a;
  }());
  ASSERT_EQ(resumed, 0) << resumed_err;
  EXPECT_NE(resumed_err.find("--strategy auto resumes the recipe its checkpoint records: " + chosen),
            std::string::npos)
      << resumed_err;
  EXPECT_EQ(chosen_in(resumed_err), "") << "a resumed auto job chooses again: " << resumed_err;
  EXPECT_EQ(strategies_in_metrics(), std::vector<std::string>(12, chosen));
}

// Note [How auto chooses H], Note [Auto's outer optimizer], Note [Outer defaults, measured].
TEST_F(AutoTrain, LocalSgdGetsAPeriodAndTheOuterOptimizerMeasuredForTheInnerOne) {
  const fs::path profile = fixed_time_profile("mlp", 8, 1e-3, 2e-3);
  const auto job_of = [&](const std::string& name, std::vector<std::string> extra) {
    const fs::path checkpoint = dir_ / name;
    std::vector<std::string> a{"train", "--model", "mlp", "--synthetic", "--nproc", "2", "--steps", "2", "--batch",
                               "8", "--profile", profile.string(), "--checkpoint", checkpoint.string(),
                               "--no-progress"};
    a.insert(a.end(), extra.begin(), extra.end());
    const auto [status, err] = weft(name, a);
    EXPECT_EQ(status, 0) << err;
    return std::pair{nlohmann::json::parse(read_text(checkpoint / "latest.json"))["job"], err};
  };
  // Plain SGD: DiLoCo's step at any period, H among the periods.
  const auto [sgd, sgd_err] = job_of("sgd", {"--strategy", "auto", "--allow", "local_sgd"});
  const int H = sgd["H"].get<int>();
  EXPECT_TRUE(H == 2 || H == 4 || H == 8) << sgd;
  EXPECT_EQ(sgd["outer_optimizer"], "nesterov") << sgd;
  EXPECT_EQ(sgd["outer_lr"], 0.7) << sgd;
  EXPECT_EQ(sgd["outer_momentum"], 0.9) << sgd;
  EXPECT_NE(sgd_err.find("stepped by Nesterov"), std::string::npos) << sgd_err;
  // Momentum SGD averaged every 4 iterations: the plain average; H as given.
  const auto [momentum, momentum_err] =
      job_of("momentum", {"--strategy", "auto", "--allow", "local_sgd", "--optimizer", "momentum", "--H", "4"});
  EXPECT_EQ(momentum["H"], 4) << momentum;
  EXPECT_EQ(momentum["outer_optimizer"], "none") << momentum;
  // Named without values: the measured default, which is not warned about.
  const auto [gentle, gentle_err] = job_of("gentle", {"--strategy", "flsgd", "--H", "4", "--optimizer", "adam",
                                                      "--outer-optimizer", "nesterov"});
  EXPECT_EQ(gentle["outer_momentum"], 0.5) << gentle;
  EXPECT_EQ(gentle_err.find("warning"), std::string::npos) << gentle_err;
  // DiLoCo's step over Adam every 4 iterations: warned about before the run.
  const auto [risky, risky_err] = job_of("risky", {"--strategy", "flsgd", "--H", "4", "--optimizer", "adam",
                                                   "--outer-optimizer", "nesterov", "--outer-lr", "0.7",
                                                   "--outer-momentum", "0.9"});
  EXPECT_NE(risky_err.find("carries each averaged change 7x"), std::string::npos) << risky_err;
  EXPECT_NE(risky_err.find("--outer-momentum 0.5"), std::string::npos) << risky_err;
}

TEST_F(AutoTrain, AllowIsRefusedWithoutAutoAndBadFamiliesListTheAcceptedOnes) {
  const std::vector<std::string> base{"train", "--model", "mlp", "--synthetic", "--steps", "1", "--no-progress"};
  auto without_auto = base;
  without_auto.insert(without_auto.end(), {"--allow", "ssgd"});
  const auto [status, err] = weft("without-auto", without_auto);
  EXPECT_EQ(status, 2) << err;
  EXPECT_NE(err.find("--allow ssgd: only with --strategy auto"), std::string::npos) << err;

  auto bad = base;
  bad.insert(bad.end(), {"--strategy", "auto", "--allow", "ssgd,fast"});
  const auto [bad_status, bad_err] = weft("bad-family", bad);
  EXPECT_EQ(bad_status, 2) << bad_err;
  EXPECT_NE(bad_err.find("--allow ssgd,fast"), std::string::npos) << bad_err;
  EXPECT_NE(bad_err.find("accepted: ssgd, local_sgd, ps, lossy"), std::string::npos) << bad_err;
}

}  // namespace
