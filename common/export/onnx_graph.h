// Internal to common/export: the builder of an ONNX graph that onnx_export.cc and
// onnx_table_inputs.cc share (fresh names, initializers, nodes, attributes), and the table
// model's input part.
//
// Thread rules: a GraphBuilder belongs to the one export that owns its graph.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/engine/model_spec.h"

namespace pstrain {
struct FittedPreprocessing;
}  // namespace pstrain

namespace pstrain::onnx_detail {

class GraphBuilder {
 public:
  explicit GraphBuilder(onnx::GraphProto& graph) : graph_(graph) {}

  // Names of its own start with '/': a table's input columns may be called anything else.
  std::string fresh(const std::string& hint) { return "/" + hint + "_" + std::to_string(next_++); }

  std::string floats(const std::string& hint, const std::vector<int64_t>& dims, const std::vector<float>& data) {
    onnx::TensorProto* t = graph_.add_initializer();
    t->set_name(fresh(hint));
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (const int64_t d : dims) t->add_dims(d);
    for (const float v : data) t->add_float_data(v);
    return t->name();
  }
  std::string int64s(const std::string& hint, const std::vector<int64_t>& data) {
    onnx::TensorProto* t = graph_.add_initializer();
    t->set_name(fresh(hint));
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(static_cast<int64_t>(data.size()));
    for (const int64_t v : data) t->add_int64_data(v);
    return t->name();
  }

  // Adds a node; returns its (first) output's name, `output` if given.
  onnx::NodeProto& node(const std::string& op, const std::vector<std::string>& inputs, const std::string& output) {
    onnx::NodeProto* n = graph_.add_node();
    n->set_op_type(op);
    n->set_name(output + "_" + op);
    for (const std::string& in : inputs) n->add_input(in);
    n->add_output(output);
    return *n;
  }
  std::string op(const std::string& op, const std::vector<std::string>& inputs, const std::string& hint = "v") {
    const std::string out = fresh(hint);
    node(op, inputs, out);
    return out;
  }

  static void ints(onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& values) {
    onnx::AttributeProto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (const int64_t v : values) a->add_ints(v);
  }
  static void integer(onnx::NodeProto& n, const std::string& name, int64_t value) {
    onnx::AttributeProto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(value);
  }
  static void real(onnx::NodeProto& n, const std::string& name, float value) {
    onnx::AttributeProto* a = n.add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(value);
  }

 private:
  onnx::GraphProto& graph_;
  int next_ = 0;
};

// The table's raw columns (one graph input each, named as the column) through the fitted steps,
// concatenated in column order: the name of the [N, fitted.width()] float features the model
// was trained on.
std::string table_features(GraphBuilder& g, const FittedPreprocessing& fitted);

// The sequence layers (onnx_sequence.cc), over `input` [N, steps, channels] (the layer's
// tensors by name from `tensor`). `mask`: a float [N, steps] of kept steps (sequence_mask of an
// embedding's ids under mask_zero), or empty for none.
struct SequenceLayer {
  const LayerSpec& layer;
  std::string prefix;  // "layers.<key>."
  std::function<std::vector<float>(const std::string&)> tensor;
  std::string input;
  int64_t steps = 0, channels = 0;
};
// 1 where an id is not 0.
std::string sequence_mask(GraphBuilder& g, const std::string& ids);
// ONNX's LSTM (gates i, o, f, c: Keras' i, f, c, o reordered; one bias row of zeros for the
// recurrent side) or GRU (z, r, h as Keras, linear_before_reset: Keras' reset_after) over
// [steps, batch, channels]; out [N, steps, directions x units] or [N, directions x units]. A mask
// becomes sequence_lens (the kept steps' count): the engine's mask when the padding trails, as
// the tokenizer's does (padding inside a sequence is not expressible in ONNX's RNNs).
std::string recurrent(GraphBuilder& g, const SequenceLayer& s, const std::string& mask);
// Self-attention as MatMuls: projections split into heads, softmax over the allowed keys, the
// heads' contexts joined and projected back; [N, steps, channels].
std::string attention(GraphBuilder& g, const SequenceLayer& s, const std::string& mask);
// The average or maximum over the kept steps ([N, channels]; zeros where no step is kept).
std::string masked_global_pool(GraphBuilder& g, const std::string& input, bool average, const std::string& mask);

}  // namespace pstrain::onnx_detail
