#include "units/json_reader.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <fmt/format.h>

#include "testing/testing.h"
#include "units/limits.h"

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

// Note [Bounded JSON]: what weft never writes, and what would make reading
// unbounded, is refused before a DOM is built, with a one-line message.
TEST(JsonReader, DeepNestingIsRefusedWithoutRecursion) {
  const std::string deep = std::string(100'000, '[') + std::string(100'000, ']');
  const std::string message = usage_error_of([&] { parse_json(deep, "f.json", "a test file"); });
  EXPECT_EQ(message.rfind("f.json: [0][0][0]", 0), 0u) << message;
  EXPECT_NE(message.find("nests deeper than 64 levels"), std::string::npos) << message;
  EXPECT_LT(message.size(), 200u) << message;
  // 64 levels are fine.
  EXPECT_NO_THROW(parse_json(std::string(64, '[') + std::string(64, ']'), "f.json", "a test file"));
  EXPECT_NE(usage_error_of([] { parse_json(std::string(65, '[') + std::string(65, ']'), "f.json", "x"); }),
            "no error");
}

TEST(JsonReader, NumbersBeyondADoubleNameTheFileAndField) {
  EXPECT_EQ(usage_error_of([] { parse_json(R"({"runs": [{"n": 1}, {"n": -1e400}]})", "f.json", "a test file"); }),
            "f.json: runs[1].n is -1e400, beyond the range of a double; expected a test file");
  EXPECT_EQ(usage_error_of([] { parse_json("1e400", "f.json", "a test file"); }),
            "f.json: the document is 1e400, beyond the range of a double; expected a test file");
  for (const char* text : {"NaN", "[Infinity]", R"({"a": -Infinity})", R"({"a": nan})"}) {
    const std::string message = usage_error_of([&] { parse_json(text, "f.json", "a test file"); });
    EXPECT_EQ(message.rfind("f.json: not valid JSON (", 0), 0u) << text << ": " << message;
  }
}

TEST(JsonReader, AKeyTwiceInOneObjectIsRefused) {
  EXPECT_EQ(usage_error_of([] { parse_json(R"({"a": {"b": 1, "c": 2, "b": 3}})", "f.json", "x"); }),
            R"(f.json: a has the key "b" twice; a key may appear once)");
  EXPECT_EQ(usage_error_of([] { parse_json(R"({"b": 1, "b": 1})", "f.json", "x"); }),
            R"(f.json: the document has the key "b" twice; a key may appear once)");
  // The same key in different objects is fine.
  EXPECT_NO_THROW(parse_json(R"([{"b": 1}, {"b": 2, "c": {"b": 3}}])", "f.json", "x"));
}

TEST(JsonReader, AnArrayBeyondTheLimitIsRefused) {
  std::string text = "{\"xs\": [0";
  text.reserve(2 * limits::kMaxJsonArray + 16);
  for (std::size_t i = 0; i < limits::kMaxJsonArray; ++i) text += ",0";
  text += "]}";
  EXPECT_EQ(usage_error_of([&] { parse_json(text, "f.json", "x"); }),
            fmt::format("f.json: xs has more than {} elements, more than weft reads", limits::kMaxJsonArray));
}

TEST(JsonReader, QuotedValuesAreCutToAFewDozenCharacters) {
  std::string numbers = "[0";
  for (int i = 0; i < 100'000; ++i) numbers += ",1";
  numbers += "]";
  const nlohmann::json doc = parse_json(R"({"a": )" + numbers + "}", "f.json", "x");
  const std::string message = usage_error_of([&] { JsonReader(doc, "", "f.json", "x").number("a"); });
  EXPECT_EQ(message.rfind("f.json: a is [0,1,1,1,", 0), 0u) << message.substr(0, 200);
  EXPECT_NE(message.find("(200003 characters), expected a number"), std::string::npos) << message.substr(0, 200);
  EXPECT_LT(message.size(), 150u);
  // Text the parser stopped at too.
  const std::string unterminated = "{\"a\": \"" + std::string(1'000'000, 'x');
  EXPECT_LT(usage_error_of([&] { parse_json(unterminated, "f.json", "x"); }).size(), 400u);
}

TEST(JsonReader, RangedIntegersSayTheirRange) {
  const nlohmann::json doc = parse_json(R"({"a": -1, "b": 18446744073709551615, "c": 3})", "f.json", "x");
  const JsonReader r(doc, "", "f.json", "x");
  EXPECT_EQ(usage_error_of([&] { r.integer("a", 0, 10); }), "f.json: a is -1, expected an integer in [0, 10]");
  EXPECT_EQ(usage_error_of([&] { r.integer("b", 0, 10); }),
            "f.json: b is 18446744073709551615, expected an integer in [0, 10]");
  EXPECT_EQ(r.integer("c", 0, 10), 3);
}

}  // namespace
}  // namespace weft
