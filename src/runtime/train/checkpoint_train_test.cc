// Checkpoints of `weft train` as real processes (WEFT_BINARY; docs/checkpoints.md):
// a job stopped and resumed ends bit-identical to one never interrupted — stopped
// at its end, and SIGKILLed mid-run; compressed too, parameter servers too — the
// resumed job traces the iterations it trains, and a checkpoint of another job is
// refused.
#include <signal.h>

#include <map>
#include <set>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "runtime/train/train_test_util.h"

namespace {

using namespace weft::testing_util;
using json = nlohmann::json;

std::vector<std::string> train_args(const std::string& strategy, std::int64_t steps, const fs::path& params,
                                    const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args{"train", "--model", "mlp", "--synthetic", "--strategy", strategy, "--nproc", "2",
                                "--steps", std::to_string(steps), "--batch", "8", "--lr", "0.05", "--optimizer",
                                "momentum", "--seed", "5", "--save-params", params.string(), "--no-progress",
                                "--failure-timeout", "30"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

class Checkpoints : public TrainTest {
 protected:
  // Every one of `ranks` processes measured events of iterations [from, to) exactly.
  static void expect_traced(const fs::path& trace, int from, int to, int ranks) {
    std::map<int, std::set<int>> iterations;  // pid -> iterations
    const json events = json::parse(read_text(trace))["traceEvents"];
    for (const json& e : events) {
      if (e["ph"] == "X" && e["pid"].get<int>() < ranks) iterations[e["pid"]].insert(e["args"]["iteration"].get<int>());
    }
    std::set<int> expected;
    for (int t = from; t < to; ++t) expected.insert(t);
    ASSERT_EQ(iterations.size(), static_cast<std::size_t>(ranks));
    for (const auto& [pid, seen] : iterations) EXPECT_EQ(seen, expected) << "process " << pid;
  }

  // Runs `strategy` for `steps` straight, and for `steps / 2` then resumed to
  // `steps`; both workers' final parameters must be equal bit for bit. `ranks`:
  // the job's processes, parameter servers included.
  void expect_resume_is_exact(const std::string& strategy, int steps, const std::vector<std::string>& extra,
                              int ranks = 2) {
    SCOPED_TRACE(strategy);
    const fs::path straight = dir_ / (strategy + "-straight");
    auto [status, err] = weft(strategy + "-straight", train_args(strategy, steps, straight, extra));
    ASSERT_EQ(status, 0) << err;
    const fs::path ckpt = dir_ / (strategy + "-ckpt");
    const fs::path resumed = dir_ / (strategy + "-resumed");
    std::vector<std::string> with_ckpt = extra;
    with_ckpt.insert(with_ckpt.end(), {"--checkpoint", ckpt.string(), "--checkpoint-every", "3"});
    std::tie(status, err) = weft(strategy + "-first", train_args(strategy, steps / 2, resumed, with_ckpt));
    ASSERT_EQ(status, 0) << err;
    EXPECT_EQ(json::parse(read_text(ckpt / "latest.json"))["iteration"], steps / 2);
    with_ckpt.push_back("--resume");
    const fs::path trace = dir_ / (strategy + "-trace.json");
    with_ckpt.insert(with_ckpt.end(), {"--trace", trace.string()});
    std::tie(status, err) = weft(strategy + "-second", train_args(strategy, steps, resumed, with_ckpt));
    ASSERT_EQ(status, 0) << err;
    expect_traced(trace, steps / 2, steps, ranks);
    EXPECT_NE(err.find("\"iterations\":" + std::to_string(steps / 2 - 2) + ","), std::string::npos) << err;
    for (int r = 0; r < 2; ++r) {
      const auto a = read_floats(fmt::format("{}.rank{}", straight.string(), r));
      const auto b = read_floats(fmt::format("{}.rank{}", resumed.string(), r));
      ASSERT_FALSE(a.empty());
      EXPECT_TRUE(a == b) << "rank " << r << ": the resumed job ends elsewhere";
    }
    // Only the newest two checkpoints of each rank are kept, no temporaries.
    std::vector<std::string> files;
    for (const auto& entry : fs::directory_iterator(ckpt)) files.push_back(entry.path().filename());
    std::sort(files.begin(), files.end());
    EXPECT_EQ(files.size(), static_cast<std::size_t>(2 * ranks + 1)) << fmt::format("{}", fmt::join(files, " "));
    EXPECT_TRUE(fs::exists(ckpt / fmt::format("rank{}-iter{}.ckpt", ranks - 1, steps)));
  }
};

TEST_F(Checkpoints, SsgdResumedEndsBitIdenticalToAJobNeverStopped) {
  expect_resume_is_exact("wfbp", 16, {});
}

// Local SGD's state too: the outer optimizer's agreed parameters and momentum.
TEST_F(Checkpoints, LocalSgdWithOuterOptimizerResumedEndsBitIdentical) {
  expect_resume_is_exact("flsgd", 16, {"--H", "3", "--outer-optimizer", "nesterov", "--outer-lr", "0.7",
                                       "--outer-momentum", "0.5"});
}

// Compressed runs: the codecs' error feedback and PowerSGD's warm-started factors
// are in the checkpoint.
TEST_F(Checkpoints, CompressedSsgdResumedEndsBitIdentical) {
  expect_resume_is_exact("wfbp", 16, {"--compression", "powersgd:1"});
}

// Local SGD's compressed parameter averages: their error feedback and the agreed
// values the changes are measured from.
TEST_F(Checkpoints, CompressedLocalSgdResumedEndsBitIdentical) {
  expect_resume_is_exact("flsgd", 16, {"--H", "3", "--compression", "int8"});
}

// Parameter servers write their own files (the server's parameters and, for
// `ps`, its momentum): the servers average the pushes in worker order and serve
// exchanges in the schedule's order, so resuming is exact here too.
TEST_F(Checkpoints, ParameterServerResumedEndsBitIdentical) {
  expect_resume_is_exact("ps", 16, {"--servers", "1"}, 3);
}

TEST_F(Checkpoints, ElasticParameterServerResumedEndsBitIdentical) {
  expect_resume_is_exact("ps-interleaved", 16, {"--servers", "1", "--T", "2"}, 3);
}

// Compressed exchanges (Note [Compressed exchanges], parameter_server.h): each
// worker's error feedback and answered values r, and the server's r, are in the
// checkpoint; a checkpoint of another codec is refused.
TEST_F(Checkpoints, CompressedParameterServerResumedEndsBitIdentical) {
  expect_resume_is_exact("ps", 16, {"--servers", "1", "--compression", "int8"}, 3);
  const fs::path params = dir_ / "other";
  auto [status, err] = weft("other-codec", train_args("ps", 16, params, {"--servers", "1", "--compression", "fp16",
                                                                          "--checkpoint", (dir_ / "ps-ckpt").string(),
                                                                          "--resume"}));
  EXPECT_EQ(status, 2);
  EXPECT_NE(err.find("it is of compression \"int8\", this job's is \"fp16\""), std::string::npos) << err;
}

TEST_F(Checkpoints, CompressedElasticParameterServerResumedEndsBitIdentical) {
  expect_resume_is_exact("ps-interleaved", 16, {"--servers", "1", "--T", "2", "--compression", "bf16"}, 3);
}

// SIGKILL of a worker mid-run: the manifest names a complete checkpoint, and the
// job resumed from it ends where a job never stopped ends.
TEST_F(Checkpoints, JobKilledMidRunResumesFromItsLastCheckpoint) {
  const fs::path ckpt = dir_ / "ckpt";
  const fs::path params = dir_ / "resumed";
  const std::vector<std::string> extra{"--checkpoint", ckpt.string(), "--checkpoint-every", "4"};
  {
    const fs::path sub = dir_ / "killed";
    fs::create_directories(sub);
    Weft job(train_args("wfbp", 1000000, params, extra), sub);
    const auto deadline = Clock::now() + std::chrono::seconds(120);
    while (Clock::now() < deadline && !fs::exists(ckpt / "latest.json")) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_TRUE(fs::exists(ckpt / "latest.json")) << job.stderr_text();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // mid-run, maybe mid-write
    pid_t victim = -1;
    for (pid_t pid : children_of(job.pid())) {
      if (rank_of(pid) == 1) victim = pid;
    }
    ASSERT_GT(victim, 0);
    ::kill(victim, SIGKILL);
    EXPECT_NE(job.wait(std::chrono::seconds(90)), 0);
  }
  const std::int64_t at = json::parse(read_text(ckpt / "latest.json"))["iteration"];
  ASSERT_GE(at, 4);
  ASSERT_EQ(at % 4, 0);
  const std::int64_t steps = at + 6;
  std::vector<std::string> resume = extra;
  resume.push_back("--resume");
  auto [status, err] = weft("resumed", train_args("wfbp", steps, params, resume));
  ASSERT_EQ(status, 0) << err;
  const fs::path straight = dir_ / "straight";
  std::tie(status, err) = weft("straight", train_args("wfbp", steps, straight));
  ASSERT_EQ(status, 0) << err;
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(read_floats(fmt::format("{}.rank{}", straight.string(), r)) ==
                read_floats(fmt::format("{}.rank{}", params.string(), r)))
        << "rank " << r;
  }
  for (const auto& entry : fs::directory_iterator(ckpt)) {
    EXPECT_EQ(entry.path().string().find(".tmp-"), std::string::npos) << entry.path() << " was left behind";
  }
}

TEST_F(Checkpoints, ResumingAnotherJobIsRefusedWithExitTwo) {
  const fs::path ckpt = dir_ / "ckpt";
  auto [status, err] = weft("first", train_args("wfbp", 2, dir_ / "p", {"--checkpoint", ckpt.string()}));
  ASSERT_EQ(status, 0) << err;
  std::vector<std::string> other_lr = train_args("wfbp", 4, dir_ / "p", {"--checkpoint", ckpt.string(), "--resume"});
  *(std::find(other_lr.begin(), other_lr.end(), "--lr") + 1) = "0.1";
  std::tie(status, err) = weft("other-lr", other_lr);
  EXPECT_EQ(status, 2);
  EXPECT_NE(err.find("the checkpoint is of another job: it is of lr 0.05, this job's is 0.1"), std::string::npos)
      << err;
  std::tie(status, err) = weft("other-strategy", train_args("mgwfbp", 4, dir_ / "p",
                                                            {"--checkpoint", ckpt.string(), "--resume"}));
  EXPECT_EQ(status, 2);
  EXPECT_NE(err.find("strategy \"wfbp\""), std::string::npos) << err;
  std::tie(status, err) = weft("none", train_args("wfbp", 4, dir_ / "p",
                                                  {"--checkpoint", (dir_ / "empty").string(), "--resume"}));
  EXPECT_EQ(status, 2);
  EXPECT_NE(err.find("--resume"), std::string::npos) << err;
  std::tie(status, err) = weft("other-compression", train_args("wfbp", 4, dir_ / "p",
                                                               {"--checkpoint", ckpt.string(), "--resume",
                                                                "--compression", "int8"}));
  EXPECT_EQ(status, 2);
  EXPECT_NE(err.find("it records no compression"), std::string::npos) << err;
  std::tie(status, err) = weft("no-dir", train_args("wfbp", 4, dir_ / "p", {"--resume"}));
  EXPECT_EQ(status, 2);
  EXPECT_NE(err.find("--resume: give --checkpoint DIR"), std::string::npos) << err;
}

// The launcher reads every rank's file before any worker starts (check_resumable in
// runtime/train/train.h): a corrupt or missing one is exit 2 naming that file, never a
// worker's failure that depends on which rank read first.
TEST_F(Checkpoints, ACorruptOrMissingRankFileIsRefusedBeforeAnyWorkerStarts) {
  const fs::path ckpt = dir_ / "ckpt";
  auto [status, err] = weft("first", train_args("wfbp", 2, dir_ / "p", {"--checkpoint", ckpt.string()}));
  ASSERT_EQ(status, 0) << err;
  const fs::path rank1 = ckpt / "rank1-iter2.ckpt";
  std::string bytes = read_text(rank1);
  bytes.back() = static_cast<char>(bytes.back() ^ 0x55);
  std::ofstream(rank1, std::ios::binary | std::ios::trunc) << bytes;
  const std::vector<std::string> resume = train_args("wfbp", 4, dir_ / "p", {"--checkpoint", ckpt.string(), "--resume"});
  for (int run = 0; run < 2; ++run) {  // the same answer each time
    std::tie(status, err) = weft("corrupt", resume);
    EXPECT_EQ(status, 2) << err;
    EXPECT_NE(err.find(rank1.string() + ": corrupt (CRC-32 mismatch)"), std::string::npos) << err;
    EXPECT_EQ(err.find("rank 0 failed"), std::string::npos) << "a worker started: " << err;
  }
  fs::remove(rank1);
  std::tie(status, err) = weft("missing", resume);
  EXPECT_EQ(status, 2) << err;
  EXPECT_NE(err.find("rank 1's checkpoint of iteration 2 is missing"), std::string::npos) << err;
}

}  // namespace
