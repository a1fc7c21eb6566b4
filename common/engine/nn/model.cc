#include "common/engine/nn/model.h"

#include <algorithm>

#include "common/base/error.h"
#include "common/base/rng.h"
#include "common/engine/nn/activations.h"
#include "common/engine/nn/attention.h"
#include "common/engine/nn/augmentation.h"
#include "common/engine/nn/batch_norm.h"
#include "common/engine/nn/embedding.h"
#include "common/engine/nn/slice.h"
#include "common/engine/nn/layers.h"
#include "common/engine/nn/merge.h"
#include "common/engine/nn/normalization.h"
#include "common/engine/nn/recurrent.h"

namespace pstrain::nn {
namespace {

// FNV-1a: a layer's key as a number, the same in every build (std::hash is not).
uint64_t fnv1a(const std::string& text) {
  uint64_t h = 1469598103934665603ULL;
  for (const unsigned char c : text) h = (h ^ c) * 1099511628211ULL;
  return h;
}

}  // namespace

template <typename T>
Model<T>::Model(const ModelSpec& spec, int64_t max_batch, const LossSpec& loss) : loss_(loss), max_batch_(max_batch) {
  const std::vector<Shape> shapes = infer_shapes(spec);
  const ModelGraph graph = model_graph(spec);
  layout_ = make_param_layout(spec);
  input_size_ = num_elements(spec.input_shape);
  const size_t output_layer = spec.layers.size() - 1;
  output_size_ = num_elements(shapes[output_layer]);

  // The layer that computes the model's output (flatten and reshape only relabel): a softmax
  // there (a sigmoid under binary cross-entropy) is the loss's (model_spec.h), so the model's
  // output stays the logits.
  const Activation loss_activation =
      loss.type == LossType::kBinaryCrossEntropy ? Activation::kSigmoid : Activation::kSoftmax;
  size_t last_computing = output_layer;
  while ((spec.layers[last_computing].type == LayerType::kFlatten ||
          spec.layers[last_computing].type == LayerType::kReshape) &&
         graph.inputs[last_computing][0] != kModelInput) {
    last_computing = static_cast<size_t>(graph.inputs[last_computing][0]);
  }
  std::vector<int> value_of(spec.layers.size(), kModelInput);  // the buffer holding each layer's output
  // Each layer's masking embedding (model_spec.h), whose input buffer holds the mask's ids.
  const std::vector<int> sources = mask_sources(spec, graph);
  const auto ids_buffer = [&](size_t embedding) {
    const int k = graph.inputs[embedding][0];
    return k == kModelInput ? kModelInput : value_of[static_cast<size_t>(k)];
  };
  std::vector<int> readers;                                      // by buffer
  std::vector<int> consumers(spec.layers.size(), 0);             // by layer: the layers that read it
  for (const std::vector<int>& in : graph.inputs) {
    for (int k : in) {
      if (k != kModelInput) ++consumers[static_cast<size_t>(k)];
    }
  }
  // Appends a stage computing `layer` (or `merge`) from `inputs` into a new buffer of `out`'s size.
  // `first`: the stage's first parameter tensor (its gradients are final once it ran backward).
  auto add_stage = [&](std::unique_ptr<Layer<T>> layer, std::unique_ptr<Merge<T>> merge, std::vector<int> inputs,
                       int64_t in_size, const Shape& out, const ParamInfo* first, const ParamInfo* kernel,
                       Dense<T>* dense) {
    const int output_buffer = static_cast<int>(activations_.size());
    activations_.emplace_back(num_elements(out), max_batch);
    deltas_.emplace_back(num_elements(out), max_batch);
    readers.push_back(0);
    for (int in : inputs) {
      if (in != kModelInput) ++readers[static_cast<size_t>(in)];
    }
    const size_t first_param = first != nullptr ? first->offset : layout_.total_size();
    const int kernel_param = kernel != nullptr ? static_cast<int>(kernel - layout_.params().data()) : -1;
    stages_.push_back({std::move(layer), std::move(merge), in_size, num_elements(out), std::move(inputs),
                       output_buffer, first_param, kernel_param, dense});
    return output_buffer;
  };
  // A ReLU activation that alone reads a batch_norm's or an add's output runs inside that stage
  // (batch_norm.h, merge.h): true when layer i's ReLU was fused into the stage writing `value`.
  const auto fuse_relu = [&](size_t i, int value) {
    const int j = graph.inputs[i][0];
    if (spec.layers[i].type != LayerType::kActivation || j == kModelInput || consumers[static_cast<size_t>(j)] != 1) {
      return false;
    }
    const LayerType from = spec.layers[static_cast<size_t>(j)].type;
    if (from != LayerType::kBatchNorm && from != LayerType::kAdd) return false;
    for (Stage& s : stages_) {
      if (s.output_buffer != value) continue;
      if (auto* norm = dynamic_cast<BatchNorm<T>*>(s.layer.get()); norm != nullptr) {
        norm->set_relu(true);
        return true;
      }
      if (s.merge) {
        s.merge->set_relu(true);
        return true;
      }
    }
    return false;
  };
  for (const size_t i : graph.order) {
    const LayerSpec& l = spec.layers[i];
    const bool sequence = is_sequence_layer(l.type);  // a 1-D layer: the 2-D one over a one-row image
    const Shape out = sequence && shapes[i].size() == 2 ? as_image(shapes[i]) : shapes[i];
    std::vector<int> inputs;
    std::vector<Shape> in_shapes;
    for (int k : graph.inputs[i]) {
      inputs.push_back(k == kModelInput ? kModelInput : value_of[static_cast<size_t>(k)]);
      in_shapes.push_back(k == kModelInput ? spec.input_shape : shapes[static_cast<size_t>(k)]);
    }
    const Shape in = sequence ? as_image(in_shapes[0]) : in_shapes[0];
    const int64_t in_size = num_elements(in);
    int value = inputs[0];  // flatten and reshape keep their input's buffer: only the shape changes
    std::unique_ptr<Layer<T>> layer;
    Dense<T>* dense = nullptr;
    const std::string prefix = "layers." + layer_key(spec, i) + ".";
    // The buffer of ids whose zeros mask this layer's input (an embedding's input buffer).
    const int in_source = graph.inputs[i][0] == kModelInput ? kNoMaskSource : sources[static_cast<size_t>(graph.inputs[i][0])];
    const bool masked = in_source != kNoMaskSource && takes_sequence_mask(l.type);
    const int in_mask = masked ? ids_buffer(static_cast<size_t>(in_source)) : kNoMask;
    const ParamInfo* kernel = layout_.find(prefix + "kernel");
    const ParamInfo* bias = layout_.find(prefix + "bias");
    const bool relu = l.activation == Activation::kReLU;
    switch (as_2d(l.type)) {
      case LayerType::kDense:
        if (in.size() == 2) {  // over a sequence: a 1 x 1 convolution of the one-row image (kernel [in, units])
          layer = std::make_unique<Conv2D<T>>(
              typename Conv2D<T>::Geometry{1, in[0], in[1], 1, 1, l.units, 1, 1, 0, 0, 1, in[0], 1, 1}, relu, kernel->offset,
              bias->offset, max_batch);
          break;
        }
        // A dense layer that reads the model's input (data) may find whole features zero.
        layer = std::make_unique<Dense<T>>(in[0], l.units, relu, kernel->offset, bias->offset,
                                           /*data_input=*/inputs[0] == kModelInput);
        dense = static_cast<Dense<T>*>(layer.get());
        break;
      case LayerType::kConv2D: {
        const auto [sh, sw] = layer_strides(l);
        const auto [dh, dw] = l.dilation_rate;
        const WindowAxis rows = window_axis(in[0], dilated_extent(l.kernel_size[0], dh), sh, l.padding);
        const WindowAxis cols = window_axis(in[1], dilated_extent(l.kernel_size[1], dw), sw, l.padding);
        layer = std::make_unique<Conv2D<T>>(
            typename Conv2D<T>::Geometry{in[0], in[1], in[2], l.kernel_size[0], l.kernel_size[1], l.filters, sh, sw,
                                         rows.pad_before, cols.pad_before, out[0], out[1], dh, dw},
            relu, kernel->offset, bias != nullptr ? bias->offset : Conv2D<T>::kNoBias, max_batch);
        break;
      }
      case LayerType::kMaxPool2D: {
        const auto [sh, sw] = layer_strides(l);
        layer = std::make_unique<MaxPool2D<T>>(
            typename MaxPool2D<T>::Geometry{in[0], in[1], in[2], l.pool_size[0], l.pool_size[1], sh, sw, out[0], out[1]},
            max_batch);
        break;
      }
      case LayerType::kAvgPool2D: {
        const auto [sh, sw] = layer_strides(l);
        layer = std::make_unique<AvgPool2D<T>>(
            typename AvgPool2D<T>::Geometry{in[0], in[1], in[2], l.pool_size[0], l.pool_size[1], sh, sw, out[0], out[1]});
        break;
      }
      // Global pooling: one window the size of the input, one output per channel (over the
      // unmasked steps of a masked sequence).
      case LayerType::kGlobalMaxPool2D:
        if (masked) {
          layer = std::make_unique<MaskedGlobalPool1D<T>>(in[1], in[2], false);
          break;
        }
        layer = std::make_unique<MaxPool2D<T>>(
            typename MaxPool2D<T>::Geometry{in[0], in[1], in[2], in[0], in[1], in[0], in[1], 1, 1}, max_batch);
        break;
      case LayerType::kGlobalAvgPool2D:
        if (masked) {
          layer = std::make_unique<MaskedGlobalPool1D<T>>(in[1], in[2], true);
          break;
        }
        layer = std::make_unique<AvgPool2D<T>>(
            typename AvgPool2D<T>::Geometry{in[0], in[1], in[2], in[0], in[1], in[0], in[1], 1, 1});
        break;
      case LayerType::kReLU:
        layer = std::make_unique<ReLU<T>>();
        break;
      case LayerType::kLayerNorm: {
        const ParamInfo* gamma = layout_.find(prefix + "gamma");
        const ParamInfo* beta = layout_.find(prefix + "beta");
        value = add_stage(std::make_unique<LayerNorm<T>>(
                              num_elements(out), out.back(), l.epsilon,
                              gamma != nullptr ? static_cast<int64_t>(gamma->offset) : -1,
                              beta != nullptr ? static_cast<int64_t>(beta->offset) : -1, max_batch),
                          nullptr, inputs, in_size, out, gamma != nullptr ? gamma : beta, nullptr, nullptr);
        break;
      }
      case LayerType::kBatchNorm: {
        const ParamInfo* gamma = layout_.find(prefix + "gamma");
        const ParamInfo* beta = layout_.find(prefix + "beta");
        const typename BatchNorm<T>::Offsets at{
            gamma != nullptr ? static_cast<int64_t>(gamma->offset) : -1,
            beta != nullptr ? static_cast<int64_t>(beta->offset) : -1,
            static_cast<int64_t>(layout_.find(prefix + "moving_mean")->offset),
            static_cast<int64_t>(layout_.find(prefix + "moving_variance")->offset)};
        // Without a virtual batch size (a spec not yet through submit), one ghost batch: the whole batch.
        const int64_t ghost = l.virtual_batch_size > 0 ? l.virtual_batch_size : max_batch;
        auto norm = std::make_unique<BatchNorm<T>>(num_elements(out), out.back(), ghost, l.epsilon, at, max_batch);
        batch_norms_.push_back(norm.get());
        value = add_stage(std::move(norm), nullptr, inputs, in_size, out,
                          gamma != nullptr ? gamma : (beta != nullptr ? beta : layout_.find(prefix + "moving_mean")),
                          nullptr, nullptr);
        break;
      }
      case LayerType::kAdd:
      case LayerType::kConcatenate:
      case LayerType::kDotInteraction: {
        std::vector<int64_t> widths;
        for (const Shape& s : in_shapes) widths.push_back(l.type == LayerType::kDotInteraction ? num_elements(s) : s.back());
        value = add_stage(nullptr, std::make_unique<Merge<T>>(l.type, std::move(widths), num_elements(out), l.self_interaction),
                          inputs, 0, out, nullptr, nullptr, nullptr);
        break;
      }
      case LayerType::kDropout:
        // The layer's identity in its masks: its key, so inserting another layer changes nothing.
        layer = std::make_unique<Dropout<T>>(l.rate, mix_seed(spec.seed, fnv1a(layer_key(spec, i))),
                                             in_size, max_batch);
        keyed_.push_back([d = static_cast<Dropout<T>*>(layer.get())](const ExampleKeys& k) { d->set_keys(k); });
        break;
      case LayerType::kEmbedding: {
        const ParamInfo* table = layout_.find(prefix + "embeddings");
        if (table->sparse) {  // no gradient in the flat buffer: no first tensor for the stage
          auto embedding = std::make_unique<Embedding<T>>(l.input_dim, l.output_dim, table->offset, true, l.combiner);
          sparse_embeddings_.push_back(embedding.get());
          value = add_stage(std::move(embedding), nullptr, inputs, in_size, out, nullptr, nullptr, nullptr);
          break;
        }
        layer = std::make_unique<Embedding<T>>(l.input_dim, l.output_dim, table->offset, false, l.combiner);
        kernel = table;  // the stage's first tensor (not a dense kernel: `dense` stays null)
        break;
      }
      case LayerType::kSlice:
        layer = std::make_unique<Slice<T>>(l.begin, l.size);
        break;
      case LayerType::kRandomFlip:
      case LayerType::kRandomCrop:
      case LayerType::kRandomTranslation: {
        typename Augmentation<T>::Draws draws;
        if (l.type == LayerType::kRandomFlip) {
          draws.flip_horizontal = l.flip_horizontal;
          draws.flip_vertical = l.flip_vertical;
        } else if (l.type == LayerType::kRandomCrop) {
          draws.max_shift_rows = draws.max_shift_cols = l.crop_padding;
        } else {
          draws.max_shift_rows = static_cast<int64_t>(l.height_factor * static_cast<float>(in[0]));
          draws.max_shift_cols = static_cast<int64_t>(l.width_factor * static_cast<float>(in[1]));
        }
        layer = std::make_unique<Augmentation<T>>(in[0], in[1], in[2], draws,
                                                  mix_seed(spec.seed, fnv1a(layer_key(spec, i))), max_batch);
        keyed_.push_back([a = static_cast<Augmentation<T>*>(layer.get())](const ExampleKeys& k) { a->set_keys(k); });
        break;
      }
      case LayerType::kActivation:
      case LayerType::kFlatten:
      case LayerType::kReshape:
        break;
      case LayerType::kConv1D:  // (as_2d: never here)
      case LayerType::kMaxPool1D:
      case LayerType::kAvgPool1D:
      case LayerType::kGlobalAvgPool1D:
      case LayerType::kGlobalMaxPool1D:
        break;
      case LayerType::kMultiHeadAttention: {
        using Attention = MultiHeadAttention<T>;
        const auto at = [&](const std::string& name) {
          const ParamInfo* p = layout_.find(prefix + name);
          return p != nullptr ? p->offset : Attention::kNoBias;
        };
        const typename Attention::Tensors w{at("query.kernel"), at("query.bias"), at("key.kernel"), at("key.bias"),
                                            at("value.kernel"), at("value.bias"), at("attention_output.kernel"),
                                            at("attention_output.bias")};
        const typename Attention::Geometry g{in[0], in[1], l.num_heads, l.key_dim, l.value_dim > 0 ? l.value_dim : l.key_dim,
                                             l.use_causal_mask, l.rate, mix_seed(spec.seed, fnv1a(layer_key(spec, i)))};
        auto attention = std::make_unique<Attention>(g, w, max_batch);
        if (l.rate > 0.0f) keyed_.push_back([a = attention.get()](const ExampleKeys& k) { a->set_keys(k); });
        value = add_stage(std::move(attention), nullptr, inputs, in_size, out, layout_.find(prefix + "query.kernel"),
                          nullptr, nullptr);
        break;
      }
      case LayerType::kPositionEmbedding: {
        const ParamInfo* positions = layout_.find(prefix + "embeddings");
        value = add_stage(std::make_unique<PositionEmbedding<T>>(in_size, positions->offset), nullptr, inputs, in_size, out,
                          positions, nullptr, nullptr);
        break;
      }
      case LayerType::kLstm:
      case LayerType::kGru: {
        std::vector<typename Recurrent<T>::Tensors> directions;
        for (const char* direction : {"", "forward.", "backward."}) {
          if (l.bidirectional == (*direction == 0)) continue;
          const std::string p = prefix + direction;
          directions.push_back({layout_.find(p + "kernel")->offset, layout_.find(p + "recurrent_kernel")->offset,
                                layout_.find(p + "bias")->offset});
        }
        const ParamInfo* first = layout_.find(prefix + (l.bidirectional ? "forward.kernel" : "kernel"));
        const typename Recurrent<T>::Geometry g{l.type == LayerType::kLstm ? Recurrent<T>::Cell::kLstm : Recurrent<T>::Cell::kGru,
                                                in[0], in[1], l.units, l.return_sequences};
        value = add_stage(std::make_unique<Recurrent<T>>(g, std::move(directions), max_batch), nullptr, inputs, in_size, out,
                          first, nullptr, nullptr);
        break;
      }
    }
    if (layer) value = add_stage(std::move(layer), nullptr, inputs, in_size, out, kernel, kernel, dense);
    if (masked) stages_.back().mask_ids = in_mask;  // (the stage just added: no separate activation)
    // An activation of its own: the activation layer's, or a dense or conv2d layer's other than
    // the ReLU they fuse.
    const bool separate = l.type == LayerType::kActivation ||
                          ((l.type == LayerType::kDense || as_2d(l.type) == LayerType::kConv2D) && !relu);
    const bool loss_softmax = l.activation == loss_activation && i == last_computing;
    if (separate && l.activation == Activation::kReLU && fuse_relu(i, value)) {
      value_of[i] = value;  // the ReLU runs inside the stage that computes its input
      continue;
    }
    if (separate && l.activation != Activation::kLinear && !loss_softmax) {
      value = add_stage(std::make_unique<ActivationLayer<T>>(l.activation, out.back()), nullptr, {value},
                        num_elements(out), out, nullptr, nullptr, nullptr);
    }
    value_of[i] = value;
  }
  output_buffer_ = value_of[output_layer];
  if (stages_.empty() || output_buffer_ == kModelInput) {
    throw SpecError("/model/layers", "must contain at least one layer that computes");
  }
  delta_written_.assign(activations_.size(), false);
  sparse_tables_ = nn::sparse_tables(spec, layout_);
  int64_t widest = 0;
  for (size_t b = 0; b < readers.size(); ++b) {
    if (readers[b] > 1 || (static_cast<int>(b) == output_buffer_ && readers[b] > 0)) {
      widest = std::max<int64_t>(widest, activations_[b].rows());
    }
  }
  if (widest > 0) scratch_.resize(widest, max_batch);
}

template <typename T>
Model<T>::~Model() = default;


template <typename T>
ConstMatMap<T> Model<T>::forward(const T* params, const T* inputs, int64_t batch) {
  return run_forward(params, inputs, batch, {}, false);
}

template <typename T>
ConstMatMap<T> Model<T>::run_forward(const T* params, const T* inputs, int64_t batch, const ExampleKeys& keys,
                                     bool training) {
  for (const auto& set_keys : keyed_) set_keys(keys);
  for (BatchNorm<T>* b : batch_norms_) b->set_training(training);
  for (size_t t = 0; t < sparse_embeddings_.size(); ++t) {
    sparse_embeddings_[t]->use_rows(t < sparse_rows_.size() ? &sparse_rows_[t] : nullptr);
  }
  if (batch <= 0 || batch > max_batch_) {
    throw Error("batch of " + std::to_string(batch) + " examples outside 1.." + std::to_string(max_batch_));
  }
  last_input_ = inputs;
  last_batch_ = batch;
  std::vector<ConstMatMap<T>> ins;
  for (Stage& s : stages_) {
    MatMap<T> out(activations_[s.output_buffer].data(), s.out_size, batch);
    if (s.merge) {
      ins.clear();
      for (size_t k = 0; k < s.inputs.size(); ++k) ins.emplace_back(values(s.inputs[k]), s.merge->input_size(k), batch);
      s.merge->forward(ins, out);
    } else {
      if (s.mask_ids != kNoMask) {
        s.layer->use_mask(values(s.mask_ids), s.mask_ids == kModelInput ? input_size_ : activations_[s.mask_ids].rows());
      }
      s.layer->forward(params, ConstMatMap<T>(values(s.inputs[0]), s.in_size, batch), out);
    }
  }
  return ConstMatMap<T>(activations_[output_buffer_].data(), output_size_, batch);
}

template <typename T>
LossResult Model<T>::evaluate(const T* params, const T* inputs, const float* targets, int64_t batch,
                              const ExampleKeys& keys) {
  const bool training = keys.ids != nullptr;
  return compute_loss<T>(loss_, run_forward(params, inputs, batch, keys, training), targets, nullptr,
                         training ? LossWeights::kApply : LossWeights::kIgnore);
}

template <typename T>
LossResult Model<T>::compute_gradients(const T* params, const T* inputs, const float* targets, int64_t batch,
                                       T* grads, const GradientsReady& ready, const FactoredKernels* factored,
                                       const ExampleKeys& keys) {
  if (needs_keys() && keys.ids == nullptr) throw Error("dropout and augmentation need the batch's example keys");
  for (Stage& s : stages_) {
    if (s.dense == nullptr) continue;
    const auto p = static_cast<size_t>(s.kernel_param);
    s.dense->compute_kernel_gradient(factored == nullptr || p >= factored->size() || !(*factored)[p]);
  }
  ConstMatMap<T> logits = run_forward(params, inputs, batch, keys, true);
  std::fill(delta_written_.begin(), delta_written_.end(), false);
  LossResult result = compute_loss<T>(loss_, logits, targets, deltas_[output_buffer_].data());
  delta_written_[output_buffer_] = true;
  std::vector<ConstMatMap<T>> ins;
  for (size_t k = stages_.size(); k-- > 0;) {
    Stage& s = stages_[k];
    MatMap<T> dout(deltas_[s.output_buffer].data(), s.out_size, batch);
    if (s.merge) {
      ins.clear();
      for (size_t j = 0; j < s.inputs.size(); ++j) ins.emplace_back(values(s.inputs[j]), s.merge->input_size(j), batch);
      for (size_t j = 0; j < s.inputs.size(); ++j) {
        if (s.inputs[j] == kModelInput) continue;
        const int64_t size = s.merge->input_size(j);
        T* din = delta_target(s.inputs[j]);
        s.merge->backward(ins, ConstMatMap<T>(activations_[s.output_buffer].data(), s.out_size, batch),
                          ConstMatMap<T>(dout.data(), s.out_size, batch), j, MatMap<T>(din, size, batch));
        add_delta(s.inputs[j], din, size, batch);
      }
    } else {
      const int input = s.inputs[0];
      T* din = input == kModelInput ? nullptr : delta_target(input);
      s.layer->backward(params, ConstMatMap<T>(values(input), s.in_size, batch),
                        ConstMatMap<T>(activations_[s.output_buffer].data(), s.out_size, batch), dout, grads, din);
      if (din != nullptr) add_delta(input, din, s.in_size, batch);
    }
    if (ready && s.first_param_offset < layout_.total_size()) ready(s.first_param_offset);
  }
  return result;
}

template <typename T>
T* Model<T>::delta_target(int buffer) {
  if (delta_written_[buffer]) return scratch_.data();
  delta_written_[buffer] = true;
  return deltas_[buffer].data();
}

template <typename T>
void Model<T>::add_delta(int buffer, const T* written, int64_t size, int64_t batch) {
  if (written != scratch_.data()) return;
  MatMap<T>(deltas_[buffer].data(), size, batch) += ConstMatMap<T>(written, size, batch);
}

template <typename T>
const typename Model<T>::Stage& Model<T>::dense_stage(size_t param) const {
  for (const Stage& s : stages_) {
    if (s.dense != nullptr && s.kernel_param == static_cast<int>(param)) return s;
  }
  throw Error("parameter " + std::to_string(param) + " is not a dense kernel");
}

template <typename T>
typename Model<T>::Bf16Layers Model<T>::use_bf16_products() {
  Bf16Layers switched;
  if constexpr (std::is_same_v<T, float>) {
    for (Stage& s : stages_) {
      if (s.dense != nullptr) {
        if (s.dense->use_bf16()) ++switched.dense;
        continue;
      }
      auto* conv = dynamic_cast<Conv2D<T>*>(s.layer.get());
      if (conv != nullptr && conv->method() == Conv2D<T>::Method::kOneChannel) ++switched.one_channel;
      if (conv == nullptr || conv->method() != Conv2D<T>::Method::kOneDnn) continue;  // (dilated: im2col)
      conv->set_method(Conv2D<T>::Method::kOneDnnBf16);
      ++switched.convolutions;
    }
  }
  return switched;
}

template <typename T>
std::vector<size_t> Model<T>::rounded_kernels() const {
  std::vector<size_t> params;
  for (const Stage& s : stages_) {
    if (s.kernel_param < 0) continue;
    bool rounded = false;
    if (s.dense != nullptr) {
      rounded = s.dense->bf16_products() && !s.dense->data_input();
    } else if (const auto* conv = dynamic_cast<const Conv2D<T>*>(s.layer.get()); conv != nullptr) {
      rounded = conv->method() == Conv2D<T>::Method::kOneDnnBf16;
    }
    if (rounded) params.push_back(static_cast<size_t>(s.kernel_param));
  }
  return params;
}

template <typename T>
bool Model<T>::is_dense_kernel(size_t param) const {
  return std::any_of(stages_.begin(), stages_.end(),
                     [&](const Stage& s) { return s.dense != nullptr && s.kernel_param == static_cast<int>(param); });
}

template <typename T>
bool Model<T>::is_input_dense_kernel(size_t param) const {
  return is_dense_kernel(param) && dense_stage(param).dense->data_input();
}

template <typename T>
typename Model<T>::KernelFactors Model<T>::kernel_factors(size_t param) const {
  const Stage& s = dense_stage(param);
  const T* in = values(s.inputs[0]);
  return {ConstMatMap<T>(in, s.in_size, last_batch_),
          ConstMatMap<T>(deltas_[s.output_buffer].data(), s.out_size, last_batch_), s.dense->bf16_products()};
}

template <typename T>
int Model<T>::first_layer_kernel() const {
  const Stage& s = stages_.front();
  return s.dense != nullptr && s.inputs[0] == kModelInput ? s.kernel_param : -1;
}

template <typename T>
void Model<T>::set_first_layer_row_groups(std::vector<uint32_t> group_of_row, uint32_t groups) {
  if (first_layer_kernel() < 0) throw Error("row groups need a first layer that is dense");
  stages_.front().dense->set_row_groups(std::move(group_of_row), groups);
}

template <typename T>
void Model<T>::use_first_layer_partials(std::vector<const T*> partials) {
  if (first_layer_kernel() < 0) throw Error("row groups need a first layer that is dense");
  stages_.front().dense->use_partials(std::move(partials));
}

template class Model<float>;
template class Model<double>;

}  // namespace pstrain::nn
