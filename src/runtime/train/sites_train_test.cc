// Strategies over sites (Note [Sites in a schedule]) in `weft train` as real
// processes (WEFT_BINARY): 4 workers in 2 sites of 2, over loopback (`--sites 2x2`
// alone only groups the ranks; Note [Sites of a training job] in
// cli/train_command.cc), on synthetic data, the mlp (whose rounding stays at
// rounding for 20 steps; Note [Rounding grows in the cnn] in
// local_sgd_train_test.cc):
//
// - a sum by sites is the flat sum in another order, so hierarchical S-SGD and
//   hierarchical local SGD end within rounding (1e-5) of their flat runs, every
//   rank bit-identical;
// - PowerSGD by sites sums the same factors, but a site's partial sums round at
//   other points, the float16 rest among them, and the Gram-Schmidt step of every
//   iteration is not linear in them: close, not equal (1e-4 after 10 steps);
// - local SGD with site averages every iteration (--site-every 1) has no flat
//   equivalent: between the averages across sites the two workers of a site hold
//   the same parameters and the two sites differ; at the end of a period all four
//   agree.
#include <cmath>

#include "runtime/train/train_test_util.h"

namespace {

using namespace weft::testing_util;

constexpr int kWorld = 4;

class Sites : public TrainTest {
 protected:
  // Trains the mlp on 4 processes in 2 sites with `extra` flags; each rank's
  // final parameters, or none after a failure.
  std::vector<std::vector<float>> train(const std::string& name, int steps, std::vector<std::string> extra) {
    const fs::path params = dir_ / name;
    std::vector<std::string> args{"train", "--model", "mlp", "--synthetic", "--nproc", std::to_string(kWorld),
                                  "--sites", "2x2", "--steps", std::to_string(steps), "--batch", "8", "--lr",
                                  "0.05", "--seed", "3", "--save-params", params.string(), "--no-progress",
                                  "--failure-timeout", "60"};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto [status, err] = weft(name, args);
    EXPECT_EQ(status, 0) << name << ": " << err;
    if (status != 0) return {};
    std::vector<std::vector<float>> out;
    for (int r = 0; r < kWorld; ++r) out.push_back(read_floats(fmt::format("{}.rank{}", params.string(), r)));
    return out;
  }

  static double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    double worst = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      worst = std::max(worst, static_cast<double>(std::abs(a[i] - b[i])));
    }
    return worst;
  }

  // Every rank holds rank 0's parameters, bit for bit.
  static void expect_identical(const std::vector<std::vector<float>>& ranks) {
    for (int r = 1; r < static_cast<int>(ranks.size()); ++r) {
      EXPECT_TRUE(ranks[static_cast<size_t>(r)] == ranks[0]) << "rank " << r << " differs from rank 0";
    }
  }

  // The run with `flags` and the one with `flags` and --hierarchical end within
  // `tolerance` of each other, each rank of each identical.
  void expect_hierarchical_close(const std::string& name, int steps, const std::vector<std::string>& flags,
                                 double tolerance) {
    SCOPED_TRACE(name);
    const auto flat = train(name + "-flat", steps, flags);
    std::vector<std::string> by_sites = flags;
    by_sites.push_back("--hierarchical");
    const auto hierarchical = train(name + "-by-sites", steps, by_sites);
    ASSERT_EQ(flat.size(), static_cast<size_t>(kWorld));
    ASSERT_EQ(hierarchical.size(), static_cast<size_t>(kWorld));
    ASSERT_FALSE(flat[0].empty());
    expect_identical(flat);
    expect_identical(hierarchical);
    EXPECT_LE(max_abs_diff(hierarchical[0], flat[0]), tolerance);
  }
};

TEST_F(Sites, HierarchicalSsgdEndsWithFlatSsgdsParameters) {
  expect_hierarchical_close("ssgd", 20, {"--strategy", "ssgd"}, 1e-5);
}

TEST_F(Sites, HierarchicalLocalSgdEndsWithFlatLocalSgdsParameters) {
  expect_hierarchical_close("flsgd", 8, {"--strategy", "flsgd", "--H", "4"}, 1e-5);
}

TEST_F(Sites, PowerSgdBySitesStaysCloseToFlatPowerSgd) {
  expect_hierarchical_close("powersgd", 10, {"--strategy", "wfbp", "--compression", "powersgd:2"}, 1e-4);
}

TEST_F(Sites, SiteAveragesMakeASiteAgreeBetweenTheAveragesAcrossSites) {
  const std::vector<std::string> flags{"--strategy", "flsgd", "--H", "4", "--site-every", "1"};
  // Iteration 6 is the second of a period: sites averaged, not across them.
  const auto mid = train("mid-period", 6, flags);
  ASSERT_EQ(mid.size(), static_cast<size_t>(kWorld));
  EXPECT_TRUE(mid[1] == mid[0]) << "site 0's workers differ";
  EXPECT_TRUE(mid[3] == mid[2]) << "site 1's workers differ";
  EXPECT_GT(max_abs_diff(mid[0], mid[2]), 1e-6) << "the sites agree without an average across them";
  // Iteration 8 ends a period: averaged across the sites.
  const auto end = train("period-end", 8, flags);
  ASSERT_EQ(end.size(), static_cast<size_t>(kWorld));
  expect_identical(end);
}

TEST_F(Sites, HierarchicalWithoutSitesIsRefusedNamingTheFlags) {
  const auto [status, err] = weft("no-sites", {"train", "--model", "mlp", "--synthetic", "--nproc", "2", "--steps",
                                               "1", "--strategy", "ssgd", "--hierarchical", "--no-progress"});
  EXPECT_EQ(status, 2) << err;
  EXPECT_NE(err.find("--hierarchical"), std::string::npos) << err;
  EXPECT_NE(err.find("--sites"), std::string::npos) << err;
}

}  // namespace
