// Hierarchical S-SGD in emulated sites (root; label `root`, skipped otherwise):
// 4 workers in 2 sites of 2 behind 1Gbit links, 100Mbit and 2 ms one-way between
// the sites (netem/netem.h), end with flat S-SGD's parameters in the same sites
// within rounding, every rank bit-identical: the sums by sites and their groups
// work on the addresses each rank's namespace gives it, not only over loopback
// (sites_train_test.cc).
#include <cmath>

#include "netem/netns.h"
#include "runtime/train/train_test_util.h"

namespace {

using namespace weft::testing_util;

constexpr int kWorld = 4;

class EmulatedSites : public TrainTest {
 protected:
  std::vector<std::vector<float>> train(const std::string& name, std::vector<std::string> extra) {
    const fs::path params = dir_ / name;
    std::vector<std::string> args{"train", "--model", "mlp", "--synthetic", "--nproc", std::to_string(kWorld),
                                  "--sites", "2x2", "--bandwidth", "1Gbit", "--wan-bandwidth", "100Mbit",
                                  "--wan-latency", "2ms", "--strategy", "ssgd", "--steps", "10", "--batch", "8",
                                  "--lr", "0.05", "--seed", "3", "--save-params", params.string(), "--no-progress",
                                  "--failure-timeout", "60"};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto [status, err] = weft(name, args);
    EXPECT_EQ(status, 0) << name << ": " << err;
    if (status != 0) return {};
    std::vector<std::vector<float>> out;
    for (int r = 0; r < kWorld; ++r) out.push_back(read_floats(fmt::format("{}.rank{}", params.string(), r)));
    return out;
  }
};

TEST_F(EmulatedSites, HierarchicalSsgdEndsWithFlatSsgdsParameters) {
  SKIP_UNLESS_PRIVILEGED();
  const auto flat = train("flat", {});
  const auto by_sites = train("by-sites", {"--hierarchical"});
  ASSERT_EQ(flat.size(), static_cast<size_t>(kWorld));
  ASSERT_EQ(by_sites.size(), static_cast<size_t>(kWorld));
  ASSERT_EQ(flat[0].size(), by_sites[0].size());
  ASSERT_FALSE(flat[0].empty());
  for (int r = 1; r < kWorld; ++r) {
    EXPECT_TRUE(by_sites[static_cast<size_t>(r)] == by_sites[0]) << "rank " << r << " differs from rank 0";
  }
  double worst = 0;
  for (size_t i = 0; i < flat[0].size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(flat[0][i] - by_sites[0][i])));
  }
  EXPECT_LE(worst, 1e-5);
}

}  // namespace
