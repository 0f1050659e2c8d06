#include "schedule/schedule.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "profile/profile.h"

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

TEST(Schedule, SerialisesToJson) {
  const Profile p = three_layers();
  const auto j = nlohmann::json::parse(to_json(per_layer(p)));
  EXPECT_EQ(j["period"], 1);
  EXPECT_EQ(j["iterations"][0].size(), 3u);
  EXPECT_EQ(j["dispatch"]["policy"], "in-order");
}

}  // namespace
}  // namespace weft
