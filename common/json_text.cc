#include "common/json_text.h"

#include <boost/json.hpp>

#include <charconv>
#include <cmath>

namespace pstrain {
namespace {

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
      const auto result = std::to_chars(buffer, buffer + sizeof buffer, d);
      out.append(buffer, result.ptr);
      return;
    }
    case boost::json::kind::string:
      out += boost::json::serialize(v);
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
        out += boost::json::serialize(boost::json::value(field.key()));
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
