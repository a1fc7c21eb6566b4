#include "common/data/spec_reader.h"

#include <cmath>
#include <limits>

#include "common/base/error.h"
#include "common/base/json_parse.h"

namespace pstrain::spec_json {
namespace {

std::string int_range_text(int64_t min, int64_t max) {
  if (min == 1 && max == std::numeric_limits<int64_t>::max()) return "must be a positive integer";
  if (min == 0 && max == std::numeric_limits<int64_t>::max()) return "must be a non-negative integer";
  if (min == 1) return "must be a positive integer (at most " + std::to_string(max) + ")";
  return "must be an integer from " + std::to_string(min) + " to " + std::to_string(max);
}

}  // namespace

std::string escape_key(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

std::string kind_of(const json::value& v) {
  switch (v.kind()) {
    case json::kind::null: return "null";
    case json::kind::bool_: return "a boolean";
    case json::kind::int64:
    case json::kind::uint64: return "an integer";
    case json::kind::double_: return "a number";
    case json::kind::string: return "a string";
    case json::kind::array: return "an array";
    case json::kind::object: return "an object";
  }
  return "a value";
}

std::optional<int64_t> as_integer(const json::value& v) {
  if (v.is_int64()) return v.as_int64();
  if (v.is_uint64()) {
    if (v.as_uint64() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(v.as_uint64());
  }
  return std::nullopt;
}

int64_t read_int(const json::value& v, const std::string& path, int64_t min, int64_t max) {
  const auto n = as_integer(v);
  if (!n || *n < min || *n > max) {
    std::string text = int_range_text(min, max);
    if (!n) text += ", not " + kind_of(v);
    throw SpecError(path, text);
  }
  return *n;
}

double read_number(const json::value& v, const std::string& path, double min, double max, bool min_open) {
  double x;
  if (v.is_double()) x = v.as_double();
  else if (v.is_int64()) x = static_cast<double>(v.as_int64());
  else if (v.is_uint64()) x = static_cast<double>(v.as_uint64());
  else throw SpecError(path, "must be a number, not " + kind_of(v));
  const bool below = min_open ? x <= min : x < min;
  if (!std::isfinite(x) || below || x > max) {
    std::ostringstream range;
    range << (min_open ? "greater than " : "at least ") << min;
    if (max < std::numeric_limits<double>::max()) range << " and at most " << max;
    throw SpecError(path, "must be a number " + range.str());
  }
  return x;
}

std::string read_string(const json::value& v, const std::string& path) {
  if (!v.is_string()) throw SpecError(path, "must be a string, not " + kind_of(v));
  return std::string(v.as_string());
}

float ObjectReader::number(std::string_view key, double min, double max, bool min_open, float fallback) {
  const json::value* v = optional(key);
  if (v == nullptr) return fallback;
  const double x = read_number(*v, field_path(key), min, max, min_open);
  // The range holds for the float32 the spec keeps, too: 1e-84 is greater than 0, but as a float
  // it is 0, and the canonical text ("epsilon": 0) would fail this very check where a server
  // or worker parses it (found by fuzz/job_spec_fuzz.cc).
  const float f = static_cast<float>(x);
  if ((min_open ? f <= min : f < min) || f > max) {
    std::ostringstream why;
    why << "is " << x << ", which is " << f << " as a float32: out of range ("
        << (min_open ? "greater than " : "at least ") << min << " and at most " << max << ")";
    throw SpecError(field_path(key), why.str());
  }
  return f;
}

void ObjectReader::finish() const {
  for (const auto& field : *object_) {
    if (known_.count(std::string(field.key())) == 0) {
      std::string names;
      for (const auto& k : known_) names += (names.empty() ? "" : ", ") + k;
      throw SpecError(field_path(field.key()), "is not a known field (known here: " + names + ")");
    }
  }
}

json::value parse_spec_text(std::string_view text, const std::string& what) {
  json::parse_options options;
  options.max_depth = 32;
  boost::system::error_code ec;
  json::value root = parse_json(text, ec, options);
  if (ec) throw SpecError("", what + " is not valid JSON: " + ec.message(), SpecError::Kind::kMalformed);
  return root;
}

}  // namespace pstrain::spec_json
