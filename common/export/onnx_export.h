// ONNX export of a model the engine trains (docs/DESIGN-NOTES.md "ONNX export"): the layer graph
// with its parameters as an ONNX ModelProto (opset 13, built with Debian's libonnx protobuf
// classes), computing what the engine's forward pass computes, so any ONNX runtime serves it.
//
//   input          float [N, <input_shape>] (images [N, h, w, c], raw values: the job's 1/255
//                  scaling of uint8 data is in the graph)
//   logits         float [N, outputs] (class losses), the engine's outputs
//   probabilities  float [N, classes]: softmax, or [1 - p, p] from the sigmoid of one logit,
//                  or each label's sigmoid (multi-label)
//   values         float [N, outputs] (regression), instead of logits and probabilities
//
// The engine's activations are [h][w][c] per example; Conv and the pools run in NCHW between
// Transposes placed where the layout changes, so features reach flatten, dense and concatenate
// in the engine's order. Batch norm is exported in its inference form (the moving statistics),
// dropout and augmentation vanish. A model the exporter cannot express exactly is refused with a
// SpecError naming the layer.
//
// A table model (its FittedPreprocessing given) takes the table's raw columns instead of `input`,
// one named input each ([N, 1]; dropped columns have none): numbers and booleans as float (0/1),
// NaN for a missing value; categories as strings, "" (or NA, N/A, NaN, nan, null, NULL, ?) for a
// missing one. The fitted steps run in the graph as preprocessing.h applies them: IsNaN and
// Where (imputation), Sub and Mul (scaling), the missing indicators, and for categories an
// ai.onnx.ml LabelEncoder (opset 2) from the kept names to their slots, any other string to
// "other", then one-hot (Equal against the slots) or the slot as one float (encode "ids").
//
// Thread rules: pure function.
#pragma once

#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/data/preprocessing.h"
#include "common/engine/model_spec.h"

namespace pstrain {

struct OnnxExport {
  const ModelSpec* model = nullptr;
  LossSpec loss;
  std::span<const float> params;  // laid out by make_param_layout(*model)
  float input_scale = 1.0f;       // 1/255 when the dataset's examples are uint8
  const FittedPreprocessing* preprocessing = nullptr;  // a table model's: raw columns in
  std::vector<std::pair<std::string, std::string>> metadata;  // metadata_props
};

inline constexpr int kOnnxOpset = 13;

// The serialized ModelProto. Throws SpecError (path /model/layers/<i>) for what it cannot export.
std::string export_onnx(const OnnxExport& what);

}  // namespace pstrain
