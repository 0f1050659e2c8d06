#include "schedule/schedule.h"

#include <functional>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "profile/profile.h"
#include "testing/testing.h"

namespace weft {
namespace {

Profile three_layers() {
  Profile p;
  p.model = "three";
  for (int i = 0; i < 3; ++i) p.layers.push_back({"l" + std::to_string(i), 100, 4, 1e-3, 2e-3});
  return p;
}

Schedule per_layer(const Profile& p) {
  Schedule s;
  s.strategy = "per-layer";
  s.iterations.resize(1);
  for (int l = p.size() - 1; l >= 0; --l) {
    s.iterations[0].push_back({.chunks = {{l, 0, 400}}, .ready_after = l});
  }
  return s;
}

// Every field, and a value of every kind and policy, comes back as it was written.
TEST(ScheduleJson, ReadsBackWhatItWrote) {
  Schedule s = per_layer(three_layers());
  s.period = 2;
  s.iterations.push_back({{.chunks = {{0, 0, 100}, {2, 100, 300}},
                           .kind = OpKind::kParameterServer,
                           .ready_after = 0,
                           .release_offset = {0, 1.5e-3, 0.25, 1e-9},
                           .priority = -3,
                           .needed_by = 2,
                           .server = 1},
                          {.chunks = {{1, 0, 400}}, .kind = OpKind::kAverageParameters, .needed_by = kBarrier}});
  s.dispatch = {.kind = DispatchPolicy::Kind::kWindows, .credit = 7, .windows = {4096, 1 << 20}};
  s.easgd = {.alpha = 0.225, .beta = 0.9};
  s.options_json = R"({"H":5,"partition_B":65536})";
  const Schedule back = parse_schedule(to_json(s), "s.json");
  EXPECT_EQ(to_json(back), to_json(s));
  EXPECT_EQ(back.iterations[1][0].release_offset, s.iterations[1][0].release_offset);
  EXPECT_EQ(back.iterations[1][1].kind, OpKind::kAverageParameters);
  EXPECT_EQ(back.dispatch.windows, s.dispatch.windows);
  EXPECT_EQ(nlohmann::json::parse(back.options_json), nlohmann::json::parse(s.options_json));
  for (const auto kind : {DispatchPolicy::Kind::kInOrder, DispatchPolicy::Kind::kCredit}) {
    s.dispatch.kind = kind;
    EXPECT_EQ(parse_schedule(to_json(s), "s.json").dispatch.kind, kind);
  }
}

// A file that is not a schedule is named, with the field by its path and what is accepted.
TEST(ScheduleJson, ABadFileNamesTheFieldAndWhatIsAccepted) {
  const std::string good = to_json(per_layer(three_layers()));
  const auto message = [](const std::string& text) {
    return test_support::usage_error_of([&] { parse_schedule(text, "s.json"); });
  };
  const auto edited = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = nlohmann::json::parse(good);
    edit(j);
    return message(j.dump());
  };
  EXPECT_NE(message(good.substr(0, good.size() / 2)).find("s.json: not valid JSON"), std::string::npos);
  EXPECT_NE(edited([](auto& j) { j.erase("period"); }).find("missing field period (a schedule from"),
            std::string::npos);
  EXPECT_NE(edited([](auto& j) { j["dispatch"]["policy"] = "fastest"; })
                .find(R"(dispatch.policy is "fastest", expected "in-order" or "credit" or "windows")"),
            std::string::npos);
  EXPECT_NE(edited([](auto& j) { j["iterations"][0][1]["kind"] = "sum"; }).find("iterations[0][1].kind is \"sum\""),
            std::string::npos);
  EXPECT_NE(edited([](auto& j) { j["iterations"][0][2]["chunks"] = {{1, 2}}; })
                .find("iterations[0][2].chunks is [[1,2]], expected an array of [layer, offset, length]"),
            std::string::npos);
  EXPECT_NE(edited([](auto& j) { j["iterations"][0] = 3; }).find("iterations[0] is 3, expected an array"),
            std::string::npos);
  EXPECT_NE(edited([](auto& j) { j["options"] = "H=5"; }).find(R"(options is "H=5", expected an object)"),
            std::string::npos);
}

TEST(Schedule, AcceptsACompleteGradientSchedule) {
  const Profile p = three_layers();
  EXPECT_NO_THROW(validate(per_layer(p), p, 4));
}

TEST(Schedule, RejectsMissingBytes) {
  const Profile p = three_layers();
  Schedule s = per_layer(p);
  s.iterations[0][0].chunks[0].length = 300;
  EXPECT_THROW(validate(s, p, 4), std::logic_error);
}

TEST(Schedule, RejectsBytesSentTwice) {
  const Profile p = three_layers();
  Schedule s = per_layer(p);
  s.iterations[0].push_back({.chunks = {{1, 100, 50}}, .ready_after = 1});
  try {
    validate(s, p, 4);
    FAIL();
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("twice"), std::string::npos) << e.what();
  }
}

TEST(Schedule, RejectsAnOpReadyBeforeItsData) {
  const Profile p = three_layers();
  Schedule s = per_layer(p);
  s.iterations[0][0].ready_after = 2;
  s.iterations[0][0].chunks = {{0, 0, 400}};
  s.iterations[0][2].chunks = {{2, 0, 400}};
  EXPECT_THROW(validate(s, p, 4), std::logic_error);
}

TEST(Schedule, RejectsBadOffsetsAndPolicies) {
  const Profile p = three_layers();
  Schedule s = per_layer(p);
  s.iterations[0][0].release_offset = {0.0, 1.0};
  EXPECT_THROW(validate(s, p, 4), std::logic_error) << "one offset per worker";
  s = per_layer(p);
  s.dispatch.kind = DispatchPolicy::Kind::kCredit;
  EXPECT_THROW(validate(s, p, 4), std::logic_error) << "credit must be set";
  s = per_layer(p);
  s.period = 2;
  EXPECT_THROW(validate(s, p, 4), std::logic_error);
}

TEST(Schedule, ParameterSchedulesMustCoverEveryLayerOncePerPeriod) {
  const Profile p = three_layers();
  Schedule s;
  s.strategy = "partial";
  s.period = 2;
  s.iterations.resize(2);
  s.iterations[0].push_back({.chunks = {{2, 0, 400}}, .kind = OpKind::kAverageParameters, .ready_after = 2});
  s.iterations[1].push_back({.chunks = {{1, 0, 400}}, .kind = OpKind::kAverageParameters, .ready_after = 1});
  EXPECT_THROW(validate(s, p, 1), std::logic_error) << "layer 0 is never averaged";
  s.iterations[1].push_back({.chunks = {{0, 0, 400}}, .kind = OpKind::kAverageParameters, .ready_after = 0});
  EXPECT_NO_THROW(validate(s, p, 1));
}

// The worker takes a plain server's parameters whole (the engine's step happens
// elsewhere), so half a layer in one iteration and half in the next cannot run.
TEST(Schedule, APlainParameterServerExchangesWholeLayers) {
  const Profile p = three_layers();
  Schedule s{.strategy = "halves", .period = 2};
  s.iterations.resize(2);
  for (int it = 0; it < 2; ++it) {
    s.iterations[it].push_back({.chunks = {{2, 0, 400}, {1, 0, 400}}, .kind = OpKind::kParameterServer,
                                .ready_after = 1});
    s.iterations[it].push_back(
        {.chunks = {{0, 200 * it, 200}}, .kind = OpKind::kParameterServer, .ready_after = 0});
  }
  EXPECT_THROW(validate(s, p, 1), std::logic_error) << "half of layer 0 per iteration";
  s.easgd = {.alpha = 0.1, .beta = 0.9};
  EXPECT_NO_THROW(validate(s, p, 1)) << "EASGD steps locally, on any part of a layer";
  s.easgd = {};
  s.iterations[1][1].chunks = {{0, 0, 400}};
  s.iterations[0][1].chunks = {{0, 0, 400}};
  EXPECT_NO_THROW(validate(s, p, 1));
}

TEST(Schedule, SerialisesToJson) {
  const Profile p = three_layers();
  const auto j = nlohmann::json::parse(to_json(per_layer(p)));
  EXPECT_EQ(j["period"], 1);
  EXPECT_EQ(j["iterations"][0].size(), 3u);
  EXPECT_EQ(j["dispatch"]["policy"], "in-order");
}

}  // namespace
}  // namespace weft
