// Lenient readers of a JSON answer's fields, for tests: a missing or mistyped field reads as NaN or
// an empty array, so that a wrong answer fails a CHECK instead of throwing. Shared by the RestApi
// tests (tests/coordinator/rest_api_support.h) and the HTTP client of the cluster tests
// (tests/integration/http_test_client.h). Stateless.
#pragma once

#include <boost/json.hpp>

#include <cmath>
#include <string_view>

namespace pstrain::testing::json_fields {

inline double num(const boost::json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  return v != nullptr && v->is_number() ? v->to_number<double>() : std::nan("");
}

// A copy: `o` may be a temporary.
inline boost::json::array arr(const boost::json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  return v != nullptr && v->is_array() ? v->as_array() : boost::json::array();
}

}  // namespace pstrain::testing::json_fields
