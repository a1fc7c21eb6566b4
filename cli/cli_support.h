// What the `pstrain` commands share (commands.cc, study_commands.cc): the usage error, reading the
// API's JSON, and the text forms of figures, times and tables.
//
// Thread rules: pure functions; any thread.
#pragma once

#include <boost/json.hpp>

#include <algorithm>
#include <ctime>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "common/base/json_parse.h"

namespace pstrain::cli {
namespace json = boost::json;

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline std::optional<json::value> parse_json(const std::string& body) {
  boost::system::error_code ec;
  json::value v = pstrain::parse_json(body, ec);
  if (ec) return std::nullopt;
  return v;
}

inline const json::object& as_object(const json::value& v) {
  static const json::object empty;
  return v.is_object() ? v.as_object() : empty;
}
inline std::string text(const json::object& o, std::string_view key, const std::string& fallback = "-") {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || v->is_null()) return fallback;
  if (v->is_string()) return std::string(v->as_string());
  return json::serialize(*v);
}
inline std::optional<double> number(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || !v->is_number()) return std::nullopt;
  return v->to_number<double>();
}
inline std::string fixed(std::optional<double> v, int decimals, const std::string& fallback = "-") {
  if (!v) return fallback;
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, *v);
  return buffer;
}
inline std::string when(std::optional<double> ms) {
  if (!ms || *ms <= 0) return "-";
  const std::time_t t = static_cast<std::time_t>(*ms / 1000);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%d %H:%M:%S", &tm);
  return buffer;
}

// Columns padded to their widest cell.
inline std::string table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) {
      if (width.size() <= c) width.push_back(0);
      width[c] = std::max(width[c], row[c].size());
    }
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(width[c] - row[c].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}


}  // namespace pstrain::cli
