#include "profile/profile.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "profile/zoo.h"
#include "testing/testing.h"

namespace weft {
namespace {

namespace fs = std::filesystem;

Profile random_profile(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> count(1, 40);
  std::uniform_int_distribution<std::int64_t> params(0, 50'000'000);
  std::uniform_int_distribution<int> width(1, 8);
  std::exponential_distribution<double> seconds(1e3);  // mean 1 ms
  Profile p{.model = "random", .batch = count(rng), .device = "v100", .layers = {}};
  int layers = count(rng);
  for (int l = 0; l < layers; ++l) {
    p.layers.push_back(Layer{.name = "layer \"" + std::to_string(l) + "\"\n",  // needs escaping
                             .params = params(rng),
                             .bytes_per_param = width(rng),
                             .fp = seconds(rng),
                             .bp = seconds(rng)});
  }
  return p;
}

void expect_same(const Profile& a, const Profile& b) {
  EXPECT_EQ(a.model, b.model);
  EXPECT_EQ(a.batch, b.batch);
  EXPECT_EQ(a.device, b.device);
  ASSERT_EQ(a.size(), b.size());
  for (int l = 0; l < a.size(); ++l) {
    EXPECT_EQ(a.layers[l].name, b.layers[l].name);
    EXPECT_EQ(a.layers[l].params, b.layers[l].params);
    EXPECT_EQ(a.layers[l].bytes_per_param, b.layers[l].bytes_per_param);
    EXPECT_EQ(a.layers[l].fp, b.layers[l].fp);  // exact: the encoder writes round-trip digits
    EXPECT_EQ(a.layers[l].bp, b.layers[l].bp);
  }
}

// A fresh directory, removed with its contents at the end of the test.
class ScratchDir {
 public:
  ScratchDir() {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            ("weft-profile-test-" + std::to_string(::getpid()) + "-" + test->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ScratchDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(path_)) {
      names.push_back(entry.path().filename().string());
    }
    return names;
  }

 private:
  fs::path path_;
};

TEST(Profile, TotalsSumTheLayers) {
  Profile p{.model = "m",
            .batch = 1,
            .device = "",
            .layers = {{.name = "a", .params = 10, .bytes_per_param = 4, .fp = 1, .bp = 2},
                       {.name = "b", .params = 3, .bytes_per_param = 2, .fp = 0.5, .bp = 0.25}}};
  EXPECT_EQ(p.size(), 2);
  EXPECT_EQ(p.total_params(), 13);
  EXPECT_EQ(p.total_bytes(), 46);
  EXPECT_DOUBLE_EQ(p.forward_time(), 1.5);
  EXPECT_DOUBLE_EQ(p.backward_time(), 2.25);
}

TEST(MedianProfile, EachLayerTakesTheMedianOfItsTimes) {
  const auto two_layers = [](double fp0, double bp0, double fp1, double bp1) {
    return Profile{.model = "m", .batch = 8, .device = "cpu",
                   .layers = {{.name = "a", .params = 10, .fp = fp0, .bp = bp0},
                              {.name = "b", .params = 3, .fp = fp1, .bp = bp1}}};
  };
  const Profile odd = median_profile({two_layers(1, 9, 5, 1), two_layers(3, 2, 4, 3), two_layers(2, 4, 6, 2)});
  EXPECT_DOUBLE_EQ(odd.layers[0].fp, 2);
  EXPECT_DOUBLE_EQ(odd.layers[0].bp, 4);
  EXPECT_DOUBLE_EQ(odd.layers[1].fp, 5);
  EXPECT_DOUBLE_EQ(odd.layers[1].bp, 2);
  EXPECT_EQ(odd.layers[0].params, 10);
  EXPECT_NE(odd.device.find("median of 3"), std::string::npos) << odd.device;
  const Profile even = median_profile({two_layers(1, 1, 1, 1), two_layers(3, 5, 1, 1)});
  EXPECT_DOUBLE_EQ(even.layers[0].fp, 2);
  EXPECT_DOUBLE_EQ(even.layers[0].bp, 3);
  Profile other = two_layers(1, 1, 1, 1);
  other.layers[1].name = "c";
  EXPECT_THROW(median_profile({two_layers(1, 1, 1, 1), other}), std::invalid_argument);
  EXPECT_THROW(median_profile({}), std::invalid_argument);
}

// bp_end[L-1] is the last layer's own backward; each earlier layer ends its own bp
// after the next one; the first layer ends the pass.
TEST(BackwardEndTimes, AccumulateFromTheOutputLayer) {
  std::mt19937_64 rng(20240601);
  for (int trial = 0; trial < 200; ++trial) {
    Profile p = random_profile(rng);
    std::vector<Seconds> end = backward_end_times(p);
    ASSERT_EQ(static_cast<int>(end.size()), p.size());
    EXPECT_DOUBLE_EQ(end.back(), p.layers.back().bp);
    for (int l = 0; l + 1 < p.size(); ++l) {
      EXPECT_DOUBLE_EQ(end[l], end[l + 1] + p.layers[l].bp);
      EXPECT_GE(end[l], end[l + 1]);
    }
    EXPECT_NEAR(end.front(), p.backward_time(), 1e-12);
  }
}

TEST(BackwardEndTimes, EmptyProfileHasNone) { EXPECT_TRUE(backward_end_times(Profile{}).empty()); }

TEST(ProfileJson, RandomProfilesRoundTripExactly) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    Profile p = random_profile(rng);
    expect_same(parse_profile(to_json(p)), p);
  }
}

TEST(ProfileJson, ZooProfilesRoundTripExactly) {
  for (const std::string& model : zoo_models()) {
    Profile p = zoo_profile(model, {.device = "a100"});
    expect_same(parse_profile(to_json(p), model), p);
  }
}

TEST(ProfileJson, ReadsTheSpecExampleWithDefaultsAndIgnoresUnknownFields) {
  Profile p = parse_profile(R"({
    "model": "resnet50", "batch": 32, "device": "a100", "exported_by": "another tool",
    "layers": [
      {"name": "conv1", "params": 9408, "bytes_per_param": 4, "fp_s": 0.00031, "bp_s": 0.00062},
      {"name": "fc", "params": 2.049e6, "fp_s": 0, "bp_s": 1e-5, "shape": [2048, 1000]}
    ]})");
  EXPECT_EQ(p.model, "resnet50");
  EXPECT_EQ(p.batch, 32);
  EXPECT_EQ(p.device, "a100");
  ASSERT_EQ(p.size(), 2);
  EXPECT_EQ(p.layers[0].params, 9408);
  EXPECT_EQ(p.layers[0].fp, 0.00031);
  EXPECT_EQ(p.layers[0].bp, 0.00062);
  EXPECT_EQ(p.layers[1].params, 2'049'000);   // a whole number written in floating point
  EXPECT_EQ(p.layers[1].bytes_per_param, 4);  // the default
}

TEST(ProfileJson, InformativeFieldsAreOptional) {
  Profile p = parse_profile(R"({"layers": [{"name": "x", "params": 1, "fp_s": 1, "bp_s": 2}]})");
  EXPECT_EQ(p.model, "");
  EXPECT_EQ(p.batch, 0);
  EXPECT_EQ(p.size(), 1);
}

// Profiles of the older format carry host fields; the profile itself ignores
// them (cost/host.h's host_in_profile reads them).
TEST(ProfileJson, HostFieldsOfOldProfilesAreNotTheProfiles) {
  const Profile p = parse_profile(
      R"({"compute_slowdown": 0.3, "skew_s": 0.002, "layers": [{"name": "x", "params": 1, "fp_s": 1, "bp_s": 2}]})");
  EXPECT_EQ(to_json(p).find("slowdown"), std::string::npos) << to_json(p);
  EXPECT_EQ(to_json(p).find("skew"), std::string::npos) << to_json(p);
}

// Builds a one-layer-after-a-good-one document with `layer` as layer 1, so that
// the error must name index 1, not 0.
std::string with_bad_layer(const std::string& layer) {
  return R"({"layers": [{"name": "ok", "params": 1, "fp_s": 1, "bp_s": 1}, )" + layer + "]}";
}

struct BadLayer {
  std::string label;
  std::string layer;
  std::string field;
  std::string value;     // as the message shows it
  std::string accepted;  // part of what the message says is accepted
};

void PrintTo(const BadLayer& c, std::ostream* os) { *os << c.layer; }

class BadLayerTest : public ::testing::TestWithParam<BadLayer> {};

TEST_P(BadLayerTest, ErrorNamesOriginLayerFieldValueAndWhatIsAccepted) {
  const BadLayer& c = GetParam();
  try {
    parse_profile(with_bad_layer(c.layer), "profile.json");
    FAIL() << "accepted " << c.layer;
  } catch (const UsageError& e) {
    std::string message = e.what();
    for (const std::string& part :
         {std::string("profile.json: layer 1"), "field \"" + c.field + "\"", "is " + c.value,
          "expected " + c.accepted}) {
      EXPECT_NE(message.find(part), std::string::npos)
          << "\"" << message << "\" lacks \"" << part << "\"";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadLayerTest,
    ::testing::Values(
        BadLayer{"NegativeForward", R"({"name": "conv2", "params": 5, "fp_s": -1, "bp_s": 1})",
                 "fp_s", "-1", "a number >= 0 (seconds)"},
        BadLayer{"MissingBackward", R"({"name": "conv2", "params": 5, "fp_s": 1})", "bp_s",
                 "missing", "a number >= 0"},
        BadLayer{"StringForward", R"({"name": "conv2", "params": 5, "fp_s": "fast", "bp_s": 1})",
                 "fp_s", "\"fast\"", "a number >= 0"},
        BadLayer{"NegativeParams", R"({"name": "conv2", "params": -3, "fp_s": 1, "bp_s": 1})",
                 "params", "-3", "an integer >= 0"},
        BadLayer{"FractionalParams", R"({"name": "conv2", "params": 1.5, "fp_s": 1, "bp_s": 1})",
                 "params", "1.5", "an integer >= 0"},
        BadLayer{"MissingParams", R"({"name": "conv2", "fp_s": 1, "bp_s": 1})", "params", "missing",
                 "an integer >= 0"},
        BadLayer{"ZeroBytesPerParam",
                 R"({"name": "conv2", "params": 5, "bytes_per_param": 0, "fp_s": 1, "bp_s": 1})",
                 "bytes_per_param", "0", "an integer >= 1"},
        BadLayer{"MissingName", R"({"params": 5, "fp_s": 1, "bp_s": 1})", "name", "missing",
                 "a non-empty string"},
        BadLayer{"EmptyName", R"({"name": "", "params": 5, "fp_s": 1, "bp_s": 1})", "name", "\"\"",
                 "a non-empty string"},
        BadLayer{"NumericName", R"({"name": 7, "params": 5, "fp_s": 1, "bp_s": 1})", "name", "7",
                 "a non-empty string"}),
    [](const auto& info) { return info.param.label; });

TEST(ProfileJson, ErrorNamesTheLayerWhenItHasAName) {
  try {
    parse_profile(with_bad_layer(R"({"name": "conv2", "params": 5, "fp_s": -1, "bp_s": 1})"),
                  "profile.json");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(),
                 "profile.json: layer 1 (\"conv2\"): field \"fp_s\" is -1; expected a number >= 0 "
                 "(seconds), at most 86400");
  }
}

struct BadDocument {
  std::string label;
  std::string json;
  std::string says;
};

void PrintTo(const BadDocument& c, std::ostream* os) { *os << c.json; }

class BadDocumentTest : public ::testing::TestWithParam<BadDocument> {};

TEST_P(BadDocumentTest, ErrorNamesOriginAndProblem) {
  try {
    parse_profile(GetParam().json, "p.json");
    FAIL() << "accepted " << GetParam().json;
  } catch (const UsageError& e) {
    std::string message = e.what();
    EXPECT_EQ(message.rfind("p.json: ", 0), 0u) << message;
    EXPECT_NE(message.find(GetParam().says), std::string::npos)
        << "\"" << message << "\" lacks \"" << GetParam().says << "\"";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadDocumentTest,
    ::testing::Values(
        BadDocument{"MissingLayers", R"({"model": "x"})", "\"layers\" is missing"},
        BadDocument{"LayersNotAnArray", R"({"layers": {"name": "x"}})", "is a JSON object"},
        BadDocument{"NoLayers", R"({"layers": []})", "no layers"},
        BadDocument{"LayerNotAnObject", R"({"layers": [3]})", "layer 0 is a JSON number"},
        BadDocument{"TopLevelArray", R"([1, 2])", "top level is a JSON array"},
        BadDocument{"MistypedBatch", R"({"batch": "big", "layers": []})", "\"batch\" is \"big\""},
        BadDocument{"Malformed", "{\"layers\": [\n  {\"name\": \"a\",, }]}", "line 2, column"},
        BadDocument{"Truncated", R"({"layers": [)", "not valid JSON"}),
    [](const auto& info) { return info.param.label; });

TEST(Validate, RejectsNonFiniteTimesAndEmptyProfiles) {
  Profile p{.model = "",
            .batch = 0,
            .device = "",
            .layers = {{.name = "a", .params = 1, .bytes_per_param = 4, .fp = 0, .bp = 0}}};
  EXPECT_NO_THROW(validate(p));
  p.layers[0].bp = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW(
      {
        try {
          validate(p, "mine");
        } catch (const UsageError& e) {
          EXPECT_NE(std::string(e.what()).find("mine: layer 0 (\"a\"): field \"bp_s\" is nan"),
                    std::string::npos)
              << e.what();
          throw;
        }
      },
      UsageError);
  p.layers.clear();
  EXPECT_THROW(validate(p), UsageError);
}

TEST(ProfileFile, SaveThenLoadRoundTripsAndLeavesNoTemporary) {
  ScratchDir dir;
  std::mt19937_64 rng(11);
  Profile first = random_profile(rng);
  Profile second = random_profile(rng);
  fs::path file = dir.path() / "profile.json";
  save_profile(first, file);
  expect_same(load_profile(file), first);
  save_profile(second, file);  // replaces the previous contents
  expect_same(load_profile(file), second);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"profile.json"});
}

TEST(ProfileFile, SaveIntoAMissingDirectoryFailsCleanly) {
  ScratchDir dir;
  fs::path file = dir.path() / "missing" / "profile.json";
  try {
    save_profile(zoo_profile("resnet18"), file);
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
  }
  EXPECT_TRUE(dir.entries().empty());
}

TEST(ProfileFile, LoadErrorsNameTheFile) {
  ScratchDir dir;
  fs::path missing = dir.path() / "nope.json";
  try {
    load_profile(missing);
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(missing.string()), std::string::npos) << e.what();
  }
  fs::path bad = dir.path() / "bad.json";
  std::ofstream(bad) << with_bad_layer(R"({"name": "c", "params": 1, "fp_s": 1, "bp_s": -2})");
  try {
    load_profile(bad);
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(bad.string() + ": layer 1 (\"c\"): field \"bp_s\" is -2"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace weft
