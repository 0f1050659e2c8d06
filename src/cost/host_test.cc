#include "cost/host.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>

#include "testing/testing.h"

namespace weft {
namespace {

Host measured() {
  Host h;
  h.description = "test host";
  h.processes = 4;
  h.cores = 2;
  h.comm_cores = 0.25;
  h.comm_weight = 0.5;
  h.core_wait = 3e-3;
  h.skew = 2e-3;
  h.back_to_back_skew = 1e-3;
  h.drift = 0.01;
  h.codec_cost = {{"fp16", 1e-9}, {"powersgd", 2e-10}};
  return h;
}

TEST(HostTest, RoundTripsThroughItsFile) {
  const Host h = measured();
  EXPECT_EQ(parse_host(to_json(h)), h);
  EXPECT_EQ(parse_host(to_json(Host{})), Host{});
}

std::string host_with(const std::string& field, const std::string& value) {
  return R"({"format": "weft-host/1", ")" + field + "\": " + value + "}";
}

TEST(HostTest, CommCoresAndSkewAreNonNegativeNumbers) {
  const std::map<std::string, std::pair<std::string, double Host::*>> accepted = {
      {"comm_cores", {"a fraction of a core in [0, 1]", &Host::comm_cores}},
      {"comm_weight", {"a weight > 0", &Host::comm_weight}},
      {"core_wait_s", {"seconds >= 0", &Host::core_wait}},
      {"skew_s", {"seconds >= 0", &Host::skew}},
      {"back_to_back_skew_s", {"seconds >= 0", &Host::back_to_back_skew}},
      {"drift", {"a number >= 0", &Host::drift}}};
  for (const auto& [field, accepts] : accepted) {
    EXPECT_EQ(parse_host(host_with(field, "0.35")).*accepts.second, 0.35) << field;
    for (const std::string bad : {"-0.1", "\"much\"", "1e9"}) {
      const std::string error = test_support::usage_error_of([&] { parse_host(host_with(field, bad), "h.json"); });
      EXPECT_NE(error.find("h.json: field \"" + field + "\""), std::string::npos) << error;
      EXPECT_NE(error.find(accepts.first), std::string::npos) << error;
    }
  }
  EXPECT_NE(test_support::usage_error_of([] { parse_host(host_with("comm_cores", "1.5"), "h.json"); })
                .find("at most 1"),
            std::string::npos);
  EXPECT_NE(test_support::usage_error_of([] { parse_host(host_with("comm_weight", "0"), "h.json"); })
                .find("field \"comm_weight\" is 0; expected a weight > 0"),
            std::string::npos);
}

TEST(HostTest, ProcessesAndCoresAreCounts) {
  EXPECT_EQ(parse_host(host_with("processes", "4")).processes, 4);
  EXPECT_EQ(parse_host(host_with("cores", "2")).cores, 2);
  for (const std::string field : {"processes", "cores"}) {
    for (const std::string bad : {"-1", "1.5", "\"two\""}) {
      const std::string error = test_support::usage_error_of([&] { parse_host(host_with(field, bad), "h.json"); });
      EXPECT_NE(error.find("h.json: field \"" + field + "\""), std::string::npos) << error;
      EXPECT_NE(error.find("an integer >= 0"), std::string::npos) << error;
    }
  }
}

TEST(HostTest, MissingFieldsKeepTheirDefaults) {
  const Host h = parse_host(R"({"format": "weft-host/1", "skew_s": 0.002})");
  EXPECT_DOUBLE_EQ(h.skew, 2e-3);
  EXPECT_EQ(h.comm_cores, 0);
  EXPECT_EQ(h.comm_weight, 1);
  EXPECT_EQ(h.cores, 0);
}

TEST(HostTest, RefusesAnotherFileOrABadFieldNamingIt) {
  EXPECT_NE(test_support::usage_error_of([] { parse_host(R"({"layers": []})", "h.json"); })
                .find("h.json: field \"format\" is missing; expected \"weft-host/1\""),
            std::string::npos);
  EXPECT_NE(test_support::usage_error_of([] { parse_host(R"({"format": "weft-host/1", "skew_s": -1})", "h.json"); })
                .find("h.json: field \"skew_s\" is -1"),
            std::string::npos);
  EXPECT_NE(test_support::usage_error_of(
                [] { parse_host(R"({"format": "weft-host/1", "comm_cores": "high"})", "h.json"); })
                .find("field \"comm_cores\" is \"high\""),
            std::string::npos);
  EXPECT_NE(test_support::usage_error_of([] { parse_host(R"({"format": "weft-host/1", "cores": 1.5})", "h.json"); })
                .find("field \"cores\""),
            std::string::npos);
}

// Note [Host fields in old profiles] (cli/cluster_flags.cc).
TEST(HostTest, AnOldProfileCarriesItsHostAtTheTopLevel) {
  const std::string old = R"({"model": "cnn", "compute_slowdown": 0.3, "skew_s": 0.004, "processes": 4,
                              "cores": 2, "codec_cost_s": {"int8": 3e-9},
                              "layers": [{"name": "a", "params": 1, "fp_s": 0.001, "bp_s": 0.002}]})";
  const std::optional<Host> h = host_in_profile(old, "old.json");
  ASSERT_TRUE(h);
  EXPECT_NEAR(h->comm_cores, 0.5 * 0.3 / 1.3, 1e-12);  // Note [Older host fields]: no comm_slowdown
  EXPECT_NEAR(h->comm_weight, 0.3, 1e-12);
  EXPECT_DOUBLE_EQ(h->skew, 4e-3);
  EXPECT_EQ(h->processes, 4);
  EXPECT_DOUBLE_EQ(h->codec_cost.at("int8"), 3e-9);
  EXPECT_FALSE(host_in_profile(R"({"model": "cnn", "layers": []})", "new.json"));
}

// Note [Older host fields]: comm_cores and comm_weight are those under which
// core_shares gives the measured compute_slowdown and comm_slowdown with every
// worker computing beside a message; start_delay_s is core_wait_s; the rest is
// dropped, in one warning naming them.
TEST(HostTest, OlderFieldsMapOntoCommCoresWithOneWarning) {
  std::string warning;
  const Host h = parse_host(R"({"format": "weft-host/1", "processes": 4, "cores": 2, "compute_slowdown": 0.4,
                                "comm_slowdown": 0.6, "start_delay_s": 0.003, "pair_slowdown": 1, "skew_s": 0.001})",
                            "old.json", &warning);
  EXPECT_NEAR(core_shares(h, 4, 4).compute, 1.4, 1e-12);
  EXPECT_NEAR(core_shares(h, 4, 4).message, 1.6, 1e-12);
  EXPECT_NEAR(comm_weight_of(h, 0.4), h.comm_weight, 1e-12);
  EXPECT_DOUBLE_EQ(h.core_wait, 3e-3);
  EXPECT_DOUBLE_EQ(h.skew, 1e-3);
  EXPECT_NE(warning.find("old.json: the host fields compute_slowdown, comm_slowdown, start_delay_s, pair_slowdown"),
            std::string::npos)
      << warning;
  std::string none;
  parse_host(to_json(h), "new.json", &none);
  EXPECT_EQ(none, "");
  EXPECT_NE(test_support::usage_error_of([] { parse_host(host_with("start_delay_s", "-1"), "h.json"); })
                .find("h.json: field \"start_delay_s\""),
            std::string::npos);
}

// Max-min sharing (core_shares): four workers profiled on two cores.
TEST(HostTest, CoresAreSharedMaxMinBetweenLayersAndMessages) {
  Host h;
  h.processes = 4;
  h.cores = 2;
  h.comm_cores = 0.2;
  EXPECT_EQ(core_shares(h, 4, 0), (CoreShares{.compute = 1, .message = 1}));  // as profiled
  EXPECT_EQ(core_shares(h, 1, 0), (CoreShares{.compute = 0.5, .message = 1}));  // a core of its own
  EXPECT_EQ(core_shares(h, 0, 4), (CoreShares{.compute = 1, .message = 1}));  // messages alone fit
  const CoreShares beside = core_shares(h, 4, 4);  // the messages have 0.2 each, the layers (2 − 0.8) / 4
  EXPECT_NEAR(beside.compute, 0.5 / 0.3, 1e-12);
  EXPECT_DOUBLE_EQ(beside.message, 1);
  h.comm_cores = 0.5;  // 4 · 0.5 + 4 · 0.5 > 2: all get 2 / 8
  EXPECT_EQ(core_shares(h, 4, 4), (CoreShares{.compute = 2, .message = 2}));
  EXPECT_EQ(core_shares(h, 0, 8), (CoreShares{.compute = 1, .message = 2}));
  h.comm_cores = 0.2;
  h.comm_weight = 0.25;  // none filled: level 2 / (4 + 4 · 0.25), a message a quarter of a layer's share
  EXPECT_NEAR(core_shares(h, 4, 4).compute, 1.25, 1e-12);
  EXPECT_NEAR(core_shares(h, 4, 4).message, 2, 1e-12);
  EXPECT_TRUE(cores_taken(h, 4, 0));
  EXPECT_FALSE(cores_taken(h, 1, 4));  // 1 + 0.8 < 2
  h.cores = 0;  // not counted
  EXPECT_EQ(core_shares(h, 4, 4), CoreShares{});
  EXPECT_FALSE(cores_taken(h, 4, 4));
}

}  // namespace
}  // namespace weft
