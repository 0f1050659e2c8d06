#include "bench/outputs.h"

#include <string>

#include <gtest/gtest.h>

#include "testing/testing.h"

namespace weft::bench {
namespace {

using test_support::usage_error_of;

// The shape `weft plan --json` prints (docs/formats.md §6), with the bench's optional fields.
constexpr std::string_view kPlan = R"({"model": "cnn", "workers": 4, "recommended": "mgwfbp", "strategies": [
  {"name": "wfbp", "period": 1, "iteration_s": 0.043, "compute_s": 0.02, "exposed_comm_s": 0.023,
   "speedup_vs_wfbp": 1.0, "options": {}},
  {"name": "dcredit", "period": 1, "iteration_s": 0.039, "compute_s": 0.02, "slowed_compute_s": 0.024,
   "exposed_comm_s": 0.019, "speedup_vs_wfbp": 1.1, "options": {"partition_B": 65536}}]})";

TEST(Outputs, APlanGivesEachStrategysPrediction) {
  const auto plan = parse_plan(kPlan, "plan.json");
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_DOUBLE_EQ(plan.at("wfbp").iteration, 0.043);
  EXPECT_FALSE(plan.at("wfbp").slowed_compute);
  EXPECT_DOUBLE_EQ(plan.at("dcredit").slowed_compute.value(), 0.024);
  EXPECT_DOUBLE_EQ(plan.at("dcredit").speedup_vs_wfbp, 1.1);
  EXPECT_EQ(plan.at("dcredit").options.at("partition_B"), 65536);
}

// A plan with sites may hold a strategy flat and by sites: rows of their own.
TEST(Outputs, RowsAveragingBySitesAreNamedAsTheBenchNamesTheirRuns) {
  const auto plan = parse_plan(
      R"({"strategies": [
        {"name": "flsgd", "period": 8, "iteration_s": 0.3, "compute_s": 0.03, "speedup_vs_wfbp": 2},
        {"name": "flsgd", "hierarchical": true, "period": 8, "iteration_s": 0.2, "compute_s": 0.03, "speedup_vs_wfbp": 3},
        {"name": "flsgd", "site_every": 1, "period": 8, "iteration_s": 0.25, "compute_s": 0.03, "speedup_vs_wfbp": 2},
        {"name": "flsgd", "hierarchical": true, "site_every": 2, "period": 8, "iteration_s": 0.21, "compute_s": 0.03,
         "speedup_vs_wfbp": 3}]})",
      "plan.json");
  EXPECT_EQ(plan.size(), 4u);
  EXPECT_DOUBLE_EQ(plan.at("flsgd").iteration, 0.3);
  EXPECT_DOUBLE_EQ(plan.at("flsgd@hierarchical").iteration, 0.2);
  EXPECT_DOUBLE_EQ(plan.at("flsgd@site-every:1").iteration, 0.25);
  EXPECT_DOUBLE_EQ(plan.at("flsgd@hierarchical+site-every:2").iteration, 0.21);
}

TEST(Outputs, WhatIsNotTheOutputExpectedNamesTheField) {
  std::string plan(kPlan);
  plan.replace(plan.find(R"("compute_s": 0.02, "slowed)"), 18, R"("compute_s": "20ms",)");
  EXPECT_EQ(usage_error_of([&] { parse_plan(plan, "plan.json"); }),
            R"(plan.json: strategies[1].compute_s is "20ms", expected a number)");
  EXPECT_EQ(usage_error_of([] { parse_plan(R"({"strategies": [{"name": "ssgd"}]})", "plan.json"); }),
            "plan.json: missing field strategies[0].iteration_s (the output of `weft plan --json` (docs/formats.md §6))");
  EXPECT_NE(usage_error_of([] { parse_plan("weft: error", "plan.log"); }).find("plan.log: not valid JSON"),
            std::string::npos);
  EXPECT_DOUBLE_EQ(parse_simulated_iteration(R"({"iteration_s": 0.5, "iterations": 10})", "s.log"), 0.5);
  EXPECT_EQ(usage_error_of([] { parse_simulated_iteration("{}", "s.log"); }),
            "s.log: missing field iteration_s (the output of `weft simulate --json`)");
  EXPECT_DOUBLE_EQ(parse_network_fit(R"({"a_s": 0.002, "b_s_per_byte": 1e-8})", "n.json").b, 1e-8);
  EXPECT_EQ(usage_error_of([] { parse_network_fit(R"({"a_s": null, "b_s_per_byte": 1e-8})", "n.json"); }),
            "n.json: a_s is null, expected a number");
}

}  // namespace
}  // namespace weft::bench
