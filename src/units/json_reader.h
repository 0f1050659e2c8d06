// Reading the JSON files weft writes and then reads back (bench results,
// schedules), so that a file that is not what it should be gets an error naming
// the file, the field by its path ("runs[3].strategy") and what is accepted.
//
// Include it only from .cc files: nlohmann/json is a heavy header.
//
// Thread-safety: a JsonReader refers to the document it reads; the document
// must outlive it and not change meanwhile.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "units/units.h"

namespace weft {

// Parses `text`, refusing what weft never writes and what would make reading
// it unbounded (Note [Bounded JSON], json_reader.cc): nesting deeper than
// limits::kMaxJsonDepth, an array longer than limits::kMaxJsonArray, a key twice
// in one object, a number beyond a double's range.
// THROWS UsageError "ORIGIN: not valid JSON (DETAIL, byte N); expected EXPECTED"
// (EXPECTED says what the file should hold), or "ORIGIN: PATH: WHAT; expected
// EXPECTED" for the refusals above; any quoted input is cut to a few dozen
// characters.
nlohmann::json parse_json(std::string_view text, std::string_view origin, std::string_view expected);

// `value` as JSON text, cut to at most about 60 characters ("[1,2,3,… (2310512
// characters)") so that an error message stays one line.
std::string excerpt(const nlohmann::json& value);

// Reads the fields of one JSON object. Every accessor THROWS UsageError naming
// `origin`, the field's path and, for a missing field, `what` (what kind of file
// this is, e.g. "a schedule from `weft simulate --schedule-out`").
class JsonReader {
 public:
  // `path` is the object's own path in the document ("" for the top level).
  // THROWS UsageError if `object` is not a JSON object.
  JsonReader(const nlohmann::json& object, std::string path, std::string_view origin, std::string_view what);

  const nlohmann::json& get(const std::string& name) const;
  bool has(const std::string& name) const { return object_.contains(name); }

  std::string string(const std::string& name) const;
  double number(const std::string& name) const;
  std::int64_t integer(const std::string& name) const;
  // An integer in [min, max].
  std::int64_t integer(const std::string& name, std::int64_t min, std::int64_t max) const;
  bool boolean(const std::string& name) const;
  std::vector<double> numbers(const std::string& name) const;
  std::vector<std::int64_t> integers(const std::string& name) const;
  // null reads as nullopt.
  std::optional<double> optional_number(const std::string& name) const;
  // For fields a format gained later: files written before it lack them.
  std::optional<double> newer_number(const std::string& name) const {
    return has(name) ? optional_number(name) : std::nullopt;
  }

  JsonReader child(const std::string& name) const;
  // Calls read(JsonReader) for each element of the array `name`, each an object.
  template <typename F>
  void each(const std::string& name, F read) const {
    const nlohmann::json& v = array(name);
    for (std::size_t i = 0; i < v.size(); ++i) read(JsonReader(v[i], element(name, i), origin_, what_));
  }

  // The array `name`; THROWS UsageError if it is something else.
  const nlohmann::json& array(const std::string& name) const;
  // The path of element i of field `name`, for readers of nested arrays.
  std::string element(const std::string& name, std::size_t i) const;
  // THROWS UsageError: field `name` ("" for this object itself) holds `value`
  // where `expected` was.
  [[noreturn]] void reject(const std::string& name, std::string_view expected, const nlohmann::json& value) const;

 private:
  std::string prefix() const { return path_.empty() ? "" : path_ + "."; }

  const nlohmann::json& object_;
  std::string path_;
  std::string_view origin_;
  std::string_view what_;
};

}  // namespace weft
