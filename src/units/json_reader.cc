#include "units/json_reader.h"

#include <string>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>

#include "units/limits.h"
#include "units/units.h"

namespace weft {

using nlohmann::json;

namespace {

// Note [Bounded JSON]: every document passes a SAX check before its DOM is built.
// Rule: at most limits::kMaxJsonDepth levels of nesting, at most
// limits::kMaxJsonArray elements in one array, each key once in its object,
// every number a finite double. Invariant: the DOM's recursive functions (dump,
// compare, destroy) never recurse deeper than the limit, and a field never holds
// a value the user wrote twice. Reason: a 100,000-deep document overflowed the
// stack; a duplicated key was silently resolved by the last one winning; 1e400
// came out of nlohmann as an error without the file's name.
class BoundsCheck {
 public:
  BoundsCheck(std::string_view origin, std::string_view expected) : origin_(origin), expected_(expected) {}

  bool null() { return value(); }
  bool boolean(bool) { return value(); }
  bool number_integer(json::number_integer_t) { return value(); }
  bool number_unsigned(json::number_unsigned_t) { return value(); }
  bool number_float(json::number_float_t, const std::string&) { return value(); }
  bool string(std::string&) { return value(); }
  bool binary(json::binary_t&) { return value(); }
  bool start_object(std::size_t) { return open(false); }
  bool start_array(std::size_t) { return open(true); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(std::string& k) {
    Frame& f = frames_.back();
    if (!f.keys.insert(k).second) {
      refuse(fmt::format("{} has the key \"{}\" twice; a key may appear once", path(frames_.size() - 1),
                         excerpt_text(k)));
    }
    f.key = k;
    return true;
  }
  bool parse_error(std::size_t byte, const std::string& token, const nlohmann::detail::exception& e) {
    if (e.id == 406) {  // out_of_range: a number beyond a double's range
      refuse(fmt::format("{} is {}, beyond the range of a double; expected {}", path_of_next(), excerpt_text(token),
                         expected_));
    }
    // e.what() is "[json.exception.parse_error.101] parse error at line L, column C: ...";
    // the bracketed id means nothing to a user.
    std::string_view detail = e.what();
    if (const auto end = detail.find("] "); end != std::string_view::npos) detail.remove_prefix(end + 2);
    throw UsageError(fmt::format("{}: not valid JSON ({}, byte {}); expected {}", origin_, excerpt_text(detail, 160),
                                 byte, expected_));
  }

 private:
  struct Frame {
    bool array;
    std::size_t count = 0;  // elements so far, for arrays
    std::string key;        // the latest key, for objects
    std::unordered_set<std::string> keys;
  };

  // A value starts in the innermost array or object.
  bool value() {
    if (!frames_.empty() && frames_.back().array && ++frames_.back().count > limits::kMaxJsonArray) {
      --frames_.back().count;
      refuse(fmt::format("{} has more than {} elements, more than weft reads", path(frames_.size() - 1),
                         limits::kMaxJsonArray));
    }
    return true;
  }
  bool open(bool array) {
    value();
    if (frames_.size() >= static_cast<std::size_t>(limits::kMaxJsonDepth)) {
      refuse(fmt::format("{} nests deeper than {} levels, more than weft reads", path(frames_.size()),
                         limits::kMaxJsonDepth));
    }
    frames_.push_back(Frame{.array = array, .count = 0, .key = {}, .keys = {}});
    return true;
  }
  bool close() {
    frames_.pop_back();
    return true;
  }
  // "runs[3].strategy": where a value is, inside the outermost `depth` arrays
  // and objects.
  std::string path(std::size_t depth) const {
    std::string out;
    for (std::size_t i = 0; i < depth; ++i) {
      const Frame& f = frames_[i];
      if (f.array) {
        out += fmt::format("[{}]", f.count == 0 ? 0 : f.count - 1);
      } else if (!f.keys.empty()) {  // an object before its first key has no child yet
        out += (out.empty() ? "" : ".") + f.key;
      }
    }
    return out.empty() ? "the document" : excerpt_text(out);
  }
  // Where the value being read goes (the parser reports an error before value()).
  std::string path_of_next() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().count;
    return path(frames_.size());
  }
  [[noreturn]] void refuse(const std::string& what) const {
    throw UsageError(fmt::format("{}: {}", origin_, what));
  }

  std::string_view origin_;
  std::string_view expected_;
  std::vector<Frame> frames_;
};

}  // namespace

json parse_json(std::string_view text, std::string_view origin, std::string_view expected) {
  if (text.size() > limits::kMaxInputBytes) {
    throw UsageError(fmt::format("{}: {} bytes, more than the {} weft reads; expected {}", origin, text.size(),
                                 limits::kMaxInputBytes, expected));
  }
  BoundsCheck check(origin, expected);
  json::sax_parse(text.begin(), text.end(), &check);
  // The text is valid JSON within bounds: this parse succeeds.
  return json::parse(text.begin(), text.end());
}

std::string excerpt(const json& value) { return excerpt_text(value.dump()); }

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

std::int64_t JsonReader::integer(const std::string& name, std::int64_t min, std::int64_t max) const {
  const json& v = get(name);
  const bool in_range = v.is_number_integer() && (v.is_number_unsigned() ? v.get<std::uint64_t>() <= static_cast<std::uint64_t>(max)
                                                                         : v.get<std::int64_t>() >= min && v.get<std::int64_t>() <= max);
  if (!in_range) reject(name, fmt::format("an integer in [{}, {}]", min, max), v);
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
  throw UsageError(fmt::format("{}: {} is {}, expected {}", origin_, where, excerpt(value), expected));
}

}  // namespace weft
