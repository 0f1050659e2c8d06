// --compression on the command line (docs/compression.md): bad values are bad
// input, `none` changes nothing, a compressed schedule is simulated by its wire
// bytes and round-trips through JSON, and real training with every codec leaves
// every rank with bit-identical parameters. Runs the weft binary CMake built.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "testing/testing.h"

namespace weft {
namespace {

namespace fs = std::filesystem;

using Ran = test_support::ShellRun;
Ran weft(const std::string& args) { return test_support::weft_shell(args); }

double iteration_of(const Ran& r) { return nlohmann::json::parse(r.output)["iteration_s"].get<double>(); }

class Compression : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("weft_compression_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  static std::string read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }

  fs::path dir_;
};

TEST_F(Compression, ABadValueExitsTwoNamingTheAcceptedOnes) {
  std::vector<std::string> commands = {"simulate --model resnet18 -P 4", "plan --model resnet18 -P 4"};
#ifdef WEFT_HAVE_RUNTIME  // a build without LibTorch has no `weft train`
  commands.push_back("train --model mlp --synthetic --steps 1");
#endif
  for (const std::string& command : commands) {
    for (const std::string bad : {"fp8", "powersgd:0", "powersgd", "acpsgd:x"}) {
      const Ran r = weft(command + " --compression " + bad);
      EXPECT_EQ(r.status, 2) << command << " --compression " << bad << "\n" << r.output;
      EXPECT_NE(r.output.find("none, fp16, bf16, int8, powersgd:R, acpsgd:R"), std::string::npos) << r.output;
    }
  }
  // The parameter servers' exchanges take the element-wise codecs only.
  for (const std::string low_rank : {"powersgd:2", "acpsgd:2"}) {
    const Ran ps = weft("simulate --model resnet18 -P 4 --arch ps --strategy ps --compression " + low_rank);
    EXPECT_EQ(ps.status, 2) << ps.output;
    EXPECT_NE(ps.output.find("accepted with ps: none, fp16, bf16, int8"), std::string::npos) << ps.output;
  }
}

TEST_F(Compression, ParameterServerExchangesSimulateFasterCompressed) {
  for (const std::string strategy : {"ps", "ps-interleaved"}) {
    const std::string cluster = "--model resnet18 -P 4 --arch ps --bandwidth 20Mbit --json --strategy " + strategy;
    const Ran none = weft("simulate " + cluster);
    const Ran int8 = weft("simulate " + cluster + " --compression int8 --schedule-out " + file("ps.json"));
    ASSERT_EQ(none.status, 0) << none.output;
    ASSERT_EQ(int8.status, 0) << int8.output;
    EXPECT_LT(iteration_of(int8), 0.5 * iteration_of(none)) << strategy;
    EXPECT_NE(read(file("ps.json")).find("\"encoding\": \"int8\""), std::string::npos) << strategy;
  }
}

TEST_F(Compression, NoneIsTheScheduleWithoutCompression) {
  const std::string cluster = "--model resnet18 -P 4 --bandwidth 100Mbit --strategy wfbp --json";
  const Ran plain = weft("simulate " + cluster + " --schedule-out " + file("plain.json"));
  const Ran none = weft("simulate " + cluster + " --compression none --schedule-out " + file("none.json"));
  ASSERT_EQ(plain.status, 0) << plain.output;
  ASSERT_EQ(none.status, 0) << none.output;
  EXPECT_EQ(plain.output, none.output);
  EXPECT_EQ(read(file("plain.json")), read(file("none.json")));
}

TEST_F(Compression, FewerWireBytesSimulateFasterAndRoundTrip) {
  const std::string cluster = "--model resnet18 -P 4 --bandwidth 20Mbit --strategy wfbp --json";
  const Ran none = weft("simulate " + cluster);
  const Ran fp16 = weft("simulate " + cluster + " --compression fp16");
  const Ran int8 = weft("simulate " + cluster + " --compression int8 --schedule-out " + file("int8.json"));
  ASSERT_EQ(int8.status, 0) << int8.output;
  EXPECT_LT(iteration_of(fp16), 0.7 * iteration_of(none));
  EXPECT_LT(iteration_of(int8), 0.7 * iteration_of(fp16));
  EXPECT_NE(read(file("int8.json")).find("\"encoding\": \"int8\""), std::string::npos);
  const Ran again = weft("simulate --model resnet18 -P 4 --bandwidth 20Mbit --json --schedule " + file("int8.json"));
  ASSERT_EQ(again.status, 0) << again.output;
  EXPECT_EQ(nlohmann::json::parse(again.output), nlohmann::json::parse(int8.output));
}

TEST_F(Compression, PlanAutoComparesEveryCodecAndSaysWhichAreLossy) {
  const Ran r = weft("plan --model resnet18 -P 4 --bandwidth 20Mbit --strategy wfbp --strategy mgwfbp --compression auto");
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* row : {"wfbp+fp16", "wfbp+bf16", "mgwfbp+int8", "wfbp+powersgd:2", "<- recommended"}) {
    EXPECT_NE(r.output.find(row), std::string::npos) << row << "\n" << r.output;
  }
  EXPECT_NE(r.output.find("trade accuracy for speed"), std::string::npos) << r.output;
}

// DreamDDP's layer sets are printed once per strategy, and again for a codec
// only where its sets differ: eleven identical blocks said nothing.
TEST_F(Compression, PlanAutoPrintsEachDistinctDreamDdpPeriodOnce) {
  const Ran r = weft("plan --model resnet18 -P 4 --bandwidth 20Mbit --strategy dreamddp-opt --compression auto");
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string header = " averages, per iteration of the period (layer indices, output side first):\n";
  std::set<std::string> blocks;
  int count = 0;
  for (std::size_t at = r.output.find(header); at != std::string::npos; at = r.output.find(header, at + 1)) {
    const std::size_t body = at + header.size();
    std::size_t end = body;
    while (r.output.compare(end, 12, "  iteration ") == 0) end = r.output.find('\n', end) + 1;
    ++count;
    EXPECT_TRUE(blocks.insert(r.output.substr(body, end - body)).second) << "a block repeated:\n" << r.output;
  }
  EXPECT_GE(count, 1) << r.output;
  EXPECT_EQ(r.output.find("dreamddp-opt" + header), r.output.find(header) - std::string("dreamddp-opt").size())
      << "the uncompressed row's sets come first\n" << r.output;
}

// Parameter servers exchange fp16, bf16 and int8 but not powersgd: under auto
// they are planned with each of those, and int8 beats float32 on a slow link.
TEST_F(Compression, PlanAutoCompressesParameterServersElementWise) {
  const Ran r = weft("plan --model resnet18 -P 4 --bandwidth 20Mbit --arch ps --servers 1 --strategy ps "
                     "--strategy ps-interleaved --compression auto --json");
  ASSERT_EQ(r.status, 0) << r.output;
  const nlohmann::json plan = nlohmann::json::parse(r.output);
  std::map<std::string, double> iteration;  // "strategy+codec" -> s
  for (const auto& row : plan["strategies"]) {
    iteration[row["name"].get<std::string>() + "+" + row.value("compression", "none")] = row["iteration_s"];
  }
  for (const char* row : {"ps+none", "ps+fp16", "ps+bf16", "ps+int8", "ps-interleaved+int8"}) {
    EXPECT_TRUE(iteration.contains(row)) << row << "\n" << r.output;
  }
  for (const auto& [row, seconds] : iteration) EXPECT_EQ(row.find("powersgd"), std::string::npos) << row;
  EXPECT_LT(iteration["ps+int8"], iteration["ps+none"]) << r.output;
}

#ifdef WEFT_HAVE_RUNTIME  // `weft train`: a build without LibTorch has none
// Real training, 2 processes over Gloo: each codec leaves both ranks with the same
// bits, and `none` the bits of a run without the flag.
TEST_F(Compression, EveryCodecTrainsWithRanksBitIdentical) {
  auto train = [&](const std::string& name, const std::string& flag) {
    const Ran r = weft("train --model cnn --synthetic --nproc 2 --steps 4 --batch 8 --strategy wfbp --no-progress " +
                       flag + " --save-params " + file(name));
    EXPECT_EQ(r.status, 0) << flag << "\n" << r.output;
  };
  train("plain", "");
  train("none", "--compression none");
  EXPECT_EQ(read(file("plain.rank0")), read(file("none.rank0")));
  for (const std::string codec : {"fp16", "bf16", "int8", "powersgd:2", "acpsgd:2"}) {
    const std::string name = "c" + std::to_string(codec.size()) + codec.substr(0, 2);
    train(name, "--compression " + codec);
    const std::string rank0 = read(file(name + ".rank0"));
    ASSERT_FALSE(rank0.empty()) << codec;
    EXPECT_EQ(rank0, read(file(name + ".rank1"))) << codec << ": ranks differ";
    EXPECT_NE(rank0, read(file("plain.rank0"))) << codec << ": no different from float32 averaging";
  }
}

// A worker alone has nothing to send: every codec trains as without one.
TEST_F(Compression, OneWorkerTrainsInEveryCodecAsWithout) {
  auto train = [&](const std::string& name, const std::string& flag) {
    const Ran r = weft("train --model mlp --synthetic --nproc 1 --steps 3 --strategy wfbp --no-progress " + flag +
                       " --save-params " + file(name));
    EXPECT_EQ(r.status, 0) << flag << "\n" << r.output;
    return read(file(name + ".rank0"));
  };
  const std::string plain = train("plain", "");
  ASSERT_FALSE(plain.empty());
  for (const std::string codec : {"fp16", "bf16", "int8", "powersgd:2", "acpsgd:2"}) {
    EXPECT_EQ(train("c" + std::to_string(codec.size()) + codec.substr(0, 2), "--compression " + codec), plain) << codec;
  }
}
#endif

}  // namespace
}  // namespace weft
