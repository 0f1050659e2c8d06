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
  h.compute_slowdown = 0.25;
  h.comm_slowdown = 0.5;
  h.transfer_slowdown = 0.125;
  h.skew = 2e-3;
  h.back_to_back_skew = 1e-3;
  h.drift = 0.01;
  h.start_delay = 3e-3;
  h.pair_slowdown = 0.9;
  h.waiting_pair_slowdown = 0.4;
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

TEST(HostTest, SlowdownsAndSkewAreNonNegativeNumbers) {
  const std::map<std::string, std::pair<std::string, double Host::*>> accepted = {
      {"compute_slowdown", {"a number >= 0", &Host::compute_slowdown}},
      {"comm_slowdown", {"a number >= 0", &Host::comm_slowdown}},
      {"skew_s", {"seconds >= 0", &Host::skew}},
      {"back_to_back_skew_s", {"seconds >= 0", &Host::back_to_back_skew}},
      {"drift", {"a number >= 0", &Host::drift}},
      {"start_delay_s", {"seconds >= 0", &Host::start_delay}},
      {"pair_slowdown", {"a number >= 0", &Host::pair_slowdown}}};
  for (const auto& [field, accepts] : accepted) {
    EXPECT_EQ(parse_host(host_with(field, "0.35")).*accepts.second, 0.35) << field;
    for (const std::string bad : {"-0.1", "\"much\"", "1e9"}) {
      const std::string error = test_support::usage_error_of([&] { parse_host(host_with(field, bad), "h.json"); });
      EXPECT_NE(error.find("h.json: field \"" + field + "\""), std::string::npos) << error;
      EXPECT_NE(error.find(accepts.first), std::string::npos) << error;
    }
  }
  for (const std::string field : {"transfer_slowdown", "waiting_pair_slowdown"}) {
    const std::string error = test_support::usage_error_of([&] { parse_host(host_with(field, "-1"), "h.json"); });
    EXPECT_NE(error.find("h.json: field \"" + field + "\""), std::string::npos) << error;
  }
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

// A measured 0 is a measurement, not an absence: written, read back, and kept
// apart from the fallback (comm_slowdown, pair_slowdown).
TEST(HostTest, AMeasuredZeroIsKeptApartFromAnAbsentField) {
  Host h;
  h.comm_slowdown = 1.5;
  h.pair_slowdown = 0.3;
  EXPECT_DOUBLE_EQ(h.point_to_point_slowdown(), 1.5);
  EXPECT_DOUBLE_EQ(h.pair_slowdown_while(false), 0.3);
  h.transfer_slowdown = 0;
  h.waiting_pair_slowdown = 0;
  const Host read = parse_host(to_json(h));
  EXPECT_EQ(read.transfer_slowdown, 0.0);
  EXPECT_EQ(read.waiting_pair_slowdown, 0.0);
  EXPECT_DOUBLE_EQ(read.point_to_point_slowdown(), 0);
  EXPECT_DOUBLE_EQ(read.pair_slowdown_while(false), 0);
}

TEST(HostTest, MissingFieldsKeepTheirDefaults) {
  const Host h = parse_host(R"({"format": "weft-host/1", "skew_s": 0.002})");
  EXPECT_DOUBLE_EQ(h.skew, 2e-3);
  EXPECT_EQ(h.compute_slowdown, 0);
  EXPECT_FALSE(h.transfer_slowdown);
  EXPECT_DOUBLE_EQ(h.point_to_point_slowdown(), 0);
}

TEST(HostTest, RefusesAnotherFileOrABadFieldNamingIt) {
  EXPECT_NE(test_support::usage_error_of([] { parse_host(R"({"layers": []})", "h.json"); })
                .find("h.json: field \"format\" is missing; expected \"weft-host/1\""),
            std::string::npos);
  EXPECT_NE(test_support::usage_error_of([] { parse_host(R"({"format": "weft-host/1", "skew_s": -1})", "h.json"); })
                .find("h.json: field \"skew_s\" is -1"),
            std::string::npos);
  EXPECT_NE(test_support::usage_error_of(
                [] { parse_host(R"({"format": "weft-host/1", "comm_slowdown": "high"})", "h.json"); })
                .find("field \"comm_slowdown\" is \"high\""),
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
  EXPECT_DOUBLE_EQ(h->compute_slowdown, 0.3);
  EXPECT_DOUBLE_EQ(h->skew, 4e-3);
  EXPECT_EQ(h->processes, 4);
  EXPECT_DOUBLE_EQ(h->codec_cost.at("int8"), 3e-9);
  EXPECT_FALSE(host_in_profile(R"({"model": "cnn", "layers": []})", "new.json"));
}

TEST(HostTest, MedianIsTakenFieldByField) {
  Host a = measured(), b = measured(), c = measured();
  a.skew = 1e-3;
  b.skew = 5e-3;
  c.skew = 3e-3;
  b.transfer_slowdown.reset();
  a.transfer_slowdown = 0.1;
  c.transfer_slowdown = 0.3;
  const Host m = median_host({a, b, c});
  EXPECT_DOUBLE_EQ(m.skew, 3e-3);
  EXPECT_DOUBLE_EQ(*m.transfer_slowdown, 0.2);  // over the two that have it
  EXPECT_EQ(m.description, a.description);
  EXPECT_THROW(median_host({}), std::invalid_argument);
}

TEST(HostTest, CollectivesBesideLayersRunAtLeastAsMuchInTurnAsWhileWaiting) {
  Host h;
  h.pair_slowdown = 0.2;
  h.waiting_pair_slowdown = 0.7;
  EXPECT_DOUBLE_EQ(h.pair_slowdown_while(true), 0.7);
  EXPECT_DOUBLE_EQ(h.pair_slowdown_while(false), 0.7);
  h.pair_slowdown = 0.9;
  EXPECT_DOUBLE_EQ(h.pair_slowdown_while(true), 0.9);
  EXPECT_DOUBLE_EQ(h.pair_slowdown_while(false), 0.7);
  h.waiting_pair_slowdown.reset();
  EXPECT_DOUBLE_EQ(h.pair_slowdown_while(false), 0.9);
}

}  // namespace
}  // namespace weft
