#include "common/export/onnx_export.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>

#include "common/base/error.h"
#include "common/data/id_hash.h"
#include "common/engine/param_layout.h"
#include "common/export/onnx_graph.h"

namespace pstrain {
namespace {

// A value of the graph: its ONNX name, its shape as the engine sees it (per example, [h][w][c]
// for images) and whether ONNX holds it as NCHW (after a Conv or a pool).
struct Value {
  std::string name;
  Shape shape;
  bool nchw = false;
};

using onnx_detail::GraphBuilder;

class Exporter {
 public:
  Exporter(const OnnxExport& what, onnx::GraphProto& graph)
      : what_(what), spec_(*what.model), layout_(make_param_layout(spec_)), g_(graph) {}

  void build() {
    const std::vector<Shape> shapes = infer_shapes(spec_);
    const ModelGraph graph = model_graph(spec_);
    Value input{"input", spec_.input_shape, false};
    if (what_.preprocessing != nullptr) input = table_features(*what_.preprocessing);
    if (what_.input_scale != 1.0f && what_.preprocessing == nullptr) {
      input.name = g_.op("Mul", {"input", g_.floats("input_scale", {}, {what_.input_scale})}, "scaled");
    }
    const Activation loss_activation =
        what_.loss.type == LossType::kBinaryCrossEntropy ? Activation::kSigmoid : Activation::kSoftmax;
    size_t last_computing = spec_.layers.size() - 1;
    while ((spec_.layers[last_computing].type == LayerType::kFlatten ||
            spec_.layers[last_computing].type == LayerType::kReshape) &&
           graph.inputs[last_computing][0] != kModelInput) {
      last_computing = static_cast<size_t>(graph.inputs[last_computing][0]);
    }
    std::vector<std::optional<Value>> value_of(spec_.layers.size());
    for (const size_t i : graph.order) {
      std::vector<Value> ins;
      for (const int k : graph.inputs[i]) ins.push_back(k == kModelInput ? input : *value_of[static_cast<size_t>(k)]);
      const bool skip_activation = i == last_computing && spec_.layers[i].activation == loss_activation;
      value_of[i] = layer(i, ins, shapes[i], skip_activation);
    }
    outputs(*value_of.back());
  }

 private:
  Value table_features(const FittedPreprocessing& fitted) {
    return {onnx_detail::table_features(g_, fitted), {static_cast<int64_t>(fitted.width())}, false};
  }

  std::string path(size_t i) const { return "/model/layers/" + std::to_string(i); }
  std::string prefix(size_t i) const { return "layers." + layer_key(spec_, i) + "."; }

  std::vector<float> tensor(const std::string& name) const {
    const ParamInfo* p = layout_.find(name);
    if (p == nullptr) throw Error("onnx export: the model has no parameter " + name);
    const auto begin = what_.params.begin() + static_cast<std::ptrdiff_t>(p->offset);
    return std::vector<float>(begin, begin + static_cast<std::ptrdiff_t>(num_elements(p->shape)));
  }

  // The value in the engine's [h][w][c] order, or in NCHW.
  Value nhwc(const Value& v) {
    if (!v.nchw) return v;
    const std::string out = g_.fresh("nhwc");
    GraphBuilder::ints(g_.node("Transpose", {v.name}, out), "perm", {0, 2, 3, 1});
    return {out, v.shape, false};
  }
  Value nchw(const Value& v, size_t i) {
    if (v.nchw) return v;
    if (v.shape.size() != 3) throw SpecError(path(i), "needs a [height, width, channels] input");
    const std::string out = g_.fresh("nchw");
    GraphBuilder::ints(g_.node("Transpose", {v.name}, out), "perm", {0, 3, 1, 2});
    return {out, v.shape, true};
  }
  // A per-channel constant that broadcasts against `v` (channels last, or axis 1 in NCHW).
  std::string channels(const std::string& hint, const std::vector<float>& values, const Value& v) {
    const auto c = static_cast<int64_t>(values.size());
    return v.nchw ? g_.floats(hint, {c, 1, 1}, values) : g_.floats(hint, {c}, values);
  }

  Value activation(Activation a, Value v) {
    switch (a) {
      case Activation::kLinear: return v;
      case Activation::kReLU: v.name = g_.op("Relu", {v.name}, "relu"); return v;
      case Activation::kSigmoid: v.name = g_.op("Sigmoid", {v.name}, "sigmoid"); return v;
      case Activation::kTanh: v.name = g_.op("Tanh", {v.name}, "tanh"); return v;
      case Activation::kSoftmax: {
        const std::string out = g_.fresh("softmax");
        GraphBuilder::integer(g_.node("Softmax", {v.name}, out), "axis", v.nchw ? 1 : -1);
        v.name = out;
        return v;
      }
      case Activation::kGelu: {  // 0.5 x (1 + erf(x / sqrt 2)), the engine's exact form
        const std::string e = g_.op("Erf", {g_.op("Mul", {v.name, g_.floats("rsqrt2", {}, {static_cast<float>(M_SQRT1_2)})})});
        const std::string one = g_.op("Add", {e, g_.floats("one", {}, {1.0f})});
        v.name = g_.op("Mul", {g_.op("Mul", {v.name, one}), g_.floats("half", {}, {0.5f})}, "gelu");
        return v;
      }
      case Activation::kElu: {
        const std::string out = g_.fresh("elu");
        GraphBuilder::real(g_.node("Elu", {v.name}, out), "alpha", 1.0f);
        v.name = out;
        return v;
      }
      case Activation::kLeakyReLU: {
        const std::string out = g_.fresh("leaky_relu");
        GraphBuilder::real(g_.node("LeakyRelu", {v.name}, out), "alpha", 0.2f);
        v.name = out;
        return v;
      }
      case Activation::kSwish: v.name = g_.op("Mul", {v.name, g_.op("Sigmoid", {v.name})}, "swish"); return v;
    }
    return v;
  }

  Value layer(size_t i, const std::vector<Value>& ins, const Shape& given_out, bool skip_activation) {
    if (!is_sequence_layer(spec_.layers[i].type) || given_out.size() != 2) return image_layer(i, ins, given_out, skip_activation);
    // A 1-D layer's sequence out: the one-row image back to [N, T, C] (what the other layers read).
    const Value y = nhwc(image_layer(i, ins, given_out, skip_activation));
    return {g_.op("Reshape", {y.name, g_.int64s("shape", {0, given_out[0], given_out[1]})}, "sequence"), given_out, false};
  }

  Value image_layer(size_t i, const std::vector<Value>& ins, const Shape& given_out, bool skip_activation) {
    const LayerSpec& l = spec_.layers[i];
    const std::string p = prefix(i);
    Value x = ins[0];
    // A 1-D layer: the 2-D one over the sequence as a one-row image ([N, T, C] -> [N, 1, T, C]).
    const bool sequence = is_sequence_layer(l.type);
    if (sequence && x.shape.size() == 2) {
      x = nhwc(x);
      x = {g_.op("Reshape", {x.name, g_.int64s("shape", {0, 1, x.shape[0], x.shape[1]})}, "image"), as_image(x.shape), false};
    }
    const Shape out = sequence && given_out.size() == 2 ? as_image(given_out) : given_out;
    switch (as_2d(l.type)) {
      case LayerType::kDense: {
        x = nhwc(x);
        const std::string w = g_.floats("kernel", {x.shape[0], l.units}, tensor(p + "kernel"));
        const std::string b = g_.floats("bias", {l.units}, tensor(p + "bias"));
        Value y{g_.op("Add", {g_.op("MatMul", {x.name, w}), b}, "dense"), out, false};
        return skip_activation ? y : activation(l.activation, y);
      }
      case LayerType::kConv2D: {
        x = nchw(x, i);
        const auto [kh, kw] = l.kernel_size;
        const int64_t cin = x.shape[2], cout = l.filters;
        // [kh, kw, in, out] -> [out, in, kh, kw]
        const std::vector<float> k = tensor(p + "kernel");
        std::vector<float> w(k.size());
        for (int64_t a = 0; a < kh; ++a)
          for (int64_t b = 0; b < kw; ++b)
            for (int64_t c = 0; c < cin; ++c)
              for (int64_t o = 0; o < cout; ++o) w[((o * cin + c) * kh + a) * kw + b] = k[((a * kw + b) * cin + c) * cout + o];
        std::vector<std::string> inputs{x.name, g_.floats("kernel", {cout, cin, kh, kw}, w)};
        if (l.use_bias) inputs.push_back(g_.floats("bias", {cout}, tensor(p + "bias")));
        const std::string y = g_.fresh("conv");
        onnx::NodeProto& n = g_.node("Conv", inputs, y);
        const auto strides = layer_strides(l);
        const auto [dh, dw] = l.dilation_rate;
        const WindowAxis ah = window_axis(x.shape[0], dilated_extent(kh, dh), strides[0], l.padding);
        const WindowAxis aw = window_axis(x.shape[1], dilated_extent(kw, dw), strides[1], l.padding);
        const auto after = [](const WindowAxis& a, int64_t in, int64_t extent, int64_t stride) {
          return std::max<int64_t>(0, (a.out - 1) * stride + extent - in - a.pad_before);
        };
        GraphBuilder::ints(n, "kernel_shape", {kh, kw});
        GraphBuilder::ints(n, "strides", {strides[0], strides[1]});
        GraphBuilder::ints(n, "dilations", {dh, dw});
        GraphBuilder::ints(n, "pads", {ah.pad_before, aw.pad_before, after(ah, x.shape[0], dilated_extent(kh, dh), strides[0]),
                                       after(aw, x.shape[1], dilated_extent(kw, dw), strides[1])});
        Value v{y, out, true};
        return skip_activation ? v : activation(l.activation, v);
      }
      case LayerType::kMaxPool2D:
      case LayerType::kAvgPool2D: {
        x = nchw(x, i);
        const std::string y = g_.fresh("pool");
        onnx::NodeProto& n = g_.node(as_2d(l.type) == LayerType::kMaxPool2D ? "MaxPool" : "AveragePool", {x.name}, y);
        const auto strides = layer_strides(l);
        GraphBuilder::ints(n, "kernel_shape", {l.pool_size[0], l.pool_size[1]});
        GraphBuilder::ints(n, "strides", {strides[0], strides[1]});
        return {y, out, true};
      }
      case LayerType::kGlobalAvgPool2D:
      case LayerType::kGlobalMaxPool2D: {
        x = nchw(x, i);
        const std::string pooled = g_.op(as_2d(l.type) == LayerType::kGlobalAvgPool2D ? "GlobalAveragePool" : "GlobalMaxPool", {x.name});
        const std::string y = g_.fresh("global");
        GraphBuilder::integer(g_.node("Flatten", {pooled}, y), "axis", 1);
        return {y, out, false};
      }
      case LayerType::kFlatten:
      case LayerType::kReshape: {
        x = nhwc(x);
        std::vector<int64_t> shape{0};
        for (const int64_t d : out) shape.push_back(d);
        return {g_.op("Reshape", {x.name, g_.int64s("shape", shape)}, "reshape"), out, false};
      }
      case LayerType::kReLU: x.name = g_.op("Relu", {x.name}, "relu"); x.shape = out; return x;
      case LayerType::kActivation: return skip_activation ? x : activation(l.activation, x);
      case LayerType::kDropout:
      case LayerType::kRandomFlip:
      case LayerType::kRandomCrop:
      case LayerType::kRandomTranslation: return x;  // inference: the identity
      case LayerType::kBatchNorm: {
        // y = x * s + t, s = gamma / sqrt(var + eps), t = beta - mean * s (in double, then float32).
        const int64_t c = x.shape.back();
        const std::vector<float> mean = tensor(p + "moving_mean"), var = tensor(p + "moving_variance");
        const std::vector<float> gamma = l.scale ? tensor(p + "gamma") : std::vector<float>(static_cast<size_t>(c), 1.0f);
        const std::vector<float> beta = l.center ? tensor(p + "beta") : std::vector<float>(static_cast<size_t>(c), 0.0f);
        std::vector<float> s(static_cast<size_t>(c)), t(static_cast<size_t>(c));
        for (size_t k = 0; k < s.size(); ++k) {
          const double scale = static_cast<double>(gamma[k]) / std::sqrt(static_cast<double>(var[k]) + l.epsilon);
          s[k] = static_cast<float>(scale);
          t[k] = static_cast<float>(static_cast<double>(beta[k]) - static_cast<double>(mean[k]) * scale);
        }
        x.name = g_.op("Add", {g_.op("Mul", {x.name, channels("bn_scale", s, x)}), channels("bn_shift", t, x)}, "batch_norm");
        return x;
      }
      case LayerType::kLayerNorm: {
        const std::vector<int64_t> axis{x.nchw ? 1 : -1};
        const auto reduce_mean = [&](const std::string& in) {
          const std::string y = g_.fresh("mean");
          onnx::NodeProto& n = g_.node("ReduceMean", {in}, y);
          GraphBuilder::ints(n, "axes", axis);
          GraphBuilder::integer(n, "keepdims", 1);
          return y;
        };
        const std::string centred = g_.op("Sub", {x.name, reduce_mean(x.name)});
        const std::string var = reduce_mean(g_.op("Mul", {centred, centred}));
        const std::string sd = g_.op("Sqrt", {g_.op("Add", {var, g_.floats("eps", {}, {l.epsilon})})});
        std::string y = g_.op("Div", {centred, sd});
        if (l.scale) y = g_.op("Mul", {y, channels("gamma", tensor(p + "gamma"), x)});
        if (l.center) y = g_.op("Add", {y, channels("beta", tensor(p + "beta"), x)});
        x.name = y;
        return x;
      }
      case LayerType::kAdd: {
        const bool all_nchw = std::all_of(ins.begin(), ins.end(), [](const Value& v) { return v.nchw; });
        std::string sum = all_nchw ? ins[0].name : nhwc(ins[0]).name;
        for (size_t k = 1; k < ins.size(); ++k) sum = g_.op("Add", {sum, all_nchw ? ins[k].name : nhwc(ins[k]).name}, "add");
        return {sum, out, all_nchw};
      }
      case LayerType::kConcatenate: {
        const bool all_nchw = std::all_of(ins.begin(), ins.end(), [](const Value& v) { return v.nchw; });
        std::vector<std::string> names;
        for (const Value& v : ins) names.push_back(all_nchw ? v.name : nhwc(v).name);
        const std::string y = g_.fresh("concat");
        GraphBuilder::integer(g_.node("Concat", names, y), "axis", all_nchw ? 1 : -1);
        return {y, out, all_nchw};
      }
      case LayerType::kDotInteraction: {
        // [N, F, D] stacked, times its transpose: [N, F, F]; the lower triangle's pairs gathered.
        const auto f = static_cast<int64_t>(ins.size());
        const int64_t d = num_elements(ins[0].shape);
        std::vector<std::string> rows;
        for (const Value& v : ins) rows.push_back(g_.op("Reshape", {nhwc(v).name, g_.int64s("shape", {0, 1, d})}, "row"));
        const std::string stacked = g_.fresh("stacked");
        GraphBuilder::integer(g_.node("Concat", rows, stacked), "axis", 1);
        const std::string transposed = g_.fresh("transposed");
        GraphBuilder::ints(g_.node("Transpose", {stacked}, transposed), "perm", {0, 2, 1});
        const std::string dots = g_.op("Reshape", {g_.op("MatMul", {stacked, transposed}, "dots"), g_.int64s("shape", {0, f * f})}, "flat_dots");
        std::vector<int64_t> pairs;
        for (int64_t i = 0; i < f; ++i) {
          for (int64_t j = 0; j < (l.self_interaction ? i + 1 : i); ++j) pairs.push_back(i * f + j);
        }
        const std::string y = g_.fresh("interactions");
        GraphBuilder::integer(g_.node("Gather", {dots, g_.int64s("pairs", pairs)}, y), "axis", 1);
        return {y, out, false};
      }
      case LayerType::kEmbedding: {
        const std::string ids = g_.fresh("ids");
        const std::string table = g_.floats("embeddings", {l.input_dim, l.output_dim}, tensor(p + "embeddings"));
        if (l.combiner == Combiner::kNone) {
          GraphBuilder::integer(g_.node("Cast", {x.name}, ids), "to", onnx::TensorProto::INT64);
          return {g_.op("Gather", {table, ids}, "embedding"), out, false};
        }
        // A bag: the rows of the ids at or above 0, summed (mean: over their count, at least 1).
        const std::string zero = g_.floats("zero", {}, {0.0f});
        const std::string present = g_.fresh("present");
        GraphBuilder::integer(g_.node("Cast", {g_.op("GreaterOrEqual", {x.name, zero})}, present), "to",
                              onnx::TensorProto::FLOAT);
        GraphBuilder::integer(g_.node("Cast", {g_.op("Max", {x.name, zero})}, ids), "to", onnx::TensorProto::INT64);
        const std::string rows = g_.op("Gather", {table, ids}, "bag_rows");
        const std::string masked = g_.op("Mul", {rows, g_.op("Unsqueeze", {present, g_.int64s("axes", {2})})});
        std::string y = g_.fresh("bag");
        GraphBuilder::integer(g_.node("ReduceSum", {masked, g_.int64s("axes", {1})}, y), "keepdims", 0);
        if (l.combiner == Combiner::kMean) {
          const std::string count = g_.fresh("count");
          GraphBuilder::integer(g_.node("ReduceSum", {present, g_.int64s("axes", {1})}, count), "keepdims", 1);
          y = g_.op("Div", {y, g_.op("Max", {count, g_.floats("one", {}, {1.0f})})}, "bag_mean");
        }
        return {y, out, false};
      }
      case LayerType::kSlice: {
        const std::string y = g_.op("Slice", {x.name, g_.int64s("starts", {l.begin}), g_.int64s("ends", {l.begin + l.size}),
                                              g_.int64s("axes", {1})},
                                    "slice");
        return {y, out, false};
      }
      case LayerType::kConv1D:  // (as_2d: never here)
      case LayerType::kMaxPool1D:
      case LayerType::kAvgPool1D:
      case LayerType::kGlobalAvgPool1D:
      case LayerType::kGlobalMaxPool1D:
        break;
      case LayerType::kLstm:
      case LayerType::kGru:
        return recurrent(i, x, out);
      case LayerType::kMultiHeadAttention:
        return attention(i, nhwc(x), out);
      case LayerType::kPositionEmbedding:
        x = nhwc(x);
        return {g_.op("Add", {x.name, g_.floats("positions", out, tensor(p + "embeddings"))}, "positioned"), out, false};
    }
    throw SpecError(path(i) + "/type", std::string("cannot be exported to ONNX: ") + layer_type_name(l.type));
  }

  // ONNX's LSTM (gates i, o, f, c: Keras' i, f, c, o reordered; one bias row of zeros for the
  // recurrent side) or GRU (z, r, h as Keras, linear_before_reset: Keras' reset_after) over
  // [steps, batch, channels]; the outputs back to the engine's [batch, steps, directions x units]
  // or [batch, directions x units].
  Value recurrent(size_t i, Value x, const Shape& out) {
    const LayerSpec& l = spec_.layers[i];
    x = nhwc(x);
    const int64_t steps = x.shape[0], channels = x.shape[1], units = l.units, directions = l.bidirectional ? 2 : 1;
    const bool lstm = l.type == LayerType::kLstm;
    const int64_t gates = (lstm ? 4 : 3) * units;
    const std::vector<int64_t> order = lstm ? std::vector<int64_t>{0, 3, 1, 2} : std::vector<int64_t>{0, 1, 2};
    std::vector<float> w, r, b;
    for (int64_t d = 0; d < directions; ++d) {
      const std::string p = prefix(i) + (l.bidirectional ? (d == 0 ? "forward." : "backward.") : "");
      const std::vector<float> kernel = tensor(p + "kernel"), recurrent = tensor(p + "recurrent_kernel"), bias = tensor(p + "bias");
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
    const std::string sequence = g_.op("Reshape", {x.name, g_.int64s("shape", {0, steps, channels})}, "sequence");
    const std::string time_major = g_.fresh("time_major");
    GraphBuilder::ints(g_.node("Transpose", {sequence}, time_major), "perm", {1, 0, 2});
    const std::string y = g_.fresh(lstm ? "lstm" : "gru"), y_last = g_.fresh("state");
    onnx::NodeProto& n = g_.node(lstm ? "LSTM" : "GRU",
                                 {time_major, g_.floats("W", {directions, gates, channels}, w),
                                  g_.floats("R", {directions, gates, units}, r), g_.floats("B", {directions, 2 * gates}, b)},
                                 y);
    n.add_output(y_last);
    GraphBuilder::integer(n, "hidden_size", units);
    if (!lstm) GraphBuilder::integer(n, "linear_before_reset", 1);
    onnx::AttributeProto* direction = n.add_attribute();
    direction->set_name("direction");
    direction->set_type(onnx::AttributeProto::STRING);
    direction->set_s(l.bidirectional ? "bidirectional" : "forward");
    const std::string batch_major = g_.fresh("batch_major");
    if (l.return_sequences) {  // [steps, directions, batch, units] -> [batch, steps, directions x units]
      GraphBuilder::ints(g_.node("Transpose", {y}, batch_major), "perm", {2, 0, 1, 3});
      return {g_.op("Reshape", {batch_major, g_.int64s("shape", {0, steps, directions * units})}, "states"), out, false};
    }
    GraphBuilder::ints(g_.node("Transpose", {y_last}, batch_major), "perm", {1, 0, 2});  // [directions, batch, units]
    return {g_.op("Reshape", {batch_major, g_.int64s("shape", {0, directions * units})}, "state"), out, false};
  }

  // Self-attention over [N, steps, channels] as MatMuls: each projection [N, S, H x width] split
  // into heads [N, H, S, width]; softmax over the keys (the causal mask a constant -1e9 above the
  // diagonal: weights exactly 0, as the engine's); the heads' contexts joined and projected back.
  Value attention(size_t i, const Value& x, const Shape& out) {
    const LayerSpec& l = spec_.layers[i];
    const std::string p = prefix(i);
    const int64_t steps = x.shape[0], channels = x.shape[1], heads = l.num_heads, key_dim = l.key_dim;
    const int64_t value_dim = l.value_dim > 0 ? l.value_dim : key_dim;
    const std::string sequence = g_.op("Reshape", {x.name, g_.int64s("shape", {0, steps, channels})}, "sequence");
    const auto heads_of = [&](const std::string& part, int64_t width, std::vector<int64_t> perm) {
      std::string y = g_.op("MatMul", {sequence, g_.floats(part + "_kernel", {channels, heads * width}, tensor(p + part + ".kernel"))});
      if (l.use_bias) y = g_.op("Add", {y, g_.floats(part + "_bias", {heads * width}, tensor(p + part + ".bias"))});
      const std::string split = g_.op("Reshape", {y, g_.int64s("shape", {0, steps, heads, width})}, part);
      const std::string t = g_.fresh(part + "_heads");
      GraphBuilder::ints(g_.node("Transpose", {split}, t), "perm", perm);
      return t;
    };
    const std::string q = heads_of("query", key_dim, {0, 2, 1, 3});  // [N, H, S, K]
    const std::string k = heads_of("key", key_dim, {0, 2, 3, 1});    // [N, H, K, S]
    const std::string v = heads_of("value", value_dim, {0, 2, 1, 3});
    std::string scores = g_.op("Mul", {g_.op("MatMul", {q, k}), g_.floats("scale", {}, {1.0f / std::sqrt(static_cast<float>(key_dim))})},
                               "scores");
    if (l.use_causal_mask) {
      std::vector<float> above(static_cast<size_t>(steps * steps), 0.0f);
      for (int64_t r = 0; r < steps; ++r) {
        for (int64_t c = r + 1; c < steps; ++c) above[static_cast<size_t>(r * steps + c)] = -1e9f;
      }
      scores = g_.op("Add", {scores, g_.floats("causal", {steps, steps}, above)}, "causal_scores");
    }
    const std::string weights = g_.fresh("weights");
    GraphBuilder::integer(g_.node("Softmax", {scores}, weights), "axis", -1);
    const std::string joined = g_.fresh("context");
    GraphBuilder::ints(g_.node("Transpose", {g_.op("MatMul", {weights, v})}, joined), "perm", {0, 2, 1, 3});
    const std::string context = g_.op("Reshape", {joined, g_.int64s("shape", {0, steps, heads * value_dim})}, "context");
    std::string y = g_.op("MatMul", {context, g_.floats("output_kernel", {heads * value_dim, channels}, tensor(p + "attention_output.kernel"))});
    if (l.use_bias) y = g_.op("Add", {y, g_.floats("output_bias", {channels}, tensor(p + "attention_output.bias"))}, "attention");
    return {y, out, false};
  }

  void outputs(const Value& last) {
    Value v = nhwc(last);
    const int64_t n = num_elements(v.shape);
    std::string flat = v.name;
    if (v.shape.size() != 1) flat = g_.op("Reshape", {v.name, g_.int64s("shape", {0, n})}, "flat");
    const bool regression = is_regression(what_.loss);
    const bool binary = what_.loss.type == LossType::kBinaryCrossEntropy;
    std::vector<std::pair<std::string, int64_t>> named;
    if (regression) {
      g_.node("Identity", {flat}, "values");
      named.emplace_back("values", n);
    } else {
      g_.node("Identity", {flat}, "logits");
      named.emplace_back("logits", n);
      if (binary && n == 1) {
        const std::string p = g_.op("Sigmoid", {flat});
        const std::string q = g_.op("Sub", {g_.floats("one", {}, {1.0f}), p});
        GraphBuilder::integer(g_.node("Concat", {q, p}, "probabilities"), "axis", 1);
        named.emplace_back("probabilities", 2);
      } else if (binary) {
        g_.node("Sigmoid", {flat}, "probabilities");
        named.emplace_back("probabilities", n);
      } else {
        GraphBuilder::integer(g_.node("Softmax", {flat}, "probabilities"), "axis", 1);
        named.emplace_back("probabilities", n);
      }
    }
    for (const auto& [name, width] : named) output_types_.emplace_back(name, width);
  }

 public:
  std::vector<std::pair<std::string, int64_t>> output_types_;

 private:
  const OnnxExport& what_;
  const ModelSpec& spec_;
  const ParamLayout layout_;
  GraphBuilder g_;
};

void set_type(onnx::ValueInfoProto* v, const std::string& name, const std::vector<int64_t>& dims,
              int type = onnx::TensorProto::FLOAT) {
  v->set_name(name);
  onnx::TypeProto_Tensor* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(type);
  onnx::TensorShapeProto* shape = t->mutable_shape();
  shape->add_dim()->set_dim_param("N");
  for (const int64_t d : dims) shape->add_dim()->set_dim_value(d);
}

}  // namespace

std::string export_onnx(const OnnxExport& what) {
  if (what.model == nullptr) throw Error("onnx export: no model");
  for (size_t i = 0; i < what.model->layers.size(); ++i) {
    if (what.model->layers[i].mask_zero) {  // refused rather than exported without its masks
      throw SpecError("/model/layers/" + std::to_string(i) + "/mask_zero",
                      "a masked model is not exported to ONNX by this version (the graph would compute its padding "
                      "steps); :predict serves it");
    }
  }
  if (what.params.size() != make_param_layout(*what.model).total_size()) {
    throw Error("onnx export: " + std::to_string(what.params.size()) + " parameters for a model of " +
                std::to_string(make_param_layout(*what.model).total_size()));
  }
  if (what.preprocessing != nullptr) {
    if (static_cast<int64_t>(what.preprocessing->width()) != num_elements(what.model->input_shape)) {
      throw Error("onnx export: the preprocessing gives " + std::to_string(what.preprocessing->width()) +
                  " features, the model takes " + shape_string(what.model->input_shape));
    }
    const auto reserved = [](const std::string& n) {
      return n == "logits" || n == "probabilities" || n == "values" || n.starts_with("/");
    };
    for (const FittedColumn& c : what.preprocessing->columns) {
      if (!c.dropped && reserved(c.name)) {
        throw SpecError("/preprocessing/columns/" + c.name, "is a name the exported graph uses itself (logits, "
                                                           "probabilities, values, or a leading '/'); rename the column");
      }
    }
    for (const FittedCross& x : what.preprocessing->crosses) {
      const bool taken = std::any_of(what.preprocessing->columns.begin(), what.preprocessing->columns.end(),
                                     [&](const FittedColumn& c) { return !c.dropped && c.name == x.name; });
      if (taken || reserved(x.name)) {
        throw SpecError("/preprocessing/crosses", "'" + x.name + "' is a column's name or one the exported graph uses "
                                                  "itself: name the cross (\"name\") for the graph's input");
      }
    }
  }
  onnx::ModelProto model;
  model.set_ir_version(7);  // the IR of opset 13
  model.set_producer_name("pstrain");
  onnx::OperatorSetIdProto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOnnxOpset);
  for (const auto& [key, value] : what.metadata) {
    onnx::StringStringEntryProto* e = model.add_metadata_props();
    e->set_key(key);
    e->set_value(value);
  }
  onnx::GraphProto* graph = model.mutable_graph();
  graph->set_name("pstrain");
  if (what.preprocessing != nullptr) {
    onnx::OperatorSetIdProto* ml = model.add_opset_import();
    ml->set_domain("ai.onnx.ml");
    ml->set_version(2);  // LabelEncoder with int64 values
    for (const FittedColumn& c : what.preprocessing->columns) {
      if (c.dropped) continue;
      set_type(graph->add_input(), c.name, {c.values > 0 ? static_cast<int64_t>(c.values) : 1},
               c.bins > 0 || c.type == ColumnType::kId ? onnx::TensorProto::INT64
               : c.type == ColumnType::kCategorical ? onnx::TensorProto::STRING
                                                     : onnx::TensorProto::FLOAT);
    }
    for (const FittedCross& x : what.preprocessing->crosses) set_type(graph->add_input(), x.name, {1}, onnx::TensorProto::INT64);
  } else {
    set_type(graph->add_input(), "input", what.model->input_shape);
  }
  Exporter exporter(what, *graph);
  exporter.build();
  for (const auto& [name, width] : exporter.output_types_) set_type(graph->add_output(), name, {width});
  std::string bytes;
  if (!model.SerializeToString(&bytes)) throw Error("onnx export: the model does not serialize");
  return bytes;
}

}  // namespace pstrain
