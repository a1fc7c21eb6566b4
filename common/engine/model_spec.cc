#include "common/engine/model_spec.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "common/base/error.h"

namespace pstrain {
namespace {

std::string layer_path(size_t i) { return "/model/layers/" + std::to_string(i); }

std::string pair_string(const std::array<int64_t, 2>& p) {
  return "[" + std::to_string(p[0]) + ", " + std::to_string(p[1]) + "]";
}

void check_positive_pair(const std::array<int64_t, 2>& p, const std::string& path) {
  if (p[0] <= 0 || p[1] <= 0) throw SpecError(path, "must be positive integers");
}

bool is_merge(LayerType type) {
  return type == LayerType::kAdd || type == LayerType::kConcatenate || type == LayerType::kDotInteraction;
}

void check_name(const std::string& name, const std::string& path) {
  const bool chars_ok = std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
  if (name.empty() || name.size() > 64 || !chars_ok) {
    throw SpecError(path, "must be 1 to 64 letters, digits, '_' or '-'");
  }
  if (std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    throw SpecError(path, "cannot be all digits: \"" + name + "\" is how an unnamed layer is known");
  }
  if (name == "input") throw SpecError(path, "\"input\" names the model's input");
}

// The output shape of a merge layer from its inputs' shapes.
Shape merge_shape(const LayerSpec& layer, const std::vector<Shape>& ins, const std::string& path) {
  if (layer.type == LayerType::kDotInteraction) {
    // Every input one vector of the same size; out: the dot of each pair (i, j), j < i (j <= i
    // with self_interaction).
    for (const Shape& s : ins) {
      if (num_elements(s) != num_elements(ins[0])) {
        throw SpecError(path + "/inputs", "dot_interaction needs inputs of one size (vectors to dot) but gets " +
                                              shape_string(ins[0]) + " and " + shape_string(s));
      }
    }
    const auto f = static_cast<int64_t>(ins.size());
    return {layer.self_interaction ? f * (f + 1) / 2 : f * (f - 1) / 2};
  }
  Shape out = ins[0];
  for (size_t k = 1; k < ins.size(); ++k) {
    const Shape& s = ins[k];
    if (layer.type == LayerType::kAdd) {
      if (s != ins[0]) {
        throw SpecError(path + "/inputs", "add needs inputs of one shape but gets " + shape_string(ins[0]) + " and " +
                                              shape_string(s));
      }
      continue;
    }
    // concatenate: along the last axis, the other axes equal.
    if (s.size() != out.size() || !std::equal(s.begin(), s.end() - 1, out.begin())) {
      throw SpecError(path + "/inputs", "concatenate joins along the last axis and needs the other axes equal, but "
                                        "gets " + shape_string(ins[0]) + " and " + shape_string(s));
    }
    out.back() += s.back();
  }
  return out;
}

}  // namespace

const char* loss_type_name(LossType type) {
  switch (type) {
    case LossType::kSparseCategoricalCrossEntropy: return "sparse_softmax_cross_entropy";
    case LossType::kCategoricalCrossEntropy: return "categorical_cross_entropy";
    case LossType::kBinaryCrossEntropy: return "binary_cross_entropy";
    case LossType::kMeanSquaredError: return "mean_squared_error";
    case LossType::kMeanAbsoluteError: return "mean_absolute_error";
    case LossType::kHuber: return "huber";
  }
  return "?";
}

int64_t loss_outputs(const LossSpec& loss, uint32_t classes) {
  return loss.type == LossType::kBinaryCrossEntropy ? 1 : static_cast<int64_t>(classes);
}

const char* layer_type_name(LayerType type) {
  switch (type) {
    case LayerType::kDense: return "dense";
    case LayerType::kConv2D: return "conv2d";
    case LayerType::kMaxPool2D: return "maxpool2d";
    case LayerType::kFlatten: return "flatten";
    case LayerType::kReshape: return "reshape";
    case LayerType::kReLU: return "relu";
    case LayerType::kActivation: return "activation";
    case LayerType::kAvgPool2D: return "avgpool2d";
    case LayerType::kGlobalAvgPool2D: return "global_avgpool2d";
    case LayerType::kGlobalMaxPool2D: return "global_maxpool2d";
    case LayerType::kLayerNorm: return "layer_norm";
    case LayerType::kAdd: return "add";
    case LayerType::kConcatenate: return "concatenate";
    case LayerType::kDotInteraction: return "dot_interaction";
    case LayerType::kDropout: return "dropout";
    case LayerType::kBatchNorm: return "batch_norm";
    case LayerType::kRandomFlip: return "random_flip";
    case LayerType::kRandomCrop: return "random_crop";
    case LayerType::kRandomTranslation: return "random_translation";
    case LayerType::kEmbedding: return "embedding";
    case LayerType::kSlice: return "slice";
    case LayerType::kConv1D: return "conv1d";
    case LayerType::kMaxPool1D: return "maxpool1d";
    case LayerType::kAvgPool1D: return "avgpool1d";
    case LayerType::kGlobalAvgPool1D: return "global_avgpool1d";
    case LayerType::kGlobalMaxPool1D: return "global_maxpool1d";
    case LayerType::kLstm: return "lstm";
    case LayerType::kGru: return "gru";
    case LayerType::kMultiHeadAttention: return "multi_head_attention";
    case LayerType::kPositionEmbedding: return "position_embedding";
  }
  return "?";
}

bool takes_sequence_mask(LayerType type) {
  return type == LayerType::kLstm || type == LayerType::kGru || type == LayerType::kGlobalAvgPool1D ||
         type == LayerType::kGlobalMaxPool1D || type == LayerType::kMultiHeadAttention;
}

bool keeps_sequence_mask(const LayerSpec& layer) {
  switch (layer.type) {
    case LayerType::kDense:  // (only a dense over a sequence can get one: flat values carry none)
    case LayerType::kDropout:
    case LayerType::kActivation:
    case LayerType::kReLU:
    case LayerType::kMultiHeadAttention:
    case LayerType::kPositionEmbedding:
    case LayerType::kLayerNorm: return true;
    case LayerType::kLstm:
    case LayerType::kGru: return layer.return_sequences;
    default: return false;
  }
}

std::vector<int> mask_sources(const ModelSpec& spec, const ModelGraph& graph) {
  std::vector<int> source(spec.layers.size(), kNoMaskSource);
  const auto of = [&](int k) { return k == kModelInput ? kNoMaskSource : source[static_cast<size_t>(k)]; };
  for (const size_t i : graph.order) {
    const LayerSpec& l = spec.layers[i];
    if (l.type == LayerType::kEmbedding && l.mask_zero) {
      source[i] = static_cast<int>(i);
    } else if (l.type == LayerType::kAdd) {
      for (const int k : graph.inputs[i]) {
        const int m = of(k);
        if (m == kNoMaskSource) continue;
        if (source[i] != kNoMaskSource && source[i] != m) {
          source[i] = kNoMaskSource;
          break;
        }
        source[i] = m;
      }
    } else if (keeps_sequence_mask(l)) {
      source[i] = of(graph.inputs[i][0]);
    }
  }
  return source;
}

bool is_sequence_layer(LayerType type) { return as_2d(type) != type; }

LayerType as_2d(LayerType type) {
  switch (type) {
    case LayerType::kConv1D: return LayerType::kConv2D;
    case LayerType::kMaxPool1D: return LayerType::kMaxPool2D;
    case LayerType::kAvgPool1D: return LayerType::kAvgPool2D;
    case LayerType::kGlobalAvgPool1D: return LayerType::kGlobalAvgPool2D;
    case LayerType::kGlobalMaxPool1D: return LayerType::kGlobalMaxPool2D;
    default: return type;
  }
}

const char* activation_name(Activation activation) {
  switch (activation) {
    case Activation::kLinear: return "linear";
    case Activation::kReLU: return "relu";
    case Activation::kSigmoid: return "sigmoid";
    case Activation::kTanh: return "tanh";
    case Activation::kSoftmax: return "softmax";
    case Activation::kGelu: return "gelu";
    case Activation::kElu: return "elu";
    case Activation::kLeakyReLU: return "leaky_relu";
    case Activation::kSwish: return "swish";
  }
  return "?";
}

const char* padding_name(Padding padding) { return padding == Padding::kSame ? "same" : "valid"; }

std::array<int64_t, 2> default_strides(const LayerSpec& layer) {
  const LayerType t = as_2d(layer.type);
  return t == LayerType::kMaxPool2D || t == LayerType::kAvgPool2D ? layer.pool_size : std::array<int64_t, 2>{1, 1};
}

std::array<int64_t, 2> layer_strides(const LayerSpec& layer) { return layer.strides.value_or(default_strides(layer)); }

WindowAxis window_axis(int64_t in, int64_t window, int64_t stride, Padding padding) {
  if (padding == Padding::kValid) return {(in - window) / stride + 1, 0};
  const int64_t out = (in + stride - 1) / stride;
  const int64_t pad = std::max<int64_t>((out - 1) * stride + window - in, 0);
  return {out, pad / 2};
}

std::string layer_key(const ModelSpec& spec, size_t i) {
  return spec.layers[i].name.empty() ? std::to_string(i) : spec.layers[i].name;
}

ModelGraph model_graph(const ModelSpec& spec) {
  const size_t n = spec.layers.size();
  std::map<std::string, int> index_of;  // names and the index keys of unnamed layers
  for (size_t i = 0; i < n; ++i) {
    const LayerSpec& l = spec.layers[i];
    if (l.name.empty()) {
      index_of[std::to_string(i)] = static_cast<int>(i);
      continue;
    }
    check_name(l.name, layer_path(i) + "/name");
    if (!index_of.emplace(l.name, static_cast<int>(i)).second) {
      throw SpecError(layer_path(i) + "/name", "\"" + l.name + "\" is already the name of layer " +
                                                   std::to_string(index_of[l.name]));
    }
  }
  ModelGraph g;
  g.inputs.resize(n);
  std::vector<std::vector<size_t>> readers(n);
  for (size_t i = 0; i < n; ++i) {
    const LayerSpec& l = spec.layers[i];
    const std::string path = layer_path(i) + "/inputs";
    if (l.inputs.empty()) {
      g.inputs[i].push_back(i == 0 ? kModelInput : static_cast<int>(i) - 1);
    }
    for (size_t k = 0; k < l.inputs.size(); ++k) {
      const std::string& name = l.inputs[k];
      if (name == "input") {
        g.inputs[i].push_back(kModelInput);
        continue;
      }
      const auto it = index_of.find(name);
      if (it == index_of.end()) {
        throw SpecError(path + "/" + std::to_string(k), "names no layer: \"" + name + "\"");
      }
      g.inputs[i].push_back(it->second);
    }
    const size_t count = g.inputs[i].size();
    if (is_merge(l.type) && count < 2) {
      throw SpecError(path, std::string(layer_type_name(l.type)) + " needs two or more inputs");
    }
    if (!is_merge(l.type) && count != 1) {
      throw SpecError(path, std::string(layer_type_name(l.type)) + " takes one input, not " + std::to_string(count));
    }
    for (int in : g.inputs[i]) {
      if (in != kModelInput) readers[static_cast<size_t>(in)].push_back(i);
    }
  }
  for (size_t i = 0; i + 1 < n; ++i) {
    if (readers[i].empty()) {
      throw SpecError(layer_path(i), "layer \"" + layer_key(spec, i) + "\" feeds no layer; the model's output is "
                                     "the last layer listed");
    }
  }
  // Kahn's algorithm, taking the lowest list index among the layers whose inputs are all done.
  std::vector<size_t> waiting(n);
  std::set<size_t> ready;
  for (size_t i = 0; i < n; ++i) {
    for (int in : g.inputs[i]) waiting[i] += in != kModelInput;
    if (waiting[i] == 0) ready.insert(i);
  }
  while (!ready.empty()) {
    const size_t i = *ready.begin();
    ready.erase(ready.begin());
    g.order.push_back(i);
    for (size_t r : readers[i]) {
      if (--waiting[r] == 0) ready.insert(r);
    }
  }
  if (g.order.size() != n) {
    // Every layer left waits for another one left: walking back through those inputs finds a loop.
    size_t at = 0;
    while (waiting[at] == 0) ++at;
    std::vector<size_t> walk;
    std::vector<int> seen(n, -1);
    while (seen[at] < 0) {
      seen[at] = static_cast<int>(walk.size());
      walk.push_back(at);
      for (int in : g.inputs[at]) {
        if (in != kModelInput && waiting[static_cast<size_t>(in)] > 0) {
          at = static_cast<size_t>(in);
          break;
        }
      }
    }
    // walk[k + 1] feeds walk[k], and `at` feeds walk.back(): the loop in the data's direction.
    std::string loop = "\"" + layer_key(spec, at) + "\"";
    for (size_t k = walk.size(); k-- > static_cast<size_t>(seen[at]);) loop += " -> \"" + layer_key(spec, walk[k]) + "\"";
    throw SpecError(layer_path(at) + "/inputs", "the layers form a cycle: " + loop);
  }
  return g;
}

std::vector<Shape> infer_shapes(const ModelSpec& spec) {
  if (spec.input_shape.empty()) throw SpecError("/model/input_shape", "must be a non-empty array");
  for (size_t d = 0; d < spec.input_shape.size(); ++d) {
    if (spec.input_shape[d] <= 0) {
      throw SpecError("/model/input_shape/" + std::to_string(d), "must be a positive integer");
    }
  }
  if (num_elements(spec.input_shape) > kMaxActivationsPerExample) {
    throw SpecError("/model/input_shape", "describes more than 2^24 values per example");
  }
  if (spec.layers.empty()) throw SpecError("/model/layers", "must contain at least one layer");

  const ModelGraph graph = model_graph(spec);
  std::vector<Shape> shapes(spec.layers.size());
  int64_t parameters = 0, sparse_parameters = 0;
  for (const size_t i : graph.order) {
    const LayerSpec& layer = spec.layers[i];
    const std::string path = layer_path(i);
    std::vector<Shape> ins;
    for (int k : graph.inputs[i]) ins.push_back(k == kModelInput ? spec.input_shape : shapes[static_cast<size_t>(k)]);
    const bool sequence = is_sequence_layer(layer.type);
    if (sequence && ins[0].size() != 2) {
      throw SpecError(path + "/type", std::string(layer_type_name(layer.type)) + " needs a [steps, channels] input but gets " +
                                          shape_string(ins[0]) + (ins[0].size() == 1 ? " (an embedding of a sequence gives one)" : ""));
    }
    const Shape in = sequence ? as_image(ins[0]) : ins[0];  // a sequence as a one-row image
    Shape out;
    switch (as_2d(layer.type)) {
      case LayerType::kDense: {
        // A flat input, or a [steps, channels] sequence: each step through the same kernel (Keras'
        // Dense on a sequence, a transformer's feed-forward).
        if (in.size() != 1 && in.size() != 2) {
          throw SpecError(path + "/type", "dense needs a flat input or a [steps, channels] sequence but gets " +
                                              shape_string(in) + "; add a flatten layer before it");
        }
        if (layer.units <= 0) throw SpecError(path + "/units", "must be a positive integer");
        parameters += in.back() * layer.units + layer.units;
        out = in.size() == 2 ? Shape{in[0], layer.units} : Shape{layer.units};
        break;
      }
      case LayerType::kConv2D: {
        if (in.size() != 3) {
          throw SpecError(path + "/type", "conv2d needs a [height, width, channels] input but gets " +
                                              shape_string(in));
        }
        if (layer.filters <= 0) throw SpecError(path + "/filters", "must be a positive integer");
        const auto [kh, kw] = layer.kernel_size;
        check_positive_pair(layer.kernel_size, path + "/kernel_size");
        const auto [sh, sw] = layer_strides(layer);
        check_positive_pair({sh, sw}, path + "/strides");
        const auto [dh, dw] = layer.dilation_rate;
        check_positive_pair(layer.dilation_rate, path + "/dilation_rate");
        if ((dh > 1 || dw > 1) && (sh > 1 || sw > 1)) {
          throw SpecError(path + "/dilation_rate", "above 1 needs strides of 1 (as in Keras), not " +
                                                       pair_string({sh, sw}));
        }
        const int64_t eh = dilated_extent(kh, dh), ew = dilated_extent(kw, dw);
        // "same" pads the input, so a kernel larger than it still has outputs (as in TensorFlow).
        if (layer.padding == Padding::kValid && (eh > in[0] || ew > in[1])) {
          throw SpecError(path + "/kernel_size", pair_string(layer.kernel_size) +
                                                     (dh > 1 || dw > 1 ? " dilated by " + pair_string(layer.dilation_rate) : "") +
                                                     " does not fit the input " + shape_string(in));
        }
        parameters += kh * kw * in[2] * layer.filters + (layer.use_bias ? layer.filters : 0);
        out = {window_axis(in[0], eh, sh, layer.padding).out, window_axis(in[1], ew, sw, layer.padding).out,
               layer.filters};
        break;
      }
      case LayerType::kMaxPool2D:
      case LayerType::kAvgPool2D: {
        const std::string name = layer_type_name(layer.type);
        if (in.size() != 3) {
          throw SpecError(path + "/type", name + " needs a [height, width, channels] input but gets " +
                                              shape_string(in));
        }
        const auto [ph, pw] = layer.pool_size;
        check_positive_pair(layer.pool_size, path + "/pool_size");
        const auto [sh, sw] = layer_strides(layer);
        check_positive_pair({sh, sw}, path + "/strides");
        if (ph > in[0] || pw > in[1]) {
          throw SpecError(path + "/pool_size", name + "'s " + pair_string(layer.pool_size) +
                                                   " window does not fit the input " + shape_string(in));
        }
        out = {window_axis(in[0], ph, sh, Padding::kValid).out, window_axis(in[1], pw, sw, Padding::kValid).out,
               in[2]};
        break;
      }
      case LayerType::kGlobalAvgPool2D:
      case LayerType::kGlobalMaxPool2D:
        if (in.size() != 3) {
          throw SpecError(path + "/type", std::string(layer_type_name(layer.type)) +
                                              " needs a [height, width, channels] input but gets " + shape_string(in));
        }
        out = {in[2]};
        break;
      case LayerType::kFlatten:
        out = {num_elements(in)};
        break;
      case LayerType::kReshape: {
        if (layer.target_shape.empty()) throw SpecError(path + "/target_shape", "must be a non-empty array");
        int64_t known = 1;
        int wildcard = -1;
        for (size_t d = 0; d < layer.target_shape.size(); ++d) {
          const int64_t v = layer.target_shape[d];
          if (v == -1 && wildcard < 0) {
            wildcard = static_cast<int>(d);
          } else if (v <= 0) {
            throw SpecError(path + "/target_shape/" + std::to_string(d),
                            "must be a positive integer (or -1 once)");
          } else {
            known *= v;
          }
        }
        out = layer.target_shape;
        const int64_t total = num_elements(in);
        if (wildcard >= 0) {
          if (total % known != 0) {
            throw SpecError(path + "/target_shape", "cannot reshape " + shape_string(in) + " into " +
                                                        shape_string(layer.target_shape));
          }
          out[static_cast<size_t>(wildcard)] = total / known;
        }
        if (num_elements(out) != total) {
          throw SpecError(path + "/target_shape", "has " + std::to_string(num_elements(out)) +
                                                      " elements but the input " + shape_string(in) +
                                                      " has " + std::to_string(total));
        }
        break;
      }
      case LayerType::kReLU:
      case LayerType::kActivation:
      case LayerType::kDropout:
        out = in;
        break;
      case LayerType::kRandomFlip:
      case LayerType::kRandomCrop:
      case LayerType::kRandomTranslation:
        if (in.size() != 3) {
          throw SpecError(path + "/type", std::string(layer_type_name(layer.type)) +
                                              " needs a [height, width, channels] input but gets " + shape_string(in));
        }
        if (layer.crop_padding >= std::min(in[0], in[1])) {
          throw SpecError(path + "/padding", "must be smaller than the image's height and width " + shape_string(in));
        }
        out = in;
        break;
      case LayerType::kLayerNorm:
        out = in;
        parameters += (layer.scale ? in.back() : 0) + (layer.center ? in.back() : 0);
        break;
      case LayerType::kEmbedding:
        if (in.size() != 1) {
          throw SpecError(path + "/type", "embedding needs a flat input of ids but gets " + shape_string(in));
        }
        if (layer.input_dim <= 0) throw SpecError(path + "/input_dim", "must be a positive integer");
        if (layer.output_dim <= 0) throw SpecError(path + "/output_dim", "must be a positive integer");
        if (layer.sparse) {
          sparse_id_columns(spec, graph, i);  // throws unless the ids are the input's
          sparse_parameters += layer.input_dim * layer.output_dim;
          if (sparse_parameters > kMaxSparseParameters) {
            throw SpecError(path, "brings the model's sparse tables over 2^32 parameters (16 GiB)");
          }
        } else {
          parameters += layer.input_dim * layer.output_dim;
        }
        out = layer.combiner == Combiner::kNone ? Shape{in[0], layer.output_dim} : Shape{layer.output_dim};
        break;
      case LayerType::kSlice:
        if (in.size() != 1) throw SpecError(path + "/type", "slice needs a flat input of features but gets " + shape_string(in));
        if (layer.begin < 0 || layer.begin >= in[0]) {
          throw SpecError(path + "/begin", "must be a feature of the input " + shape_string(in) + " (0 to " +
                                               std::to_string(in[0] - 1) + ")");
        }
        if (layer.size <= 0 || layer.begin + layer.size > in[0]) {
          throw SpecError(path + "/size", "must be 1 to " + std::to_string(in[0] - layer.begin) + " (the input " +
                                              shape_string(in) + " from feature " + std::to_string(layer.begin) + ")");
        }
        out = {layer.size};
        break;
      case LayerType::kConv1D:  // (as_2d: never here)
      case LayerType::kMaxPool1D:
      case LayerType::kAvgPool1D:
      case LayerType::kGlobalAvgPool1D:
      case LayerType::kGlobalMaxPool1D:
        break;
      case LayerType::kLstm:
      case LayerType::kGru: {
        if (in.size() != 2) {
          throw SpecError(path + "/type", std::string(layer_type_name(layer.type)) + " needs a [steps, channels] input but gets " +
                                              shape_string(in) + (in.size() == 1 ? " (an embedding of a sequence gives one)" : ""));
        }
        if (layer.units <= 0) throw SpecError(path + "/units", "must be a positive integer");
        const int64_t gates = layer.type == LayerType::kLstm ? 4 : 3;
        const int64_t directions = layer.bidirectional ? 2 : 1;
        parameters += directions * ((in[1] + layer.units) * gates * layer.units +
                                    (layer.type == LayerType::kGru ? 2 : 1) * gates * layer.units);
        const int64_t width = directions * layer.units;
        out = layer.return_sequences ? Shape{in[0], width} : Shape{width};
        break;
      }
      case LayerType::kMultiHeadAttention:
      case LayerType::kPositionEmbedding: {
        const std::string name = layer_type_name(layer.type);
        if (in.size() != 2) {
          throw SpecError(path + "/type", name + " needs a [steps, channels] input but gets " + shape_string(in) +
                                              (in.size() == 1 ? " (an embedding of a sequence gives one)" : ""));
        }
        out = in;
        if (layer.type == LayerType::kPositionEmbedding) {
          parameters += in[0] * in[1];
          break;
        }
        if (layer.num_heads <= 0) throw SpecError(path + "/num_heads", "must be a positive integer");
        if (layer.key_dim <= 0) throw SpecError(path + "/key_dim", "must be a positive integer");
        const int64_t heads = layer.num_heads, value_dim = layer.value_dim > 0 ? layer.value_dim : layer.key_dim;
        // Its scores: heads x steps x steps values per example, kept for backward.
        if (heads * in[0] * in[0] > kMaxActivationsPerExample) {
          throw SpecError(path + "/num_heads", std::to_string(heads) + " heads over " + std::to_string(in[0]) +
                                                   " steps score more than 2^24 pairs per example");
        }
        const int64_t bias = layer.use_bias ? 1 : 0;
        parameters += (in[1] + bias) * heads * (2 * layer.key_dim + value_dim) + heads * value_dim * in[1] + bias * in[1];
        break;
      }
      case LayerType::kBatchNorm:
        out = in;
        parameters += (layer.scale ? in.back() : 0) + (layer.center ? in.back() : 0) + 2 * in.back();
        break;
      case LayerType::kAdd:
      case LayerType::kConcatenate:
      case LayerType::kDotInteraction:
        out = merge_shape(layer, ins, path);
        break;
    }
    if (num_elements(out) > kMaxActivationsPerExample) {
      throw SpecError(path, "outputs " + shape_string(out) + ", more than 2^24 values per example");
    }
    if (parameters > kMaxParameters) {
      throw SpecError(path, "brings the model over 2^28 parameters (1 GiB)");
    }
    if (sequence && out.size() == 3) out = {out[1], out[2]};
    shapes[i] = std::move(out);
  }
  return shapes;
}

IdColumns sparse_id_columns(const ModelSpec& spec, const ModelGraph& graph, size_t layer) {
  IdColumns columns;
  int k = graph.inputs[layer][0];
  int64_t begin = 0;
  std::optional<int64_t> size;
  // Up the chain: slices narrow the range, flatten and reshape only relabel it.
  while (k != kModelInput) {
    const LayerSpec& l = spec.layers[static_cast<size_t>(k)];
    if (l.type == LayerType::kSlice) {
      begin += l.begin;
      if (!size) size = l.size;
    } else if (l.type != LayerType::kFlatten && l.type != LayerType::kReshape) {
      throw SpecError(layer_path(layer) + "/sparse",
                      "a sparse embedding reads its ids from the model's input or a slice of it; it reads layer " +
                          std::to_string(k) + " (" + layer_type_name(l.type) + ")");
    }
    k = graph.inputs[static_cast<size_t>(k)][0];
  }
  columns.begin = begin;
  columns.size = size ? *size : num_elements(spec.input_shape);
  return columns;
}

}  // namespace pstrain
