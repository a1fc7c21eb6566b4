// The sequence layers' ONNX (onnx_graph.h's sequence part): recurrent layers, self-attention and
// masked global pools over [N, steps, channels], with an embedding's mask_zero as a float [N, steps]
// of kept steps.
#include <cmath>
#include <limits>

#include "common/export/onnx_graph.h"

namespace pstrain::onnx_detail {

std::string sequence_mask(GraphBuilder& g, const std::string& ids) {
  const std::string kept = g.op("Not", {g.op("Equal", {ids, g.floats("zero", {}, {0.0f})})});
  const std::string mask = g.fresh("mask");
  GraphBuilder::integer(g.node("Cast", {kept}, mask), "to", onnx::TensorProto::FLOAT);
  return mask;
}

std::string recurrent(GraphBuilder& g, const SequenceLayer& s, const std::string& mask) {
  const LayerSpec& l = s.layer;
  const int64_t steps = s.steps, channels = s.channels, units = l.units, directions = l.bidirectional ? 2 : 1;
  const bool lstm = l.type == LayerType::kLstm;
  const int64_t gates = (lstm ? 4 : 3) * units;
  const std::vector<int64_t> order = lstm ? std::vector<int64_t>{0, 3, 1, 2} : std::vector<int64_t>{0, 1, 2};
  std::vector<float> w, r, b;
  for (int64_t d = 0; d < directions; ++d) {
    const std::string p = s.prefix + (l.bidirectional ? (d == 0 ? "forward." : "backward.") : "");
    const std::vector<float> kernel = s.tensor(p + "kernel"), recurrent = s.tensor(p + "recurrent_kernel"), bias = s.tensor(p + "bias");
    std::vector<float> recurrent_bias;
    for (const int64_t gate : order) {
      for (int64_t u = 0; u < units; ++u) {
        const int64_t column = gate * units + u;
        for (int64_t c = 0; c < channels; ++c) w.push_back(kernel[static_cast<size_t>(c * gates + column)]);
        for (int64_t j = 0; j < units; ++j) r.push_back(recurrent[static_cast<size_t>(j * gates + column)]);
        b.push_back(bias[static_cast<size_t>(column)]);
        recurrent_bias.push_back(lstm ? 0.0f : bias[static_cast<size_t>(gates + column)]);
      }
    }
    b.insert(b.end(), recurrent_bias.begin(), recurrent_bias.end());
  }
  const std::string time_major = g.fresh("time_major");
  GraphBuilder::ints(g.node("Transpose", {s.input}, time_major), "perm", {1, 0, 2});
  std::vector<std::string> inputs = {time_major, g.floats("W", {directions, gates, channels}, w),
                                     g.floats("R", {directions, gates, units}, r), g.floats("B", {directions, 2 * gates}, b)};
  if (!mask.empty()) {  // the kept steps' count: the engine's mask when the padding trails
    const std::string count = g.fresh("count");
    GraphBuilder::integer(g.node("ReduceSum", {mask, g.int64s("axes", {1})}, count), "keepdims", 0);
    const std::string lengths = g.fresh("sequence_lens");
    GraphBuilder::integer(g.node("Cast", {count}, lengths), "to", onnx::TensorProto::INT32);
    inputs.push_back(lengths);
  }
  const std::string y = g.fresh(lstm ? "lstm" : "gru"), y_last = g.fresh("state");
  onnx::NodeProto& n = g.node(lstm ? "LSTM" : "GRU", inputs, y);
  n.add_output(y_last);
  GraphBuilder::integer(n, "hidden_size", units);
  if (!lstm) GraphBuilder::integer(n, "linear_before_reset", 1);
  onnx::AttributeProto* direction = n.add_attribute();
  direction->set_name("direction");
  direction->set_type(onnx::AttributeProto::STRING);
  direction->set_s(l.bidirectional ? "bidirectional" : "forward");
  const std::string batch_major = g.fresh("batch_major");
  if (l.return_sequences) {  // [steps, directions, batch, units] -> [batch, steps, directions x units]
    GraphBuilder::ints(g.node("Transpose", {y}, batch_major), "perm", {2, 0, 1, 3});
    return g.op("Reshape", {batch_major, g.int64s("shape", {0, steps, directions * units})}, "states");
  }
  GraphBuilder::ints(g.node("Transpose", {y_last}, batch_major), "perm", {1, 0, 2});  // [directions, batch, units]
  return g.op("Reshape", {batch_major, g.int64s("shape", {0, directions * units})}, "state");
}

std::string attention(GraphBuilder& g, const SequenceLayer& s, const std::string& mask) {
  const LayerSpec& l = s.layer;
  const int64_t steps = s.steps, channels = s.channels, heads = l.num_heads, key_dim = l.key_dim;
  const int64_t value_dim = l.value_dim > 0 ? l.value_dim : key_dim;
  const auto heads_of = [&](const std::string& part, int64_t width, std::vector<int64_t> perm) {
    std::string y = g.op("MatMul", {s.input, g.floats(part + "_kernel", {channels, heads * width}, s.tensor(s.prefix + part + ".kernel"))});
    if (l.use_bias) y = g.op("Add", {y, g.floats(part + "_bias", {heads * width}, s.tensor(s.prefix + part + ".bias"))});
    const std::string split = g.op("Reshape", {y, g.int64s("shape", {0, steps, heads, width})}, part);
    const std::string t = g.fresh(part + "_heads");
    GraphBuilder::ints(g.node("Transpose", {split}, t), "perm", perm);
    return t;
  };
  const std::string q = heads_of("query", key_dim, {0, 2, 1, 3});  // [N, H, S, K]
  const std::string k = heads_of("key", key_dim, {0, 2, 3, 1});    // [N, H, K, S]
  const std::string v = heads_of("value", value_dim, {0, 2, 1, 3});
  std::string scores =
      g.op("Mul", {g.op("MatMul", {q, k}), g.floats("scale", {}, {1.0f / std::sqrt(static_cast<float>(key_dim))})}, "scores");
  // The allowed pairs ([S, S] causal, [N, 1, S, S] with a mask) get 0 added, the others -1e9: a
  // weight exactly 0 in float32, as the engine's; a query with no allowed key multiplied to 0.
  std::string allowed;
  if (l.use_causal_mask) {
    std::vector<float> below(static_cast<size_t>(steps * steps), 0.0f);
    for (int64_t row = 0; row < steps; ++row) {
      for (int64_t c = 0; c <= row; ++c) below[static_cast<size_t>(row * steps + c)] = 1.0f;
    }
    allowed = g.floats("causal", {steps, steps}, below);
  }
  if (!mask.empty()) {
    const std::string queries = g.op("Unsqueeze", {mask, g.int64s("axes", {1, 3})});  // [N, 1, S, 1]
    const std::string keys = g.op("Unsqueeze", {mask, g.int64s("axes", {1, 2})});     // [N, 1, 1, S]
    const std::string pairs = g.op("Mul", {queries, keys}, "pairs");
    allowed = allowed.empty() ? pairs : g.op("Mul", {pairs, allowed}, "pairs");
  }
  if (!allowed.empty()) {
    const std::string penalty = g.op("Mul", {g.op("Sub", {allowed, g.floats("one", {}, {1.0f})}), g.floats("big", {}, {1e9f})});
    scores = g.op("Add", {scores, penalty}, "allowed_scores");
  }
  std::string weights = g.fresh("weights");
  GraphBuilder::integer(g.node("Softmax", {scores}, weights), "axis", -1);
  if (!mask.empty()) weights = g.op("Mul", {weights, allowed}, "masked_weights");
  const std::string joined = g.fresh("context");
  GraphBuilder::ints(g.node("Transpose", {g.op("MatMul", {weights, v})}, joined), "perm", {0, 2, 1, 3});
  const std::string context = g.op("Reshape", {joined, g.int64s("shape", {0, steps, heads * value_dim})}, "context");
  std::string y = g.op("MatMul", {context, g.floats("output_kernel", {heads * value_dim, channels},
                                                    s.tensor(s.prefix + "attention_output.kernel"))});
  if (l.use_bias) {
    y = g.op("Add", {y, g.floats("output_bias", {channels}, s.tensor(s.prefix + "attention_output.bias"))}, "attention");
  }
  return y;
}

std::string masked_global_pool(GraphBuilder& g, const std::string& input, bool average, const std::string& mask) {
  const std::string count = g.fresh("count");  // [N, 1]
  GraphBuilder::integer(g.node("ReduceSum", {mask, g.int64s("axes", {1})}, count), "keepdims", 1);
  const std::string kept = g.op("Unsqueeze", {mask, g.int64s("axes", {2})});  // [N, S, 1]
  if (average) {  // over the kept steps; zeros when none is
    const std::string sum = g.fresh("sum");
    GraphBuilder::integer(g.node("ReduceSum", {g.op("Mul", {input, kept}), g.int64s("axes", {1})}, sum), "keepdims", 0);
    return g.op("Div", {sum, g.op("Max", {count, g.floats("one", {}, {1.0f})})}, "masked_average");
  }
  const std::string kept_bool = g.fresh("kept");
  GraphBuilder::integer(g.node("Cast", {kept}, kept_bool), "to", onnx::TensorProto::BOOL);
  const std::string lowest = g.floats("lowest", {}, {std::numeric_limits<float>::lowest()});
  const std::string top = g.fresh("max");
  onnx::NodeProto& n = g.node("ReduceMax", {g.op("Where", {kept_bool, input, lowest})}, top);
  GraphBuilder::ints(n, "axes", {1});
  GraphBuilder::integer(n, "keepdims", 0);
  const std::string any = g.op("Greater", {count, g.floats("zero", {}, {0.0f})});
  return g.op("Where", {any, top, g.floats("zero", {}, {0.0f})}, "masked_max");
}

}  // namespace pstrain::onnx_detail
