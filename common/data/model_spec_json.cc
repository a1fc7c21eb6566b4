// JSON <-> ModelSpec: the "model" part of a job spec, and a model file's description.
#include <limits>

#include "common/base/error.h"
#include "common/data/spec_reader.h"

namespace pstrain {
namespace spec_json {
namespace {

constexpr int64_t kIntMax = std::numeric_limits<int64_t>::max();
constexpr size_t kMaxLayers = 256;
constexpr size_t kMaxRank = 8;
constexpr int64_t kMaxInputDim = 65536;

Shape read_shape(const json::value& v, const std::string& path, bool allow_wildcard, int64_t max_dim) {
  if (!v.is_array()) throw SpecError(path, "must be an array of positive integers, not " + kind_of(v));
  const auto& a = v.as_array();
  if (a.empty() || a.size() > kMaxRank) throw SpecError(path, "must have 1 to 8 dimensions");
  Shape shape;
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string p = path + "/" + std::to_string(i);
    const auto n = as_integer(a[i]);
    if (allow_wildcard && n && *n == -1) {
      shape.push_back(-1);
      continue;
    }
    shape.push_back(read_int(a[i], p, 1, max_dim));
  }
  return shape;
}

// A size given as one integer (square) or as [height, width].
std::array<int64_t, 2> read_pair(const json::value& v, const std::string& path) {
  if (as_integer(v)) {
    const int64_t n = read_int(v, path, 1, 4096);
    return {n, n};
  }
  if (v.is_array() && v.as_array().size() == 2) {
    return {read_int(v.as_array()[0], path + "/0", 1, 4096), read_int(v.as_array()[1], path + "/1", 1, 4096)};
  }
  throw SpecError(path, "must be a positive integer or an array [height, width]");
}

Activation read_activation(ObjectReader& r) {
  const json::value* v = r.optional("activation");
  if (v == nullptr || v->is_null()) return Activation::kLinear;
  return read_enum<Activation>(*v, r.field_path("activation"),
                               {{"linear", Activation::kLinear},
                                {"relu", Activation::kReLU},
                                {"sigmoid", Activation::kSigmoid},
                                {"tanh", Activation::kTanh},
                                {"softmax", Activation::kSoftmax},
                                {"gelu", Activation::kGelu},
                                {"elu", Activation::kElu},
                                {"leaky_relu", Activation::kLeakyReLU},
                                {"swish", Activation::kSwish},
                                {"silu", Activation::kSwish}});
}

float read_l2(ObjectReader& r) {
  // Keras spells it kernel_regularizer: {"l2": 0.01}; the short form "l2": 0.01 is also accepted.
  float l2 = r.number("l2", 0.0, 1e6, false, 0.0f);
  if (const json::value* reg = r.optional("kernel_regularizer")) {
    ObjectReader rr(*reg, r.field_path("kernel_regularizer"));
    l2 = rr.number("l2", 0.0, 1e6, false, 0.0f);
    rr.finish();
  }
  return l2;
}

std::optional<std::array<int64_t, 2>> read_strides(ObjectReader& r) {
  const json::value* v = r.optional("strides");
  if (v == nullptr) return std::nullopt;
  return read_pair(*v, r.field_path("strides"));
}

// A 1-D window (conv1d kernel_size, strides, dilation_rate; pooling pool_size): an integer or [k],
// kept as the one-row 2-D window {1, k} (model_spec.h as_2d).
std::array<int64_t, 2> read_length(const json::value& v, const std::string& path) {
  if (v.is_array() && v.as_array().size() == 1) return {1, read_int(v.as_array()[0], path + "/0", 1, 4096)};
  if (!as_integer(v)) throw SpecError(path, "must be a positive integer (or an array of one)");
  return {1, read_int(v, path, 1, 4096)};
}

LayerSpec read_layer(const json::value& v, const std::string& path) {
  ObjectReader r(v, path);
  LayerSpec layer;
  layer.type = read_enum<LayerType>(r.required("type"), r.field_path("type"),
                                    {{"dense", LayerType::kDense},
                                     {"conv2d", LayerType::kConv2D},
                                     {"maxpool2d", LayerType::kMaxPool2D},
                                     {"flatten", LayerType::kFlatten},
                                     {"reshape", LayerType::kReshape},
                                     {"relu", LayerType::kReLU},
                                     {"activation", LayerType::kActivation},
                                     {"avgpool2d", LayerType::kAvgPool2D},
                                     {"global_avgpool2d", LayerType::kGlobalAvgPool2D},
                                     {"global_maxpool2d", LayerType::kGlobalMaxPool2D},
                                     {"layer_norm", LayerType::kLayerNorm},
                                     {"add", LayerType::kAdd},
                                     {"concatenate", LayerType::kConcatenate},
                                     {"dot_interaction", LayerType::kDotInteraction},
                                     {"dropout", LayerType::kDropout},
                                     {"batch_norm", LayerType::kBatchNorm},
                                     {"random_flip", LayerType::kRandomFlip},
                                     {"random_crop", LayerType::kRandomCrop},
                                     {"random_translation", LayerType::kRandomTranslation},
                                     {"embedding", LayerType::kEmbedding},
                                     {"slice", LayerType::kSlice},
                                     {"conv1d", LayerType::kConv1D},
                                     {"maxpool1d", LayerType::kMaxPool1D},
                                     {"avgpool1d", LayerType::kAvgPool1D},
                                     {"global_avgpool1d", LayerType::kGlobalAvgPool1D},
                                     {"global_maxpool1d", LayerType::kGlobalMaxPool1D},
                                     {"lstm", LayerType::kLstm},
                                     {"gru", LayerType::kGru},
                                     {"multi_head_attention", LayerType::kMultiHeadAttention},
                                     {"position_embedding", LayerType::kPositionEmbedding}});
  // The graph: names and inputs are checked against each other in model_graph.
  if (const json::value* name = r.optional("name")) layer.name = read_string(*name, r.field_path("name"));
  if (const json::value* inputs = r.optional("inputs")) {
    const std::string p = r.field_path("inputs");
    if (!inputs->is_array()) throw SpecError(p, "must be an array of layer names, not " + kind_of(*inputs));
    if (inputs->as_array().empty() || inputs->as_array().size() > kMaxLayers) {
      throw SpecError(p, "must name 1 to 256 layers");
    }
    for (size_t k = 0; k < inputs->as_array().size(); ++k) {
      layer.inputs.push_back(read_string(inputs->as_array()[k], p + "/" + std::to_string(k)));
    }
  }
  switch (layer.type) {
    case LayerType::kDense:
      layer.units = read_int(r.required("units"), r.field_path("units"), 1, int64_t{1} << 24);
      layer.activation = read_activation(r);
      layer.l2 = read_l2(r);
      break;
    case LayerType::kConv2D: {
      layer.filters = read_int(r.required("filters"), r.field_path("filters"), 1, 65536);
      layer.kernel_size = read_pair(r.required("kernel_size"), r.field_path("kernel_size"));
      layer.activation = read_activation(r);
      layer.l2 = read_l2(r);
      layer.strides = read_strides(r);
      layer.use_bias = r.boolean("use_bias", true);
      if (const json::value* d = r.optional("dilation_rate")) layer.dilation_rate = read_pair(*d, r.field_path("dilation_rate"));
      if (const json::value* p = r.optional("padding")) {
        layer.padding = read_enum<Padding>(*p, r.field_path("padding"),
                                           {{"valid", Padding::kValid}, {"same", Padding::kSame}});
      }
      break;
    }
    case LayerType::kMaxPool2D:
    case LayerType::kAvgPool2D:
      if (const json::value* p = r.optional("pool_size")) layer.pool_size = read_pair(*p, r.field_path("pool_size"));
      layer.strides = read_strides(r);
      break;
    case LayerType::kConv1D: {
      layer.filters = read_int(r.required("filters"), r.field_path("filters"), 1, 65536);
      layer.kernel_size = read_length(r.required("kernel_size"), r.field_path("kernel_size"));
      layer.activation = read_activation(r);
      layer.l2 = read_l2(r);
      if (const json::value* s = r.optional("strides")) layer.strides = read_length(*s, r.field_path("strides"));
      layer.use_bias = r.boolean("use_bias", true);
      if (const json::value* d = r.optional("dilation_rate")) layer.dilation_rate = read_length(*d, r.field_path("dilation_rate"));
      if (const json::value* p = r.optional("padding")) {
        layer.padding = read_enum<Padding>(*p, r.field_path("padding"), {{"valid", Padding::kValid}, {"same", Padding::kSame}});
      }
      break;
    }
    case LayerType::kLstm:
    case LayerType::kGru:
      layer.units = read_int(r.required("units"), r.field_path("units"), 1, 65536);
      layer.return_sequences = r.boolean("return_sequences", false);
      layer.bidirectional = r.boolean("bidirectional", false);
      break;
    case LayerType::kMultiHeadAttention:
      layer.num_heads = read_int(r.required("num_heads"), r.field_path("num_heads"), 1, 1024);
      layer.key_dim = read_int(r.required("key_dim"), r.field_path("key_dim"), 1, 65536);
      layer.value_dim = r.integer("value_dim", 1, 65536, 0);
      layer.use_causal_mask = r.boolean("use_causal_mask", false);
      layer.use_bias = r.boolean("use_bias", true);
      if (const json::value* d = r.optional("dropout")) {
        layer.rate = static_cast<float>(read_number(*d, r.field_path("dropout"), 0.0, 1.0, false));
        if (!(layer.rate < 1.0f)) throw SpecError(r.field_path("dropout"), "must be below 1 (the fraction of weights dropped)");
      }
      break;
    case LayerType::kMaxPool1D:
    case LayerType::kAvgPool1D:
      layer.pool_size = {1, 2};  // Keras' pool_size 2
      if (const json::value* p = r.optional("pool_size")) layer.pool_size = read_length(*p, r.field_path("pool_size"));
      if (const json::value* s = r.optional("strides")) layer.strides = read_length(*s, r.field_path("strides"));
      break;
    case LayerType::kReshape:
      layer.target_shape = read_shape(r.required("target_shape"), r.field_path("target_shape"), true, int64_t{1} << 24);
      break;
    case LayerType::kActivation:
      if (r.optional("activation") == nullptr) throw SpecError(r.field_path("activation"), "is required");
      layer.activation = read_activation(r);
      break;
    case LayerType::kLayerNorm:
    case LayerType::kBatchNorm:
      layer.epsilon = r.number("epsilon", 0.0, 1.0, true, 1e-3f);
      layer.center = r.boolean("center", true);
      layer.scale = r.boolean("scale", true);
      if (layer.type == LayerType::kBatchNorm) {
        layer.momentum = r.number("momentum", 0.0, 1.0, false, 0.99f);
        layer.virtual_batch_size = r.integer("virtual_batch_size", 1, int64_t{1} << 24, 0);
      }
      break;
    case LayerType::kDropout: {
      const std::string p = r.field_path("rate");
      layer.rate = static_cast<float>(read_number(r.required("rate"), p, 0.0, 1.0, false));
      if (!(layer.rate < 1.0f)) throw SpecError(p, "must be below 1 (the fraction of values dropped)");
      break;
    }
    case LayerType::kEmbedding:
      layer.input_dim = read_int(r.required("input_dim"), r.field_path("input_dim"), 1, int64_t{1} << 24);
      layer.output_dim = read_int(r.required("output_dim"), r.field_path("output_dim"), 1, 65536);
      layer.sparse = r.boolean("sparse", layer.input_dim * layer.output_dim > kSparseTableDefault);
      if (const json::value* c = r.optional("combiner")) {
        layer.combiner = read_enum<Combiner>(*c, r.field_path("combiner"),
                                             {{"none", Combiner::kNone}, {"sum", Combiner::kSum}, {"mean", Combiner::kMean}});
      }
      layer.mask_zero = r.boolean("mask_zero", false);
      if (layer.mask_zero && layer.combiner != Combiner::kNone) {
        throw SpecError(r.field_path("mask_zero"), "applies without a combiner (a combiner skips padding, negative ids, itself)");
      }
      break;
    case LayerType::kSlice:
      layer.begin = read_int(r.required("begin"), r.field_path("begin"), 0, int64_t{1} << 24);
      layer.size = read_int(r.required("size"), r.field_path("size"), 1, int64_t{1} << 24);
      break;
    case LayerType::kRandomFlip:
      if (const json::value* m = r.optional("mode")) {
        const int mode = read_enum<int>(*m, r.field_path("mode"),
                                        {{"horizontal", 1}, {"vertical", 2}, {"horizontal_and_vertical", 3}});
        layer.flip_horizontal = (mode & 1) != 0;
        layer.flip_vertical = (mode & 2) != 0;
      }
      break;
    case LayerType::kRandomCrop:
      layer.crop_padding = read_int(r.required("padding"), r.field_path("padding"), 1, 4096);
      break;
    case LayerType::kRandomTranslation:
      layer.height_factor = r.number("height_factor", 0.0, 1.0, false, 0.0f);
      layer.width_factor = r.number("width_factor", 0.0, 1.0, false, 0.0f);
      if (!(layer.height_factor < 1.0f)) throw SpecError(r.field_path("height_factor"), "must be below 1");
      if (!(layer.width_factor < 1.0f)) throw SpecError(r.field_path("width_factor"), "must be below 1");
      break;
    case LayerType::kFlatten:
    case LayerType::kReLU:
    case LayerType::kGlobalAvgPool2D:
    case LayerType::kGlobalMaxPool2D:
    case LayerType::kGlobalAvgPool1D:
    case LayerType::kGlobalMaxPool1D:
    case LayerType::kAdd:
    case LayerType::kConcatenate:
    case LayerType::kPositionEmbedding:
      break;
    case LayerType::kDotInteraction:
      layer.self_interaction = r.boolean("self_interaction", false);
      break;
  }
  r.finish();
  return layer;
}

}  // namespace

ModelSpec read_model_spec(const json::value& v) {
  ObjectReader r(v, "/model");
  ModelSpec model;
  // [features], [steps, channels] or [height, width, channels]; the total is capped by
  // infer_shapes (2^24 values).
  model.input_shape = read_shape(r.required("input_shape"), "/model/input_shape", false, kMaxInputDim);
  if (model.input_shape.empty() || model.input_shape.size() > 3) {
    throw SpecError("/model/input_shape", "must be [features], [steps, channels] or [height, width, channels], not " +
                                              shape_string(model.input_shape));
  }
  model.seed = static_cast<uint64_t>(r.integer("seed", 0, kIntMax, 0));
  const json::value& layers = r.required("layers");
  if (!layers.is_array()) throw SpecError("/model/layers", "must be an array, not " + kind_of(layers));
  if (layers.as_array().size() > kMaxLayers) throw SpecError("/model/layers", "has more than 256 layers");
  for (size_t i = 0; i < layers.as_array().size(); ++i) {
    model.layers.push_back(read_layer(layers.as_array()[i], "/model/layers/" + std::to_string(i)));
  }
  r.finish();
  return model;
}

json::object model_spec_to_object(const ModelSpec& model) {
  json::array layers;
  for (const auto& l : model.layers) {
    json::object o;
    o["type"] = layer_type_name(l.type);
    if (!l.name.empty()) o["name"] = l.name;
    if (!l.inputs.empty()) {
      json::array inputs;
      for (const auto& name : l.inputs) inputs.push_back(json::value(name));
      o["inputs"] = std::move(inputs);
    }
    switch (l.type) {
      case LayerType::kDense:
        o["units"] = l.units;
        break;
      case LayerType::kConv2D:
        o["filters"] = l.filters;
        o["kernel_size"] = json::array{l.kernel_size[0], l.kernel_size[1]};
        if (l.padding != Padding::kValid) o["padding"] = padding_name(l.padding);
        if (!l.use_bias) o["use_bias"] = false;
        if (l.dilation_rate != std::array<int64_t, 2>{1, 1}) {
          o["dilation_rate"] = json::array{l.dilation_rate[0], l.dilation_rate[1]};
        }
        break;
      case LayerType::kMaxPool2D:
      case LayerType::kAvgPool2D:
        if (l.pool_size != LayerSpec{}.pool_size) o["pool_size"] = json::array{l.pool_size[0], l.pool_size[1]};
        break;
      case LayerType::kConv1D:
        o["filters"] = l.filters;
        o["kernel_size"] = l.kernel_size[1];
        if (l.padding != Padding::kValid) o["padding"] = padding_name(l.padding);
        if (!l.use_bias) o["use_bias"] = false;
        if (l.dilation_rate[1] != 1) o["dilation_rate"] = l.dilation_rate[1];
        break;
      case LayerType::kMaxPool1D:
      case LayerType::kAvgPool1D:
        o["pool_size"] = l.pool_size[1];
        break;
      case LayerType::kLstm:
      case LayerType::kGru:
        o["units"] = l.units;
        if (l.return_sequences) o["return_sequences"] = true;
        if (l.bidirectional) o["bidirectional"] = true;
        break;
      case LayerType::kMultiHeadAttention:
        o["num_heads"] = l.num_heads;
        o["key_dim"] = l.key_dim;
        if (l.value_dim > 0) o["value_dim"] = l.value_dim;
        if (l.use_causal_mask) o["use_causal_mask"] = true;
        if (!l.use_bias) o["use_bias"] = false;
        if (l.rate > 0.0f) o["dropout"] = l.rate;
        break;
      case LayerType::kReshape: {
        json::array shape;
        for (auto d : l.target_shape) shape.push_back(d);
        o["target_shape"] = std::move(shape);
        break;
      }
      case LayerType::kDropout:
        o["rate"] = l.rate;
        break;
      case LayerType::kRandomFlip:
        o["mode"] = l.flip_horizontal && l.flip_vertical ? "horizontal_and_vertical"
                    : l.flip_vertical                    ? "vertical"
                                                         : "horizontal";
        break;
      case LayerType::kRandomCrop:
        o["padding"] = l.crop_padding;
        break;
      case LayerType::kDotInteraction:
        if (l.self_interaction) o["self_interaction"] = true;
        break;
      case LayerType::kEmbedding:
        o["input_dim"] = l.input_dim;
        o["output_dim"] = l.output_dim;
        if (l.sparse != (l.input_dim * l.output_dim > kSparseTableDefault)) o["sparse"] = l.sparse;
        if (l.combiner != Combiner::kNone) o["combiner"] = l.combiner == Combiner::kSum ? "sum" : "mean";
        if (l.mask_zero) o["mask_zero"] = true;
        break;
      case LayerType::kSlice:
        o["begin"] = l.begin;
        o["size"] = l.size;
        break;
      case LayerType::kRandomTranslation:
        o["height_factor"] = l.height_factor;
        o["width_factor"] = l.width_factor;
        break;
      case LayerType::kLayerNorm:
      case LayerType::kBatchNorm:
        o["epsilon"] = l.epsilon;
        o["center"] = l.center;
        o["scale"] = l.scale;
        if (l.type == LayerType::kBatchNorm) {
          o["momentum"] = l.momentum;
          if (l.virtual_batch_size > 0) o["virtual_batch_size"] = l.virtual_batch_size;
        }
        break;
      default:
        break;
    }
    if (l.strides && *l.strides != default_strides(l) && is_sequence_layer(l.type)) {
      o["strides"] = (*l.strides)[1];
    } else if (l.strides && *l.strides != default_strides(l)) {
      o["strides"] = json::array{(*l.strides)[0], (*l.strides)[1]};
    }
    const bool convolution = as_2d(l.type) == LayerType::kConv2D;
    if (l.type == LayerType::kDense || convolution || l.type == LayerType::kActivation) {
      o["activation"] = activation_name(l.activation);
    }
    if (l.type == LayerType::kDense || convolution) o["l2"] = l.l2;
    layers.push_back(std::move(o));
  }
  json::array input_shape;
  for (auto d : model.input_shape) input_shape.push_back(d);
  return json::object{{"input_shape", std::move(input_shape)}, {"seed", model.seed}, {"layers", std::move(layers)}};
}

LossSpec read_loss(const json::value& v) {
  // Our names, and Keras' spellings of them.
  const auto type = [](const json::value& name, const std::string& path) {
    return read_enum<LossType>(name, path,
                               {{"sparse_softmax_cross_entropy", LossType::kSparseCategoricalCrossEntropy},
                                {"sparse_categorical_crossentropy", LossType::kSparseCategoricalCrossEntropy},
                                {"categorical_cross_entropy", LossType::kCategoricalCrossEntropy},
                                {"categorical_crossentropy", LossType::kCategoricalCrossEntropy},
                                {"binary_cross_entropy", LossType::kBinaryCrossEntropy},
                                {"binary_crossentropy", LossType::kBinaryCrossEntropy},
                                {"mean_squared_error", LossType::kMeanSquaredError},
                                {"mse", LossType::kMeanSquaredError},
                                {"mean_absolute_error", LossType::kMeanAbsoluteError},
                                {"mae", LossType::kMeanAbsoluteError},
                                {"huber", LossType::kHuber}});
  };
  LossSpec loss;
  if (!v.is_object()) {
    loss.type = type(v, "/loss");
    return loss;
  }
  ObjectReader r(v, "/loss");
  loss.type = type(r.required("type"), "/loss/type");
  if (r.optional("label_smoothing") != nullptr) {
    if (loss.type == LossType::kSparseCategoricalCrossEntropy) {
      throw SpecError("/loss/label_smoothing", "applies to categorical_cross_entropy and binary_cross_entropy only");
    }
    if (is_regression(loss)) {
      throw SpecError("/loss/label_smoothing", "applies to categorical_cross_entropy and binary_cross_entropy only");
    }
    loss.label_smoothing = r.number("label_smoothing", 0.0, 1.0, false, 0.0f);
  }
  if (r.optional("delta") != nullptr) {
    if (loss.type != LossType::kHuber) throw SpecError("/loss/delta", "applies to huber only");
    loss.delta = r.number("delta", 0.0, 1e30, true, 1.0f);
  }
  r.finish();
  return loss;
}

json::value loss_to_value(const LossSpec& loss) {
  if (loss.type == LossType::kHuber) return json::object{{"type", "huber"}, {"delta", loss.delta}};
  if (loss.label_smoothing == 0.0f) return json::value(loss_type_name(loss.type));
  return json::object{{"type", loss_type_name(loss.type)}, {"label_smoothing", loss.label_smoothing}};
}

}  // namespace spec_json

using namespace spec_json;

ModelSpec parse_model_spec(std::string_view json_text) {
  const json::value root = parse_spec_text(json_text, "the model");
  ModelSpec model = read_model_spec(root);
  infer_shapes(model);  // throws SpecError naming the layer that does not fit
  return model;
}

std::string model_spec_to_json(const ModelSpec& model) { return json::serialize(model_spec_to_object(model)); }

}  // namespace pstrain
