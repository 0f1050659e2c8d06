// Topology files (docs/formats.md "Topology") and the links between sites
// (cost/topology.h): a good file read whole, each bad field named.
#include "cost/topology.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace weft {
namespace {

using namespace literals;
namespace fs = std::filesystem;

// A topology file holding `text`, removed with the object.
class TopologyFile {
 public:
  explicit TopologyFile(const std::string& text) {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            ("weft-topology-test-" + std::to_string(::getpid()) + "-" + test->name() + ".json");
    std::ofstream(path_) << text;
  }
  ~TopologyFile() { fs::remove(path_); }
  std::string path() const { return path_.string(); }

 private:
  fs::path path_;
};

// Three sites of one rank each, the WAN at 20Mbit and 20ms, then `links`.
std::string three_sites(const std::string& links) {
  return R"({"sites": [{"ranks": [0], "bandwidth": "1Gbit"}, {"ranks": [1], "bandwidth": "1Gbit"},
                       {"ranks": [2], "bandwidth": "1Gbit"}],
             "wan": {"bandwidth": "20Mbit", "latency": "20ms"}, "links": )" +
         links + "}";
}

// read_topology's message for `text`; "" where it reads.
std::string error_of(const std::string& text) {
  const TopologyFile file(text);
  try {
    read_topology(file.path());
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(Topology, LinksOverrideOrderedPairs) {
  const TopologyFile file(three_sites(R"([{"from": 0, "to": 1, "bandwidth": "50Mbit", "latency": "10ms",
                                           "both_ways": true},
                                          {"from": 2, "to": 0, "latency": 0.1},
                                          {"from": 1, "to": 2, "bandwidth": 1e6, "both_ways": false}])"));
  const Topology t = read_topology(file.path());
  validate(t, 3);
  ASSERT_EQ(t.links.size(), 4u);  // both_ways gives two pairs
  EXPECT_EQ(between(t, 0, 1), (Wan{.bandwidth = 50_Mbit, .latency = 10_ms}));
  EXPECT_EQ(between(t, 1, 0), (Wan{.bandwidth = 50_Mbit, .latency = 10_ms}));
  // A field a link leaves out is the WAN's.
  EXPECT_EQ(between(t, 2, 0), (Wan{.bandwidth = 20_Mbit, .latency = 0.1}));
  EXPECT_EQ(between(t, 1, 2), (Wan{.bandwidth = 1e6, .latency = 20_ms}));
  // The pairs no link names: the WAN.
  EXPECT_EQ(between(t, 0, 2), t.wan);
  EXPECT_EQ(between(t, 2, 1), t.wan);
  EXPECT_DOUBLE_EQ(round_trip(t, 0, 2), 20_ms + 0.1);
  EXPECT_DOUBLE_EQ(round_trip(t, 1, 0), 2 * 10_ms);
  EXPECT_EQ(describe_links(t),
            "; site 0 to 1 at 50Mbit, 10ms one-way; site 1 to 0 at 50Mbit, 10ms one-way; site 2 to 0 at 20Mbit, "
            "100ms one-way; site 1 to 2 at 8Mbit, 20ms one-way");
  EXPECT_THROW(between(t, 1, 1), std::logic_error);
  EXPECT_THROW(between(t, 0, 3), std::logic_error);
}

TEST(Topology, WithoutLinksEveryPairIsTheWan) {
  const TopologyFile file(R"({"sites": [{"ranks": [0, 1], "bandwidth": "1Gbit", "latency": "0.1ms"},
                                        {"ranks": [2, 3], "bandwidth": "1Gbit"}],
                              "wan": {"bandwidth": "20Mbit", "latency": "20ms"}})");
  const Topology t = read_topology(file.path());
  EXPECT_TRUE(t.links.empty());
  EXPECT_EQ(between(t, 0, 1), t.wan);
  EXPECT_EQ(between(t, 1, 0), t.wan);
  EXPECT_DOUBLE_EQ(round_trip(t, 0, 1), 2 * 20_ms);
  EXPECT_EQ(describe_links(t), "");
  EXPECT_EQ(error_of(three_sites("[]")), "");  // no links: as leaving them out
}

TEST(Topology, BadLinksNameTheirField) {
  const auto names = [](const std::string& links, const std::string& field, const std::string& accepted) {
    const std::string message = error_of(three_sites(links));
    EXPECT_NE(message.find(field), std::string::npos) << links << " → " << message;
    EXPECT_NE(message.find(accepted), std::string::npos) << links << " → " << message;
    EXPECT_NE(message.find("--topology"), std::string::npos) << message;
  };
  names(R"([{"to": 1, "latency": "1ms"}])", "links[0].from", "");
  names(R"([{"from": 0, "to": 1, "latency": "1ms"}, {"from": 3, "to": 1, "latency": "1ms"}])", "links[1].from",
        "a site's index into \"sites\", 0..2");
  names(R"([{"from": -1, "to": 1, "latency": "1ms"}])", "links[0].from", "0..2");
  names(R"([{"from": 0.5, "to": 1, "latency": "1ms"}])", "links[0].from", "0..2");
  names(R"([{"from": "0", "to": 1, "latency": "1ms"}])", "links[0].from", "0..2");
  names(R"([{"from": 0, "latency": "1ms"}])", "links[0].to", "");
  names(R"([{"from": 1, "to": 1, "latency": "1ms"}])", "links[0].to", "a site other than \"from\" (1)");
  names(R"([{"from": 0, "to": 1}])", "links[0]", "\"bandwidth\", its \"latency\" or both");
  names(R"([{"from": 0, "to": 1, "bandwidth": "fast"}])", "links[0].bandwidth", "--wan-bandwidth");
  names(R"([{"from": 0, "to": 1, "bandwidth": 0}])", "links[0].bandwidth", "--wan-bandwidth");
  names(R"([{"from": 0, "to": 1, "latency": "-1ms"}])", "links[0].latency", "--wan-latency");
  names(R"([{"from": 0, "to": 1, "latency": true}])", "links[0].latency", "--wan-latency");
  names(R"([{"from": 0, "to": 1, "latency": "1ms", "both_ways": "yes"}])", "links[0].both_ways", "");
  names(R"([{"from": 0, "to": 1, "latency": "1ms", "both_way": true}])", "links[0].both_way",
        "a link has from, to, bandwidth, latency, both_ways");
  // Each ordered pair once, both_ways counting the way back.
  names(R"([{"from": 0, "to": 1, "latency": "1ms"}, {"from": 0, "to": 1, "latency": "2ms"}])", "links[1].to",
        "site 0 to 1");
  names(R"([{"from": 1, "to": 0, "latency": "1ms"}, {"from": 0, "to": 1, "latency": "2ms", "both_ways": true}])",
        "links[1].both_ways", "site 1 to 0");
  names(R"({"from": 0, "to": 1})", "links", "array");
  names(R"([3])", "links[0]", "");
  // One site: nothing lies between sites.
  const std::string one = error_of(R"({"sites": [{"ranks": [0, 1], "bandwidth": "1Gbit"}],
                                       "links": [{"from": 0, "to": 0, "latency": "1ms"}]})");
  EXPECT_NE(one.find("links"), std::string::npos) << one;
  EXPECT_NE(one.find("no links with one site"), std::string::npos) << one;
}

TEST(Topology, ValidateChecksLinksBuiltInCode) {
  Topology t{.sites = sites_shorthand("2x1", 2, 1_Gbit, 0), .wan = {.bandwidth = 20_Mbit, .latency = 20_ms}};
  const auto message = [&] {
    try {
      validate(t, 2);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  t.links = {{.from = 0, .to = 1, .link = {.bandwidth = 50_Mbit, .latency = 1_ms}}};
  EXPECT_EQ(message(), "");
  t.links.push_back({.from = 1, .to = 1, .link = {.bandwidth = 50_Mbit, .latency = 1_ms}});
  EXPECT_NE(message().find("links[1] joins sites 1 and 1"), std::string::npos) << message();
  t.links[1] = {.from = 0, .to = 1, .link = {.bandwidth = 50_Mbit, .latency = 1_ms}};
  EXPECT_NE(message().find("links[0] and links[1] both give site 0 to 1"), std::string::npos) << message();
  t.links[1] = {.from = 1, .to = 0, .link = {.bandwidth = 0, .latency = 1_ms}};
  EXPECT_NE(message().find("links[1] (site 1 to 0) at 0 B/s"), std::string::npos) << message();
  t.links[1].link = {.bandwidth = 1_Mbit, .latency = -1};
  EXPECT_NE(message().find("a latency >= 0, as --wan-bandwidth and --wan-latency take them"), std::string::npos)
      << message();
}

}  // namespace
}  // namespace weft
