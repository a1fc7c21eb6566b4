#include "coordinator/models/predict_instances.h"

#include <boost/json.hpp>

#include <cstdint>

#include "common/base/error.h"
#include "common/data/image_decode.h"

namespace pstrain::predict_instances {
namespace json = boost::json;

bool is_record(const FittedPreprocessing& fitted, const json::value& v) {
  const bool object = v.is_object() && !v.as_object().contains("b64");
  return fitted.text ? object || v.is_string() : object || v.is_array();
}

std::string preprocess_record(const FittedPreprocessing& fitted, const json::value& v, float* out) {
  json::object row;
  if (fitted.text && v.is_string()) {
    row["text"] = v;
  } else if (v.is_array()) {  // a table's row: its columns in order
    const std::vector<FittedColumn>& columns = fitted.columns;
    if (v.as_array().size() != columns.size()) {
      return "a row of the model's table has " + std::to_string(columns.size()) + " values (its columns in order), not " +
             std::to_string(v.as_array().size()) + "; or send a record by field name";
    }
    for (size_t k = 0; k < columns.size(); ++k) row[columns[k].name] = v.as_array()[k];
  }
  try {
    apply_preprocessing(fitted, v.is_object() ? v.as_object() : row, out);
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

std::optional<std::vector<uint8_t>> encoded_image(std::string_view bytes, const Shape& shape, Dtype stored, std::string& why) {
  const std::span<const uint8_t> data(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  if (image_format(data).empty()) return std::nullopt;
  if (stored != Dtype::kUint8 || shape.size() != 3 || (shape[2] != 1 && shape[2] != 3 && shape[2] != 4)) {
    why = "b64 holds a PNG or JPEG image, and this model's input " + shape_string(shape) +
          " is not an image of 8-bit pixels (height, width and 1, 3 or 4 channels)";
    return std::nullopt;
  }
  const ColorMode mode = shape[2] == 1 ? ColorMode::kGrayscale : shape[2] == 3 ? ColorMode::kRgb : ColorMode::kRgba;
  try {
    Image image = decode_image(data, mode, "the image");
    const auto height = static_cast<uint32_t>(shape[0]), width = static_cast<uint32_t>(shape[1]);
    if (image.height != height || image.width != width) image = resize_bilinear(image, height, width);
    return std::move(image.pixels);
  } catch (const DataError& e) {
    why = std::string("b64 holds a PNG or JPEG signature but does not decode: ") + e.what();
    return std::nullopt;
  }
}

std::optional<std::string> base64_decode(std::string_view in) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (in.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(in.size() / 4 * 3);
  for (size_t i = 0; i < in.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = in[i + static_cast<size_t>(k)];
      if (c == '=' && i + 4 == in.size() && k >= 2) {
        v[k] = 0;
        ++pad;
        continue;
      }
      if (pad > 0 || (v[k] = value(c)) < 0) return std::nullopt;
    }
    const uint32_t n = (static_cast<uint32_t>(v[0]) << 18) | (static_cast<uint32_t>(v[1]) << 12) |
                       (static_cast<uint32_t>(v[2]) << 6) | static_cast<uint32_t>(v[3]);
    out += static_cast<char>(n >> 16);
    if (pad < 2) out += static_cast<char>((n >> 8) & 0xff);
    if (pad < 1) out += static_cast<char>(n & 0xff);
  }
  return out;
}

std::string flatten(const json::value& v, const Shape& shape, size_t dim, const ValueRule& rule, std::vector<float>& out) {
  if (dim == shape.size()) {
    const size_t index = out.size() - rule.first;
    if (!v.is_number()) return "value " + std::to_string(index) + " is not a number";
    float x = 0;
    if (std::string why = engine_value(rule.stored, rule.form, v.to_number<double>(), &x); !why.empty()) {
      return "value " + std::to_string(index) + ": " + why;
    }
    out.push_back(x);
    return "";
  }
  if (!v.is_array()) return "expected an array at depth " + std::to_string(dim);
  const auto& a = v.as_array();
  if (static_cast<int64_t>(a.size()) != shape[dim]) {
    return "dimension " + std::to_string(dim) + " has " + std::to_string(a.size()) + " entries, the model's input " +
           shape_string(shape) + " needs " + std::to_string(shape[dim]);
  }
  for (const auto& e : a) {
    if (std::string why = flatten(e, shape, dim + 1, rule, out); !why.empty()) return why;
  }
  return "";
}

}  // namespace pstrain::predict_instances
