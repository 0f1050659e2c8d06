#include "units/json_reader.h"

#include <fmt/format.h>

#include "units/units.h"

namespace weft {

using nlohmann::json;

json parse_json(std::string_view text, std::string_view origin, std::string_view expected) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line L, column C: ...";
    // the bracketed id means nothing to a user.
    std::string_view detail = e.what();
    if (const auto end = detail.find("] "); end != std::string_view::npos) detail.remove_prefix(end + 2);
    throw UsageError(fmt::format("{}: not valid JSON ({}, byte {}); expected {}", origin, detail, e.byte, expected));
  }
}

JsonReader::JsonReader(const json& object, std::string path, std::string_view origin, std::string_view what)
    : object_(object), path_(std::move(path)), origin_(origin), what_(what) {
  if (!object_.is_object()) reject("", "an object", object_);
}

const json& JsonReader::get(const std::string& name) const {
  const auto it = object_.find(name);
  if (it == object_.end()) throw UsageError(fmt::format("{}: missing field {}{} ({})", origin_, prefix(), name, what_));
  return *it;
}

std::string JsonReader::string(const std::string& name) const {
  const json& v = get(name);
  if (!v.is_string()) reject(name, "a string", v);
  return v.get<std::string>();
}

double JsonReader::number(const std::string& name) const {
  const json& v = get(name);
  if (!v.is_number()) reject(name, "a number", v);
  return v.get<double>();
}

std::int64_t JsonReader::integer(const std::string& name) const {
  const json& v = get(name);
  if (!v.is_number_integer()) reject(name, "an integer", v);
  return v.get<std::int64_t>();
}

bool JsonReader::boolean(const std::string& name) const {
  const json& v = get(name);
  if (!v.is_boolean()) reject(name, "true or false", v);
  return v.get<bool>();
}

std::vector<double> JsonReader::numbers(const std::string& name) const {
  std::vector<double> out;
  for (const json& x : array(name)) {
    if (!x.is_number()) reject(name, "an array of numbers", get(name));
    out.push_back(x.get<double>());
  }
  return out;
}

std::vector<std::int64_t> JsonReader::integers(const std::string& name) const {
  std::vector<std::int64_t> out;
  for (const json& x : array(name)) {
    if (!x.is_number_integer()) reject(name, "an array of integers", get(name));
    out.push_back(x.get<std::int64_t>());
  }
  return out;
}

std::optional<double> JsonReader::optional_number(const std::string& name) const {
  const json& v = get(name);
  if (v.is_null()) return std::nullopt;
  if (!v.is_number()) reject(name, "a number or null", v);
  return v.get<double>();
}

JsonReader JsonReader::child(const std::string& name) const {
  return JsonReader(get(name), prefix() + name, origin_, what_);
}

const json& JsonReader::array(const std::string& name) const {
  const json& v = get(name);
  if (!v.is_array()) reject(name, "an array", v);
  return v;
}

std::string JsonReader::element(const std::string& name, std::size_t i) const {
  return fmt::format("{}{}[{}]", prefix(), name, i);
}

void JsonReader::reject(const std::string& name, std::string_view expected, const json& value) const {
  const std::string where = name.empty() ? (path_.empty() ? "the document" : path_) : prefix() + name;
  throw UsageError(fmt::format("{}: {} is {}, expected {}", origin_, where, value.dump(), expected));
}

}  // namespace weft
