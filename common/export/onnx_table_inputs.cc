// The ONNX graph's inputs for a table model (onnx_graph.h table_features): each raw column through
// its fitted steps, as preprocessing.h applies them, concatenated in column order.
#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/data/id_hash.h"
#include "common/data/preprocessing.h"
#include "common/export/onnx_graph.h"

namespace pstrain::onnx_detail {
namespace {

// An ai.onnx.ml LabelEncoder node from `input` to `output` and its key and value attributes, named
// and typed, empty for the caller to fill.
struct Encoder {
  onnx::NodeProto* node;
  onnx::AttributeProto* keys;
  onnx::AttributeProto* values;
};
Encoder label_encoder(GraphBuilder& g, const std::string& input, const std::string& output, const char* keys_name,
                      onnx::AttributeProto::AttributeType keys_type, const char* values_name,
                      onnx::AttributeProto::AttributeType values_type) {
  onnx::NodeProto& node = g.node("LabelEncoder", {input}, output);
  node.set_domain("ai.onnx.ml");
  onnx::AttributeProto* keys = node.add_attribute();
  keys->set_name(keys_name);
  keys->set_type(keys_type);
  onnx::AttributeProto* values = node.add_attribute();
  values->set_name(values_name);
  values->set_type(values_type);
  return {&node, keys, values};
}

// A looked-up id column's int64 fingerprint input -> its slot as a float (ai.onnx.ml LabelEncoder,
// int64 keys to float values, the vocabulary's size by default).
std::string vocabulary_slot(GraphBuilder& g, const FittedColumn& f) {
  const std::string slot = g.fresh("slot_float");
  const auto [encoder, keys, values] = label_encoder(g, f.name, slot, "keys_int64s", onnx::AttributeProto::INTS, "values_floats",
                                                     onnx::AttributeProto::FLOATS);
  // (An empty vocabulary still needs a key: the missing id's fingerprint, which no kept id has.)
  if (f.vocabulary.empty()) {
    keys->add_ints(static_cast<int64_t>(kMissingIdFingerprint));
    values->add_floats(0.0f);
  }
  for (size_t s = 0; s < f.vocabulary.size(); ++s) {
    keys->add_ints(static_cast<int64_t>(f.vocabulary[s]));
    values->add_floats(static_cast<float>(s));
  }
  GraphBuilder::real(*encoder, "default_float", static_cast<float>(f.vocabulary.size()));
  return slot;
}

// An int64 fingerprint input's bin among `bins`, as a float feature.
std::string bin_feature(GraphBuilder& g, const std::string& input, uint32_t bins) {
  const std::string bin = g.op("Mod", {input, g.int64s("bins", {static_cast<int64_t>(bins)})}, "bin");
  const std::string as_float = g.fresh("bin_float");
  GraphBuilder::integer(g.node("Cast", {bin}, as_float), "to", onnx::TensorProto::FLOAT);
  return as_float;
}

}  // namespace

// The table's raw columns through the fitted steps (preprocessing.h apply_column), concatenated
// in column order: the features the model was trained on.
std::string table_features(GraphBuilder& g, const FittedPreprocessing& fitted) {
  std::vector<std::string> parts;
  for (const FittedColumn& f : fitted.columns) {
    if (f.dropped) continue;
    if (f.values > 0) {  // the pieces' fingerprints, -1 for padding: their bins, -1 kept
      const std::string none = g.int64s("padding", {-1});
      const std::string padded = g.op("Less", {f.name, g.int64s("zero_id", {0})}, "padded");
      const std::string bins = g.op("Where", {padded, none, g.op("Mod", {f.name, g.int64s("bins", {static_cast<int64_t>(f.bins)})})}, "bins");
      const std::string as_float = g.fresh("bins_float");
      GraphBuilder::integer(g.node("Cast", {bins}, as_float), "to", onnx::TensorProto::FLOAT);
      parts.push_back(as_float);
      if (f.indicator) {  // no ids: the first place is padding
        const std::string first = g.op("Slice", {padded, g.int64s("starts", {0}), g.int64s("ends", {1}), g.int64s("axes", {1})}, "first");
        const std::string indicator = g.fresh("indicator");
        GraphBuilder::integer(g.node("Cast", {first}, indicator), "to", onnx::TensorProto::FLOAT);
        parts.push_back(indicator);
      }
      continue;
    }
    // The input is the value's fingerprint (pstrain.ids.fingerprint): its bin when hashed; a
    // looked-up id's slot, the vocabulary's size for others.
    if (f.bins > 0 || f.type == ColumnType::kId) {
      parts.push_back(f.bins > 0 ? bin_feature(g, f.name, f.bins) : vocabulary_slot(g, f));
      if (f.indicator) {
        const std::string missing = g.op("Equal", {f.name, g.int64s("missing_fingerprint", {kMissingIdFingerprint})}, "missing");
        const std::string indicator = g.fresh("indicator");
        GraphBuilder::integer(g.node("Cast", {missing}, indicator), "to", onnx::TensorProto::FLOAT);
        parts.push_back(indicator);
      }
      continue;
    }
    if (f.type != ColumnType::kCategorical) {
      const std::string missing = g.op("IsNaN", {f.name}, "missing");
      const std::string filled = g.op("Where", {missing, g.floats("fill", {}, {f.fill}), f.name}, "filled");
      parts.push_back(g.op("Mul", {g.op("Sub", {filled, g.floats("offset", {}, {f.offset})}), g.floats("scale", {}, {f.scale})},
                            "scaled"));
      if (f.indicator) {
        const std::string indicator = g.fresh("indicator");
        GraphBuilder::integer(g.node("Cast", {missing}, indicator), "to", onnx::TensorProto::FLOAT);
        parts.push_back(indicator);
      }
      continue;
    }
    // The kept categories -> their slots, the missing spellings -> k + 1, anything else -> k (other).
    const auto k = static_cast<int64_t>(f.categories.size());
    const std::string code = g.fresh("code");
    const auto [encoder, keys, values] = label_encoder(g, f.name, code, "keys_strings", onnx::AttributeProto::STRINGS, "values_int64s",
                                                       onnx::AttributeProto::INTS);
    for (int64_t s = 0; s < k; ++s) {
      keys->add_strings(f.categories[static_cast<size_t>(s)]);
      values->add_ints(s);
    }
    for (const char* m : {"", "NA", "N/A", "NaN", "nan", "null", "NULL", "?"}) {
      keys->add_strings(m);
      values->add_ints(k + 1);
    }
    GraphBuilder::integer(*encoder, "default_int64", k);
    const std::string missing = g.op("Equal", {code, g.int64s("missing_code", {k + 1})}, "missing");
    const std::string slot = g.op("Where", {missing, g.int64s("fill_slot", {f.fill_category}), code}, "slot");
    const std::string as_float = g.fresh("slot_float");
    if (f.ids) {
      GraphBuilder::integer(g.node("Cast", {slot}, as_float), "to", onnx::TensorProto::FLOAT);
      parts.push_back(as_float);
    } else {
      std::vector<int64_t> slots(static_cast<size_t>(k + 1));
      for (int64_t s = 0; s <= k; ++s) slots[static_cast<size_t>(s)] = s;
      const std::string hot = g.op("Equal", {slot, g.int64s("slots", slots)}, "one_hot");
      GraphBuilder::integer(g.node("Cast", {hot}, as_float), "to", onnx::TensorProto::FLOAT);
      parts.push_back(as_float);
    }
    if (f.indicator) {
      const std::string indicator = g.fresh("indicator");
      GraphBuilder::integer(g.node("Cast", {missing}, indicator), "to", onnx::TensorProto::FLOAT);
      parts.push_back(indicator);
    }
  }
  // A cross's input is the crossed columns' fingerprint (pstrain.ids.cross): its bin.
  for (const FittedCross& x : fitted.crosses) parts.push_back(bin_feature(g, x.name, x.bins));
  // A text column's input is its tokenizer's output (as for a text dataset: no standard operator
  // splits and looks up text): int64 token ids, cast to the float features, or the float bag.
  for (const FittedTextColumn& t : fitted.text_columns) {
    if (t.tokenizer->spec.output_mode != TextOutput::kInt) {
      parts.push_back(t.name);
      continue;
    }
    const std::string as_float = g.fresh("tokens_float");
    GraphBuilder::integer(g.node("Cast", {t.name}, as_float), "to", onnx::TensorProto::FLOAT);
    parts.push_back(as_float);
  }
  const std::string features = g.fresh("features");
  GraphBuilder::integer(g.node("Concat", parts, features), "axis", 1);
  return features;
}

}  // namespace pstrain::onnx_detail
