#include "common/base/json_text.h"

#include <boost/json.hpp>

#include <charconv>
#include <cmath>
#include <string_view>

namespace pstrain {
namespace {

// The length of the well-formed UTF-8 sequence at the start of `s` (RFC 3629: no overlong forms,
// no surrogates, nothing above U+10FFFF), or 0 if there is none.
size_t utf8_sequence(std::string_view s) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const auto cont = [&](size_t i, unsigned lo = 0x80, unsigned hi = 0xbf) {
    return i < s.size() && byte(i) >= lo && byte(i) <= hi;
  };
  const unsigned c = byte(0);
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) return cont(1) ? 2 : 0;
  if (c >= 0xe0 && c <= 0xef) {
    const bool second = c == 0xe0 ? cont(1, 0xa0) : c == 0xed ? cont(1, 0x80, 0x9f) : cont(1);
    return second && cont(2) ? 3 : 0;
  }
  if (c >= 0xf0 && c <= 0xf4) {
    const bool second = c == 0xf0 ? cont(1, 0x90) : c == 0xf4 ? cont(1, 0x80, 0x8f) : cont(1);
    return second && cont(2) && cont(3) ? 4 : 0;
  }
  return 0;
}

// A JSON string literal of `text`. JSON text must be UTF-8 (RFC 8259), and Boost.JSON writes a
// string's bytes as they are: text that echoes a client's bytes (a Content-Type, a path) could
// make a response no parser accepts (found by fuzz/rest_fuzz.cc). Each byte that does not start
// a well-formed sequence becomes U+FFFD, the replacement character.
std::string json_string(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const size_t n = utf8_sequence(text.substr(i));
    if (n == 0) break;
    i += n;
  }
  if (i == text.size()) return boost::json::serialize(boost::json::string_view(text.data(), text.size()));
  std::string valid(text.substr(0, i));
  while (i < text.size()) {
    const size_t n = utf8_sequence(text.substr(i));
    if (n == 0) {
      valid += "\xEF\xBF\xBD";
      ++i;
    } else {
      valid.append(text.substr(i, n));
      i += n;
    }
  }
  return boost::json::serialize(boost::json::string_view(valid.data(), valid.size()));
}

void append(std::string& out, const boost::json::value& v) {
  switch (v.kind()) {
    case boost::json::kind::null:
      out += "null";
      return;
    case boost::json::kind::bool_:
      out += v.get_bool() ? "true" : "false";
      return;
    case boost::json::kind::int64:
      out += std::to_string(v.get_int64());
      return;
    case boost::json::kind::uint64:
      out += std::to_string(v.get_uint64());
      return;
    case boost::json::kind::double_: {
      const double d = v.get_double();
      if (!std::isfinite(d)) {
        out += "null";  // JSON has no NaN or infinity
        return;
      }
      char buffer[32];
      if (d == 0 && std::signbit(d)) {
        out += "-0.0";  // "-0" reads back as the integer 0, without its sign
        return;
      }
      const auto result = std::to_chars(buffer, buffer + sizeof buffer, d);
      out.append(buffer, result.ptr);
      return;
    }
    case boost::json::kind::string:
      out += json_string(v.get_string());
      return;
    case boost::json::kind::array: {
      out += '[';
      bool first = true;
      for (const auto& item : v.get_array()) {
        if (!first) out += ',';
        first = false;
        append(out, item);
      }
      out += ']';
      return;
    }
    case boost::json::kind::object: {
      out += '{';
      bool first = true;
      for (const auto& field : v.get_object()) {
        if (!first) out += ',';
        first = false;
        out += json_string(field.key());
        out += ':';
        append(out, field.value());
      }
      out += '}';
      return;
    }
  }
}

}  // namespace

std::string to_json_text(const boost::json::value& value) {
  std::string out;
  append(out, value);
  return out;
}

double round_to(double value, int digits) {
  const double scale = std::pow(10.0, digits);
  return std::round(value * scale) / scale;
}

}  // namespace pstrain
