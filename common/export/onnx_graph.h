// Internal to common/export: the builder of an ONNX graph that onnx_export.cc and
// onnx_table_inputs.cc share (fresh names, initializers, nodes, attributes), and the table
// model's input part.
//
// Thread rules: a GraphBuilder belongs to the one export that owns its graph.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>
#include <vector>

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

}  // namespace pstrain::onnx_detail
