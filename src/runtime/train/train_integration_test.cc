// `weft train` as real processes: the launcher, Gloo over TCP, the engine and the
// training loop together. The binary is the one CMake built (WEFT_BINARY).
//
// - S-SGD strategies on 2 and 4 processes end with the parameters of 1 process
//   trained on the combined batch, and every rank bit-identical;
// - a worker killed mid-run makes the job exit non-zero, naming it, and leaves no
//   process behind;
// - options left unset are tuned as `weft plan` tunes them;
// (train_slow_test.cc: the models learn.)
#include <cmath>
#include <fstream>
#include <limits>
#include <memory>

#include "runtime/launch/launcher.h"
#include "runtime/train/train_test_util.h"
#include "schedulers/blocks.h"

namespace {

using namespace weft::testing_util;

constexpr int kSteps = 20;
constexpr int kBatch = 8;

// One process on the combined batch of `world` workers; the reference of the S-SGD
// equivalence property.
std::vector<std::string> train_args(const std::string& strategy, int nproc, int batch, const fs::path& params) {
  return {"train", "--model", "mlp", "--synthetic", "--strategy", strategy, "--nproc", std::to_string(nproc),
          "--steps", std::to_string(kSteps), "--batch", std::to_string(batch), "--lr", "0.05", "--seed", "3",
          "--save-params", params.string(), "--no-progress", "--failure-timeout", "60"};
}

class Equivalence : public TrainTest, public testing::WithParamInterface<int> {};

TEST_P(Equivalence, SynchronousStrategiesEndAsOneProcessOnTheCombinedBatch) {
  const int world = GetParam();
  const auto [ref_status, ref_err] =
      weft("reference", train_args("ssgd", 1, world * kBatch, dir_ / "reference"));
  ASSERT_EQ(ref_status, 0) << ref_err;
  const std::vector<float> expected = read_floats(dir_ / "reference.rank0");
  ASSERT_FALSE(expected.empty());
  // A measured network under which every message is summed by all-gather (Note
  // [Small all-reduces by all-gather] in runtime/comm/process_group.h).
  const fs::path gathering = dir_ / "gathering-net.json";
  std::ofstream(gathering) << R"({"a_s": 1e-3, "b_s_per_byte": 1e-8, "gather_below_bytes": 1048576})";
  // bytescheduler and dcredit exercise the engine's leader mode (Note [Collective order]).
  for (const std::string strategy : {"ssgd", "wfbp", "ddp", "mgwfbp", "bytescheduler", "dcredit", "wfbp-gather"}) {
    SCOPED_TRACE(fmt::format("{} on {} processes", strategy, world));
    const fs::path params = dir_ / strategy;
    const bool gather = strategy == "wfbp-gather";
    std::vector<std::string> args = train_args(gather ? "wfbp" : strategy, world, kBatch, params);
    if (gather) args.insert(args.end(), {"--network", gathering.string(), "--trace", (dir_ / "gather.json").string()});
    const auto [status, err] = weft(strategy, args);
    ASSERT_EQ(status, 0) << err;
    if (gather) {
      EXPECT_NE(read_text(dir_ / "gather.json").find("allgather"), std::string::npos);
    }
    const std::vector<float> rank0 = read_floats(params.string() + ".rank0");
    ASSERT_EQ(rank0.size(), expected.size());
    for (int r = 1; r < world; ++r) {
      EXPECT_TRUE(read_floats(fmt::format("{}.rank{}", params.string(), r)) == rank0)
          << "rank " << r << " is not bit-identical to rank 0";
    }
    double worst = 0;
    for (size_t i = 0; i < expected.size(); ++i) {
      worst = std::max(worst, static_cast<double>(std::abs(rank0[i] - expected[i])));
    }
    EXPECT_LE(worst, 1e-5);
  }
}

// What `weft train` is not told it tunes for the profile and the network, as
// `weft plan` does (plan/tuning.h); what it is told it keeps.
TEST_F(TrainTest, UnsetOptionsAreTunedAsThePlannerTunesThem) {
  const fs::path profile = dir_ / "cnn.json";
  std::ofstream(profile) << R"({"model": "cnn", "batch": 32, "layers": [
    {"name": "stem", "params": 176, "bytes_per_param": 4, "fp_s": 6e-4, "bp_s": 1e-3},
    {"name": "block1", "params": 14528, "bytes_per_param": 4, "fp_s": 5e-3, "bp_s": 9e-3},
    {"name": "block2", "params": 18560, "bytes_per_param": 4, "fp_s": 3e-3, "bp_s": 8e-3},
    {"name": "block3", "params": 57728, "bytes_per_param": 4, "fp_s": 5e-3, "bp_s": 1e-2},
    {"name": "head", "params": 650, "bytes_per_param": 4, "fp_s": 3e-4, "bp_s": 3e-4}]})";
  const fs::path network = dir_ / "net.json";
  std::ofstream(network) << R"({"a_s": 1e-3, "b_s_per_byte": 4e-7})";
  const std::vector<std::string> planned{"--profile", profile.string(), "--network", network.string()};

  std::vector<std::string> plan{"plan", "--workers", "2", "--json"};
  plan.insert(plan.end(), planned.begin(), planned.end());
  const auto [plan_status, plan_err] = weft("plan", plan);
  ASSERT_EQ(plan_status, 0) << plan_err;
  weft::Bytes partition = 0;
  const auto planner = nlohmann::json::parse(read_text(dir_ / "plan" / "stdout"));
  for (const auto& s : planner.at("strategies")) {
    if (s.at("name") == "dcredit") partition = s.at("options").at("partition_B").get<weft::Bytes>();
  }
  ASSERT_NE(partition, weft::kDefaultPartition) << "a network under which tuning changes nothing tests nothing";

  std::vector<std::string> train{"train", "--model", "cnn", "--synthetic", "--strategy", "dcredit", "--nproc", "2",
                                 "--steps", "2", "--failure-timeout", "60"};
  train.insert(train.end(), planned.begin(), planned.end());
  const auto [tuned_status, tuned_err] = weft("tuned", train);
  ASSERT_EQ(tuned_status, 0) << tuned_err;
  EXPECT_NE(tuned_err.find(fmt::format("dcredit {{\"horizon\":0.0,\"partition_B\":{},", partition)),
            std::string::npos)
      << tuned_err;

  train.insert(train.end(), {"--partition", "128KiB"});
  const auto [given_status, given_err] = weft("given", train);
  ASSERT_EQ(given_status, 0) << given_err;
  EXPECT_NE(given_err.find("\"partition_B\":131072,"), std::string::npos) << given_err;
}

INSTANTIATE_TEST_SUITE_P(Processes, Equivalence, testing::Values(2, 4));

TEST_F(TrainTest, AKilledWorkerFailsTheJobByNameAndLeavesNoProcess) {
  kill_mid_run({"--model", "mlp", "--synthetic", "--strategy", "wfbp", "--nproc", "3", "--steps", "1000000",
                "--no-progress", "--failure-timeout", "20"},
               /*processes=*/3, /*workers=*/3, /*victim=*/1, "rank 1 failed (killed by signal 9)");
}

// An output in a directory that does not exist is bad input, refused before any
// process starts: a million steps are not trained only to lose their trace.
TEST_F(TrainTest, AnOutputInAMissingDirectoryIsRefusedBeforeTraining) {
  for (const std::string flag : {"--trace", "--save-params", "--metrics"}) {
    const fs::path out = dir_ / "no_such_dir" / "out.json";
    Weft job({"train", "--model", "mlp", "--synthetic", "--nproc", "2", "--steps", "1000000", "--no-progress",
              flag, out.string()},
             dir_);
    EXPECT_EQ(job.wait(std::chrono::seconds(20)), 2) << flag;
    // --save-params FILE is written by each rank as FILE.rank<r>: checked as rank 0's.
    const std::string named = out.string() + (flag == "--save-params" ? ".rank0" : "");
    EXPECT_NE(job.stderr_text().find(flag + " " + named + ": cannot write it (its directory"), std::string::npos)
        << job.stderr_text();
  }
  Weft profile({"profile", "--network", "--nproc", "2", "--out", (dir_ / "no_such_dir" / "net.json").string()}, dir_);
  EXPECT_EQ(profile.wait(std::chrono::seconds(20)), 2);
  EXPECT_NE(profile.stderr_text().find("--out "), std::string::npos) << profile.stderr_text();
}

// `weft profile --model --nproc K --host H` (Note [Profiling together]): K
// processes, one profile of the model alone, the host they shared, every process
// gone.
TEST_F(TrainTest, ProcessesProfileTogetherIntoOneProfile) {
  const fs::path out = dir_ / "together.json";
  const fs::path host_file = dir_ / "host.json";
  Weft job({"profile", "--model", "mlp", "--batch", "8", "--nproc", "2", "--warmup", "1", "--iterations", "3",
            "--out", out.string(), "--host", host_file.string()},
           dir_);
  const int status = job.wait(std::chrono::seconds(120));
  ASSERT_EQ(status, 0) << job.stderr_text();
  const nlohmann::json profile = nlohmann::json::parse(read_text(out));
  EXPECT_EQ(profile.at("model"), "mlp");
  EXPECT_NE(profile.at("device").get<std::string>().find("2 processes profiling together"), std::string::npos);
  EXPECT_FALSE(profile.contains("processes")) << "the profile describes the model alone";
  // Both on this machine, sharing its cores (Note [Shared cores], sim/simulator.cc).
  const nlohmann::json host = nlohmann::json::parse(read_text(host_file));
  EXPECT_EQ(host.at("format"), "weft-host/1");
  EXPECT_EQ(host.at("processes"), 2);
  EXPECT_GE(host.at("cores").get<int>(), 1);
  EXPECT_LE(host.at("cores").get<unsigned>(), std::thread::hardware_concurrency());
  for (const auto& layer : profile.at("layers")) EXPECT_GT(layer.at("fp_s").get<double>(), 0);
  // Every process of the job had the output path on its command line.
  EXPECT_EQ(weft::test_support::processes_mentioning(out.string()), std::vector<pid_t>{}) << "processes survived";
}

// Processes that share the cores time 200 iterations unless told otherwise; one
// alone, 20 (timed_iterations in cli/profile_command.cc).
TEST_F(TrainTest, ProfilingSeveralProcessesTimesMoreIterationsByDefault) {
  Weft together({"profile", "--model", "mlp", "--batch", "8", "--nproc", "2", "--warmup", "1"}, dir_);
  ASSERT_EQ(together.wait(std::chrono::seconds(120)), 0) << together.stderr_text();
  EXPECT_NE(together.stderr_text().find("iteration 201/201"), std::string::npos) << together.stderr_text();
  Weft alone({"profile", "--model", "mlp", "--batch", "8", "--warmup", "1"}, dir_);
  ASSERT_EQ(alone.wait(std::chrono::seconds(60)), 0) << alone.stderr_text();
  EXPECT_NE(alone.stderr_text().find("iteration 21/21"), std::string::npos) << alone.stderr_text();
  EXPECT_EQ(alone.stderr_text().find("iteration 201/201"), std::string::npos);

  // A job started by hand, as torchrun starts one: each process knows the others
  // only from the variables.
  const weft::runtime::ReservedPort reserved;
  const std::string port = std::to_string(reserved.number());
  std::vector<std::unique_ptr<Weft>> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    const fs::path dir = dir_ / fmt::format("rank{}", rank);
    fs::create_directories(dir);
    ranks.push_back(std::make_unique<Weft>(
        std::vector<std::string>{"profile", "--model", "mlp", "--batch", "8", "--warmup", "1"}, dir,
        std::vector<std::pair<std::string, std::string>>{
            {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}, {"RANK", std::to_string(rank)}, {"WORLD_SIZE", "2"}}));
  }
  for (auto& rank : ranks) ASSERT_EQ(rank->wait(std::chrono::seconds(120)), 0) << rank->stderr_text();
  EXPECT_NE(ranks[0]->stderr_text().find("iteration 201/201"), std::string::npos) << ranks[0]->stderr_text();
}

// `--interference` (Note [Measuring the cores]): an all-reduce stream on its own
// group, timed for CPU while the processes wait and then beside a second
// profiling phase, then phases in step and apart that time the skews and the core wait
// (Note [Measuring skew]); the processes end with the job.
TEST_F(TrainTest, ProcessesMeasureHowMuchAllReducesSlowTheirCompute) {
  const fs::path out = dir_ / "slowdown.json";
  const fs::path host_file = dir_ / "host.json";
  Weft job({"profile", "--model", "mlp", "--batch", "8", "--nproc", "2", "--warmup", "1", "--iterations", "40",
            "--interference", "--out", out.string(), "--host", host_file.string()},
           dir_);
  const int status = job.wait(std::chrono::seconds(120));
  ASSERT_EQ(status, 0) << job.stderr_text();
  EXPECT_NE(nlohmann::json::parse(read_text(out)).at("device").get<std::string>().find("then all-reducing"),
            std::string::npos);
  const nlohmann::json profile = nlohmann::json::parse(read_text(host_file));  // what it measured: the host's
  EXPECT_NE(job.stdout_text().find("comm_cores"), std::string::npos) << "one line per host parameter";
  // Behaviour only: each field measured, finite and >= 0, comm_cores a share of
  // a core as defined; how large it or a skew comes out depends on the
  // machine's load, not on the code.
  const auto measured = [&](const char* field, double upper = std::numeric_limits<double>::infinity()) {
    EXPECT_TRUE(profile.contains(field)) << field << " " << profile.dump();
    const double value = profile.value(field, 0.0);
    EXPECT_TRUE(std::isfinite(value)) << field;
    EXPECT_GE(value, 0) << field;
    EXPECT_LE(value, upper) << field;
    return value;
  };
  EXPECT_GT(measured("comm_cores", 1), 0);  // all-reducing takes some CPU
  measured("drift");
  EXPECT_GT(measured("skew_s"), 0);  // two processes never wait alike
  EXPECT_GT(measured("back_to_back_skew_s"), 0);
  EXPECT_EQ(weft::test_support::processes_mentioning(out.string()), std::vector<pid_t>{}) << "processes survived";

  Weft alone({"profile", "--model", "mlp", "--interference", "--host", host_file.string()}, dir_);
  EXPECT_EQ(alone.wait(std::chrono::seconds(60)), 2);
  EXPECT_NE(alone.stderr_text().find("give --nproc 2 or more"), std::string::npos) << alone.stderr_text();
  Weft nowhere({"profile", "--model", "mlp", "--nproc", "2", "--interference"}, dir_);
  EXPECT_EQ(nowhere.wait(std::chrono::seconds(60)), 2);
  EXPECT_NE(nowhere.stderr_text().find("give --host FILE"), std::string::npos) << nowhere.stderr_text();
}

}  // namespace
