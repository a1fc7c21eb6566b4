// The parts of a `:predict` request's instances that are plain text work (coordinator/models/model_service.cc
// decodes the request with them): `{"b64": ...}` raw bytes or an encoded image, and nested arrays
// of numbers.
//
// Thread rules: pure functions.
#pragma once

#include <boost/json/fwd.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/data/model_inputs.h"
#include "common/data/preprocessing.h"
#include "common/engine/param_layout.h"

namespace pstrain::predict_instances {

// Standard base64 (RFC 4648, with padding; whitespace not allowed). nullopt if malformed.
std::optional<std::string> base64_decode(std::string_view in);

// `{"b64": ...}`'s bytes as an encoded image (PNG or JPEG), for a model whose input is uint8
// {height, width, channels} with 1, 3 or 4 channels: decoded into that many channels and resized
// (bilinear, half-pixel centres) to height x width, as a class-folder upload stored its images
// (common/data/image_folders.h). nullopt when the bytes are not an image that decodes (`why`
// says why when they look like one: a PNG or JPEG signature).
std::optional<std::vector<uint8_t>> encoded_image(std::string_view bytes, const Shape& shape, Dtype stored, std::string& why);

// An instance of a model trained with a fitted preprocessing (common/data/preprocessing.h) that is
// a record: a text model's {"text": "..."} or bare string (an array is the tokenizer's output
// itself), a table model's record by field name or row of its columns in order ({"b64": ...} is
// neither). preprocess_record writes its fitted.width() features into `out`, as training made
// them; it returns an error text ("" when fine).
bool is_record(const FittedPreprocessing& fitted, const boost::json::value& v);
std::string preprocess_record(const FittedPreprocessing& fitted, const boost::json::value& v, float* out);

// How one instance's numbers become the engine's values (common/data/model_inputs.h).
struct ValueRule {
  Dtype stored = Dtype::kFloat32;  // the model's dataset's dtype
  InputForm form = InputForm::kRaw;
  size_t first = 0;  // where the instance starts in `out` (errors name a value by its index in it)
};

// Appends the values of a nested-array instance in row-major order, read by `rule`, checking each
// level's length against `shape` from `dim` on. Returns an error text ("" when fine).
std::string flatten(const boost::json::value& v, const Shape& shape, size_t dim, const ValueRule& rule,
                    std::vector<float>& out);

}  // namespace pstrain::predict_instances
