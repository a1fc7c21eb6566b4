// One input convention for every way a model is asked for predictions (REST `:predict`, the
// Python client, `pstrain-train --predict`, the ONNX export): a model takes its inputs as its
// dataset stores them, and scales them inside, as training did (common/data/dataset.h gather()).
// For a dataset of uint8 examples (images) that is the raw pixel values 0-255, which the model
// multiplies by 1/255; for float32 examples, the values as they are; for a table, raw records
// (its fitted preprocessing runs inside: common/data/preprocessing.h).
//
// The old form (values already scaled, pixel / 255) is refused unless asked for by name
// (InputForm::kScaled, REST "input_form": "scaled"): a raw value of a uint8 model must be an
// integer in [0, 255], so scaled values are caught with an error that says what to send.
// docs/REST.md ("One input convention") has the rules as users see them.
//
// A model file names its dataset's dtype in its metadata under kInputDtypeKey (written with every
// model and checkpoint file since this convention; older files fall back to their dataset's
// catalog entry, or float32).
//
// Thread rules: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/data/example_types.h"

namespace pstrain {

// How the values sent to a model are read.
enum class InputForm : uint8_t {
  kRaw,     // as the dataset stores them (the default)
  kScaled,  // already scaled as the engine sees them (uint8 datasets: pixel / 255)
};

inline constexpr std::string_view kInputDtypeKey = "input_dtype";

// The factor training applies to a stored value of `stored` (1/255 for uint8, 1 for float32).
inline constexpr float input_scale(Dtype stored) { return stored == Dtype::kUint8 ? 1.0f / 255.0f : 1.0f; }

// "uint8" or "float32" (dtype_name's inverse); nullopt for anything else.
std::optional<Dtype> dtype_from_name(std::string_view name);

// The value the engine sees for one value `sent` in `form` to a model whose dataset stores
// `stored`, in *out; or an error text ("" when fine) saying what this model takes. `sent` must be
// finite; raw values of a uint8 model must be integers in [0, 255]. A raw uint8 value is scaled
// exactly as training scales it (float(v) * (1.0f / 255.0f)).
std::string engine_value(Dtype stored, InputForm form, double sent, float* out);

// A model file of a class-folder dataset names its classes in its metadata under kClassNamesKey
// (a JSON array of strings; a table model's are in its preprocessing), so that predictions and
// the ONNX export name them.
inline constexpr std::string_view kClassNamesKey = "class_names";
std::string class_names_json(const std::vector<std::string>& names);
// The names of class_names_json's text; empty for anything else.
std::vector<std::string> class_names_from_json(std::string_view text);

}  // namespace pstrain
