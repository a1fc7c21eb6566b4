#include "common/data/model_inputs.h"

#include <cmath>
#include <cstdio>

#include <boost/json.hpp>

namespace pstrain {

std::optional<Dtype> dtype_from_name(std::string_view name) {
  if (name == dtype_name(Dtype::kUint8)) return Dtype::kUint8;
  if (name == dtype_name(Dtype::kFloat32)) return Dtype::kFloat32;
  return std::nullopt;
}

std::string engine_value(Dtype stored, InputForm form, double sent, float* out) {
  const auto value = static_cast<float>(sent);
  if (!std::isfinite(sent) || !std::isfinite(value)) return "a value is not a finite float32";
  if (stored == Dtype::kFloat32 || form == InputForm::kScaled) {
    *out = value;
    return "";
  }
  if (sent < 0 || sent > 255 || sent != std::floor(sent)) {
    char shown[32];
    std::snprintf(shown, sizeof shown, "%.9g", sent);
    return std::string("the value ") + shown +
           " is not a raw pixel value: this model's dataset stores uint8, and inputs are sent as stored "
           "(integers 0-255, or {\"b64\": ...}); the model scales them by 1/255 itself. Values already "
           "scaled (pixel / 255) are taken with \"input_form\": \"scaled\"";
  }
  *out = static_cast<float>(sent) * input_scale(Dtype::kUint8);
  return "";
}

std::string class_names_json(const std::vector<std::string>& names) {
  boost::json::array a;
  for (const std::string& n : names) a.push_back(boost::json::string(n));
  return boost::json::serialize(a);
}

std::vector<std::string> class_names_from_json(std::string_view text) {
  boost::system::error_code ec;
  const boost::json::value v = boost::json::parse(text, ec);
  std::vector<std::string> out;
  if (ec || !v.is_array()) return out;
  for (const auto& n : v.as_array()) {
    if (!n.is_string()) return {};
    out.emplace_back(n.as_string());
  }
  return out;
}

}  // namespace pstrain
