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
    // Masks (model_spec.h's mask_sources): each masking embedding's kept steps, made once.
    const std::vector<int> sources = mask_sources(spec_, graph);
    std::vector<std::string> masks(spec_.layers.size());
    for (const size_t i : graph.order) {
      std::vector<Value> ins;
      for (const int k : graph.inputs[i]) ins.push_back(k == kModelInput ? input : *value_of[static_cast<size_t>(k)]);
      const int first = graph.inputs[i][0];
      const int source = first == kModelInput ? kNoMaskSource : sources[static_cast<size_t>(first)];
      std::string mask;
      if (source != kNoMaskSource && takes_sequence_mask(spec_.layers[i].type)) {
        const auto e = static_cast<size_t>(source);
        if (masks[e].empty()) {
          const int ids = graph.inputs[e][0];
          masks[e] = onnx_detail::sequence_mask(g_, ids == kModelInput ? input.name : nhwc(*value_of[static_cast<size_t>(ids)]).name);
        }
        mask = masks[e];
      }
      const bool skip_activation = i == last_computing && spec_.layers[i].activation == loss_activation;
      value_of[i] = layer(i, ins, shapes[i], skip_activation, mask);
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

  // mask: the float [N, steps] of the input's kept steps when the layer takes a mask, else empty.
  Value layer(size_t i, const std::vector<Value>& ins, const Shape& given_out, bool skip_activation, const std::string& mask) {
    const LayerType type = spec_.layers[i].type;
    if (!mask.empty() && (type == LayerType::kGlobalAvgPool1D || type == LayerType::kGlobalMaxPool1D)) {
      return {onnx_detail::masked_global_pool(g_, sequence_of(i, ins[0]).input, type == LayerType::kGlobalAvgPool1D, mask), given_out,
              false};
    }
    if (!is_sequence_layer(type) || given_out.size() != 2) return image_layer(i, ins, given_out, skip_activation, mask);
    // A 1-D layer's sequence out: the one-row image back to [N, T, C] (what the other layers read).
    const Value y = nhwc(image_layer(i, ins, given_out, skip_activation, mask));
    return {g_.op("Reshape", {y.name, g_.int64s("shape", {0, given_out[0], given_out[1]})}, "sequence"), given_out, false};
  }

  Value image_layer(size_t i, const std::vector<Value>& ins, const Shape& given_out, bool skip_activation,
                    const std::string& mask) {
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
        // (Over a sequence [N, T, C], MatMul applies the kernel to each step.)
        const std::string w = g_.floats("kernel", {x.shape.back(), l.units}, tensor(p + "kernel"));
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
        // The statistics in double, as the engine sums them (nn/normalization.cc): a float
        // ReduceMean over a wide axis (a bag of 20,000 words) drifts by 1e-4 of a probability.
        const auto cast = [&](const std::string& in, int to, const std::string& hint) {
          const std::string out = g_.fresh(hint);
          GraphBuilder::integer(g_.node("Cast", {in}, out), "to", to);
          return out;
        };
        const std::string wide = cast(x.name, onnx::TensorProto::DOUBLE, "wide");
        const std::string mean = reduce_mean(wide);
        const std::string centred = g_.op("Sub", {wide, mean});
        const std::string var = reduce_mean(g_.op("Mul", {centred, centred}));
        const std::string eps = cast(g_.floats("eps", {}, {l.epsilon}), onnx::TensorProto::DOUBLE, "eps");
        const std::string one = cast(g_.floats("one", {}, {1.0f}), onnx::TensorProto::DOUBLE, "one");
        const std::string rstd = g_.op("Div", {one, g_.op("Sqrt", {g_.op("Add", {var, eps})})});
        std::string y = g_.op("Mul", {g_.op("Sub", {x.name, cast(mean, onnx::TensorProto::FLOAT, "mean")}),
                                      cast(rstd, onnx::TensorProto::FLOAT, "rstd")});
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
        return {onnx_detail::recurrent(g_, sequence_of(i, x), mask), out, false};
      case LayerType::kMultiHeadAttention:
        return {onnx_detail::attention(g_, sequence_of(i, x), mask), out, false};
      case LayerType::kPositionEmbedding:
        x = nhwc(x);
        return {g_.op("Add", {x.name, g_.floats("positions", out, tensor(p + "embeddings"))}, "positioned"), out, false};
    }
    throw SpecError(path(i) + "/type", std::string("cannot be exported to ONNX: ") + layer_type_name(l.type));
  }

  // A [steps, channels] value as [N, steps, channels] for the sequence layers (onnx_graph.h).
  onnx_detail::SequenceLayer sequence_of(size_t i, Value x) {
    x = nhwc(x);
    const std::string input = g_.op("Reshape", {x.name, g_.int64s("shape", {0, x.shape[0], x.shape[1]})}, "sequence");
    return {spec_.layers[i], prefix(i), [this](const std::string& name) { return tensor(name); }, input, x.shape[0], x.shape[1]};
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
    for (const FittedTextColumn& t : what.preprocessing->text_columns) {
      if (reserved(t.name)) {
        throw SpecError("/preprocessing/columns/" + t.name, "is a name the exported graph uses itself (logits, "
                                                           "probabilities, values, or a leading '/'); rename the column");
      }
    }
    for (const FittedCross& x : what.preprocessing->crosses) {
      const bool taken = std::any_of(what.preprocessing->columns.begin(), what.preprocessing->columns.end(),
                                     [&](const FittedColumn& c) { return !c.dropped && c.name == x.name; }) ||
                         std::any_of(what.preprocessing->text_columns.begin(), what.preprocessing->text_columns.end(),
                                     [&](const FittedTextColumn& t) { return t.name == x.name; });
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
    for (const FittedTextColumn& t : what.preprocessing->text_columns) {
      const bool ids = t.tokenizer->spec.output_mode == TextOutput::kInt;
      set_type(graph->add_input(), t.name, {static_cast<int64_t>(t.tokenizer->spec.width())},
               ids ? onnx::TensorProto::INT64 : onnx::TensorProto::FLOAT);
    }
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
