#include "plan/auto.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include "profile/zoo.h"
#include "schedule/encoding.h"

namespace weft {
namespace {

using namespace literals;

Family family_of(const std::string& strategy) { return find_strategy(strategy).family; }

const PlannedStrategy& chosen_row(const AutoChoice& c) {
  const PlannedStrategy* row = c.plan.best();
  EXPECT_NE(row, nullptr);
  return *row;
}

Cluster two_sites_of_two() {
  Cluster c{.workers = 4, .bandwidth = 1_Gbit, .latency = 50_us};
  c.topology.sites = sites_shorthand("2x2", 4, 1_Gbit, 50_us);
  c.topology.wan = {.bandwidth = 20_Mbit, .latency = 20_ms};
  return c;
}

// Note [What auto may choose]: by default S-SGD alone, uncompressed.
TEST(Auto, IsExactByDefault) {
  const Cluster slow{.workers = 4, .bandwidth = 20_Mbit, .latency = 1_ms};
  const AutoChoice c = choose_auto(zoo_profile("resnet18"), slow, {});
  EXPECT_EQ(family_of(c.strategy), Family::kSynchronous);
  EXPECT_FALSE(lossy(c.options.compression));
  for (const PlannedStrategy& s : c.plan.strategies) {
    EXPECT_EQ(family_of(s.name), Family::kSynchronous) << s.label();
    EXPECT_FALSE(lossy(s.compression)) << s.label();
    EXPECT_LE(chosen_row(c).timeline.summary.iteration, s.timeline.summary.iteration) << s.label();
  }
}

TEST(Auto, ChoosesOnlyAmongTheAllowedFamilies) {
  const Cluster slow{.workers = 4, .bandwidth = 20_Mbit, .latency = 1_ms};
  const AutoChoice local = choose_auto(zoo_profile("resnet18"), slow, {.allow = {"local_sgd"}});
  EXPECT_EQ(family_of(local.strategy), Family::kLocalSgd);
  for (const PlannedStrategy& s : local.plan.strategies) EXPECT_EQ(family_of(s.name), Family::kLocalSgd);
  // Both: the fastest of either, here local SGD (it averages every H iterations).
  const AutoChoice both = choose_auto(zoo_profile("resnet18"), slow, {.allow = {"ssgd", "local_sgd"}});
  EXPECT_EQ(family_of(both.strategy), Family::kLocalSgd);
  // Parameter servers: only ps runs there.
  Cluster ps = slow;
  ps.arch = Arch::kParameterServer;
  EXPECT_EQ(family_of(choose_auto(zoo_profile("resnet18"), ps, {.allow = {"ps"}}).strategy),
            Family::kParameterServer);
  try {
    choose_auto(zoo_profile("resnet18"), ps, {.allow = {"ssgd", "local_sgd"}});
    FAIL() << "no allowed family runs with servers";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--allow ssgd,local_sgd"), std::string::npos) << e.what();
  }
}

TEST(Auto, ChoosesALossyCodecOnlyWhenAllowedAndSaysHowMuchItGains) {
  const Cluster slow{.workers = 4, .bandwidth = 20_Mbit, .latency = 1_ms};
  const Profile profile = zoo_profile("resnet18");
  const AutoChoice exact = choose_auto(profile, slow, {.allow = {"ssgd"}});
  const AutoChoice lossy_allowed = choose_auto(profile, slow, {.allow = {"ssgd", "lossy"}, .source = "zoo"});
  EXPECT_FALSE(lossy(exact.options.compression));
  ASSERT_TRUE(lossy(lossy_allowed.options.compression));
  const PlannedStrategy& best = chosen_row(lossy_allowed);
  const PlannedStrategy& fastest_exact = chosen_row(exact);
  // The reason names the recipe and the numbers: its time, the ratio to the
  // fastest exact recipe and to the default, and the profile's source.
  const std::string& r = lossy_allowed.reason;
  const Seconds t = best.timeline.summary.iteration;
  for (const std::string& part :
       {fmt::format("--strategy auto chose {} + {}", best.name, to_string(best.compression)),
        fmt::format("{:.2f} ms per iteration predicted for 4 workers", t * 1e3),
        fmt::format("{:.2f}x the fastest exact recipe ({}, {:.2f} ms)", fastest_exact.timeline.summary.iteration / t,
                    fastest_exact.name, fastest_exact.timeline.summary.iteration * 1e3),
        fmt::format("{:.2f}x the default wfbp ({:.2f} ms)", lossy_allowed.plan.wfbp_iteration / t,
                    lossy_allowed.plan.wfbp_iteration * 1e3),
        std::string("from zoo"), std::string("--allow without lossy keeps it exact")}) {
    EXPECT_NE(r.find(part), std::string::npos) << "'" << part << "' in: " << r;
  }
  // Note [What auto may choose]: no low-rank codec (measured to stall other models).
  for (const PlannedStrategy& s : lossy_allowed.plan.strategies) EXPECT_FALSE(low_rank(s.compression)) << s.label();
  // A codec the user gave is kept: no other is tried.
  const AutoChoice given = choose_auto(
      profile, slow, {.allow = {"ssgd", "lossy"}, .strategy = {.compression = parse_encoding("fp16", "test")}});
  EXPECT_EQ(to_string(given.options.compression), "fp16");
}

// Note [What auto may choose]: a codec is taken only where it gains more than
// kLossyMargin over the fastest exact recipe, and the reason says when one gained less.
TEST(Auto, TakesACodecOnlyWhereItGainsMoreThanTheMargin) {
  const Profile profile = zoo_profile("resnet18");
  int passed_over = 0;
  for (const BytesPerSecond b : {20_Mbit, 100_Mbit, 1_Gbit, 10_Gbit, 100_Gbit}) {
    const Cluster cluster{.workers = 4, .bandwidth = b, .latency = 50_us};
    const AutoChoice c = choose_auto(profile, cluster, {.allow = {"ssgd", "lossy"}});
    const Seconds chosen = chosen_row(c).timeline.summary.iteration;
    Seconds fastest_exact = 1e9, fastest_lossy = 1e9;
    for (const PlannedStrategy& s : c.plan.strategies) {
      (lossy(s.compression) ? fastest_lossy : fastest_exact) =
          std::min(lossy(s.compression) ? fastest_lossy : fastest_exact, s.timeline.summary.iteration);
    }
    if (lossy(c.options.compression)) {
      EXPECT_LT((1 + kLossyMargin) * chosen, fastest_exact) << format_bandwidth(b);
    } else {
      EXPECT_EQ(chosen, fastest_exact) << format_bandwidth(b);
      EXPECT_GE((1 + kLossyMargin) * fastest_lossy, chosen) << format_bandwidth(b);
      if (fastest_lossy < chosen) {
        ++passed_over;
        EXPECT_NE(c.reason.find("gains less than the 10% a codec must"), std::string::npos) << c.reason;
      }
    }
  }
  EXPECT_GT(passed_over, 0) << "no link where a codec gained less than the margin: the test tests nothing";
}

TEST(Auto, ChoosesBySitesOverASlowWan) {
  const Profile profile = zoo_profile("resnet18");
  const AutoChoice c = choose_auto(profile, two_sites_of_two(), {});
  EXPECT_TRUE(c.options.hierarchical) << c.reason;
  EXPECT_NE(c.reason.find(" by sites"), std::string::npos) << c.reason;
  // With local SGD allowed and --site-every given, the S-SGD rows go without it.
  const AutoChoice local = choose_auto(profile, two_sites_of_two(),
                                       {.allow = {"ssgd", "local_sgd"}, .strategy = {.H = 4, .site_every = 2}});
  for (const PlannedStrategy& s : local.plan.strategies) {
    EXPECT_EQ(s.site_every, family_of(s.name) == Family::kLocalSgd ? 2 : 0) << s.label();
  }
  EXPECT_EQ(family_of(local.strategy), Family::kLocalSgd);
  EXPECT_EQ(local.options.site_every, 2);
}

// Note [How auto chooses H]: the shortest period within kPeriodSlack of the fastest.
TEST(Auto, ChoosesTheShortestPeriodThatHidesTheAverage) {
  const Profile profile = zoo_profile("resnet18");
  const auto local_at = [&](const Cluster& cluster, int H) {
    return choose_auto(profile, cluster, {.allow = {"local_sgd"}, .strategy = {.H = H}});
  };
  for (const Cluster& cluster : {Cluster{.workers = 4, .bandwidth = 20_Mbit, .latency = 1_ms},
                                Cluster{.workers = 4, .bandwidth = 10_Gbit, .latency = 10_us}}) {
    const AutoChoice c = choose_auto(profile, cluster, {.allow = {"local_sgd"}, .choose_period = true});
    const int H = c.options.H;
    ASSERT_NE(std::find(std::begin(kPeriods), std::end(kPeriods), H), std::end(kPeriods)) << c.reason;
    EXPECT_NE(c.reason.find(fmt::format("--H {} (the shortest period", H)), std::string::npos) << c.reason;
    const Seconds chosen = chosen_row(c).timeline.summary.iteration;
    for (const int other : kPeriods) {
      const AutoChoice at = local_at(cluster, other);
      const Seconds t = at.plan.best()->timeline.summary.iteration;
      EXPECT_LE(chosen, (1 + kPeriodSlack) * t + 1e-12) << "H " << other << ": " << c.reason;
      // A shorter period than the chosen one is more than kPeriodSlack slower than the fastest.
      if (other < H && at.strategy == c.strategy) {
        EXPECT_GT(t, chosen) << "H " << other;
      }
    }
  }
  // A slower link needs a longer period to hide its average.
  const AutoChoice slow = choose_auto(profile, {.workers = 4, .bandwidth = 20_Mbit, .latency = 1_ms},
                                      {.allow = {"local_sgd"}, .choose_period = true});
  const AutoChoice fast = choose_auto(profile, {.workers = 4, .bandwidth = 10_Gbit, .latency = 10_us},
                                      {.allow = {"local_sgd"}, .choose_period = true});
  EXPECT_GT(slow.options.H, fast.options.H) << slow.reason << "\n" << fast.reason;
  // H given: kept.
  EXPECT_EQ(local_at({.workers = 4, .bandwidth = 20_Mbit, .latency = 1_ms}, 5).options.H, 5);
}

TEST(Auto, RefusesUnknownFamiliesListingTheAcceptedOnes) {
  EXPECT_EQ(parse_allow("ssgd,local_sgd,lossy"), (std::vector<std::string>{"ssgd", "local_sgd", "lossy"}));
  for (const char* bad : {"ssgd,sgd", "", "lossy", "ssgd,"}) {
    try {
      parse_allow(bad);
      FAIL() << bad;
    } catch (const UsageError& e) {
      const std::string what = e.what();
      EXPECT_TRUE(what.starts_with(fmt::format("--allow {}:", bad))) << what;
      EXPECT_NE(what.find("accepted: ssgd, local_sgd, ps, lossy"), std::string::npos) << what;
    }
  }
}

}  // namespace
}  // namespace weft
