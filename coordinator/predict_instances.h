// The parts of a `:predict` request's instances that are plain text work (coordinator/model_service.cc
// decodes the request with them): `{"b64": ...}` raw bytes and nested arrays of numbers.
//
// Thread rules: pure functions.
#pragma once

#include <boost/json/fwd.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/engine/param_layout.h"

namespace pstrain::predict_instances {

// Standard base64 (RFC 4648, with padding; whitespace not allowed). nullopt if malformed.
std::optional<std::string> base64_decode(std::string_view in);

// Appends the values of a nested-array instance in row-major order, checking each level's length
// against `shape` from `dim` on. Returns an error text ("" when fine).
std::string flatten(const boost::json::value& v, const Shape& shape, size_t dim, std::vector<float>& out);

}  // namespace pstrain::predict_instances
