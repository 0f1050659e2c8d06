#include "units/json_reader.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "testing/testing.h"

namespace weft {
namespace {

using test_support::usage_error_of;

TEST(JsonReader, NamesTheFileTheFieldsPathAndWhatIsAccepted) {
  const nlohmann::json doc = parse_json(R"({"runs": [{"n": 1}, {"n": 2.5, "xs": [1, "a"]}], "top": {"in": {}}})",
                                        "f.json", "a test file");
  const JsonReader top(doc, "", "f.json", "a test file");
  std::vector<std::int64_t> ns;
  EXPECT_EQ(usage_error_of([&] { top.each("runs", [&](const JsonReader& r) { ns.push_back(r.integer("n")); }); }),
            "f.json: runs[1].n is 2.5, expected an integer");
  EXPECT_EQ(ns, std::vector<std::int64_t>{1});
  top.each("runs", [&](const JsonReader& r) {
    if (!r.has("xs")) return;
    EXPECT_EQ(usage_error_of([&] { r.numbers("xs"); }),
              R"(f.json: runs[1].xs is [1,"a"], expected an array of numbers)");
  });
  EXPECT_EQ(usage_error_of([&] { top.child("top").child("in").string("name"); }),
            "f.json: missing field top.in.name (a test file)");
  EXPECT_EQ(usage_error_of([&] { top.array("top"); }), R"(f.json: top is {"in":{}}, expected an array)");
  EXPECT_EQ(usage_error_of([&] { JsonReader(doc["runs"], "runs", "f.json", "a test file"); }),
            R"(f.json: runs is [{"n":1},{"n":2.5,"xs":[1,"a"]}], expected an object)");
}

TEST(JsonReader, TextThatIsNotJsonSaysWhereAndWhatWasExpected) {
  const std::string message = usage_error_of([] { parse_json(R"({"a": )", "f.json", "a test file"); });
  EXPECT_EQ(message.rfind("f.json: not valid JSON (", 0), 0u) << message;
  EXPECT_NE(message.find("byte 7); expected a test file"), std::string::npos) << message;
}

}  // namespace
}  // namespace weft
