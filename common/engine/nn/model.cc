#include "common/engine/nn/model.h"

#include <algorithm>

#include "common/base/error.h"
#include "common/engine/nn/activations.h"
#include "common/engine/nn/layers.h"
#include "common/engine/nn/normalization.h"

namespace pstrain::nn {

template <typename T>
Model<T>::Model(const ModelSpec& spec, int64_t max_batch) : max_batch_(max_batch) {
  const std::vector<Shape> shapes = infer_shapes(spec);
  layout_ = make_param_layout(spec);
  input_size_ = num_elements(spec.input_shape);
  output_size_ = num_elements(shapes.back());

  // The last layer that computes (flatten and reshape only relabel): a softmax there is the
  // loss's (model_spec.h), so the model's output stays the logits.
  size_t last_computing = 0;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    if (spec.layers[i].type != LayerType::kFlatten && spec.layers[i].type != LayerType::kReshape) last_computing = i;
  }
  Shape in = spec.input_shape;
  int current_buffer = -1;
  // Appends a stage computing `layer` from the current buffer into a new one of `out`'s size.
  // `first`: the stage's first parameter tensor (its gradients are final once it ran backward).
  auto add_stage = [&](std::unique_ptr<Layer<T>> layer, const Shape& stage_in, const Shape& out, const ParamInfo* first,
                       const ParamInfo* kernel, Dense<T>* dense) {
    const int output_buffer = static_cast<int>(activations_.size());
    activations_.emplace_back(num_elements(out), max_batch);
    deltas_.emplace_back(num_elements(out), max_batch);
    const size_t first_param = first != nullptr ? first->offset : layout_.total_size();
    const int kernel_param = kernel != nullptr ? static_cast<int>(kernel - layout_.params().data()) : -1;
    stages_.push_back({std::move(layer), num_elements(stage_in), num_elements(out), current_buffer, output_buffer,
                       first_param, kernel_param, dense});
    current_buffer = output_buffer;
  };
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const LayerSpec& l = spec.layers[i];
    const Shape& out = shapes[i];
    std::unique_ptr<Layer<T>> layer;
    Dense<T>* dense = nullptr;
    const std::string prefix = "layers." + std::to_string(i) + ".";
    const ParamInfo* kernel = layout_.find(prefix + "kernel");
    const ParamInfo* bias = layout_.find(prefix + "bias");
    const bool relu = l.activation == Activation::kReLU;
    switch (l.type) {
      case LayerType::kDense:
        // A dense layer that reads the model's input (data) may find whole features zero.
        layer = std::make_unique<Dense<T>>(in[0], l.units, relu, kernel->offset, bias->offset,
                                           /*data_input=*/current_buffer < 0);
        dense = static_cast<Dense<T>*>(layer.get());
        break;
      case LayerType::kConv2D: {
        const auto [sh, sw] = layer_strides(l);
        const WindowAxis rows = window_axis(in[0], l.kernel_size[0], sh, l.padding);
        const WindowAxis cols = window_axis(in[1], l.kernel_size[1], sw, l.padding);
        layer = std::make_unique<Conv2D<T>>(
            typename Conv2D<T>::Geometry{in[0], in[1], in[2], l.kernel_size[0], l.kernel_size[1], l.filters, sh, sw,
                                         rows.pad_before, cols.pad_before, out[0], out[1]},
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
      // Global pooling: one window the size of the input, one output per channel.
      case LayerType::kGlobalMaxPool2D:
        layer = std::make_unique<MaxPool2D<T>>(
            typename MaxPool2D<T>::Geometry{in[0], in[1], in[2], in[0], in[1], in[0], in[1], 1, 1}, max_batch);
        break;
      case LayerType::kGlobalAvgPool2D:
        layer = std::make_unique<AvgPool2D<T>>(
            typename AvgPool2D<T>::Geometry{in[0], in[1], in[2], in[0], in[1], in[0], in[1], 1, 1});
        break;
      case LayerType::kReLU:
        layer = std::make_unique<ReLU<T>>();
        break;
      case LayerType::kLayerNorm: {
        const ParamInfo* gamma = layout_.find(prefix + "gamma");
        const ParamInfo* beta = layout_.find(prefix + "beta");
        add_stage(std::make_unique<LayerNorm<T>>(
                      num_elements(out), out.back(), l.epsilon, gamma != nullptr ? static_cast<int64_t>(gamma->offset) : -1,
                      beta != nullptr ? static_cast<int64_t>(beta->offset) : -1, max_batch),
                  in, out, gamma != nullptr ? gamma : beta, nullptr, nullptr);
        break;
      }
      case LayerType::kActivation:
      case LayerType::kFlatten:
      case LayerType::kReshape:
        break;  // the column layout makes the last two free: only the shape changes
    }
    if (layer) add_stage(std::move(layer), in, out, kernel, kernel, dense);
    // An activation of its own: the activation layer's, or a dense or conv2d layer's other than
    // the ReLU they fuse.
    const bool separate = l.type == LayerType::kActivation ||
                          ((l.type == LayerType::kDense || l.type == LayerType::kConv2D) && !relu);
    const bool loss_softmax = l.activation == Activation::kSoftmax && i == last_computing;
    if (separate && l.activation != Activation::kLinear && !loss_softmax) {
      add_stage(std::make_unique<ActivationLayer<T>>(l.activation, out.back()), out, out, nullptr, nullptr, nullptr);
    }
    in = out;
  }
  if (stages_.empty()) throw SpecError("/model/layers", "must contain at least one dense or conv2d layer");
}

template <typename T>
Model<T>::~Model() = default;

template <typename T>
ConstMatMap<T> Model<T>::forward(const T* params, const T* inputs, int64_t batch) {
  if (batch <= 0 || batch > max_batch_) {
    throw Error("batch of " + std::to_string(batch) + " examples outside 1.." + std::to_string(max_batch_));
  }
  last_input_ = inputs;
  last_batch_ = batch;
  for (Stage& s : stages_) {
    const T* in = s.input_buffer < 0 ? inputs : activations_[s.input_buffer].data();
    s.layer->forward(params, ConstMatMap<T>(in, s.in_size, batch),
                     MatMap<T>(activations_[s.output_buffer].data(), s.out_size, batch));
  }
  return ConstMatMap<T>(activations_[stages_.back().output_buffer].data(), output_size_, batch);
}

template <typename T>
LossResult Model<T>::evaluate(const T* params, const T* inputs, const int32_t* labels, int64_t batch) {
  return softmax_cross_entropy<T>(forward(params, inputs, batch), labels, nullptr);
}

template <typename T>
LossResult Model<T>::compute_gradients(const T* params, const T* inputs, const int32_t* labels, int64_t batch,
                                       T* grads, const GradientsReady& ready, const FactoredKernels* factored) {
  for (Stage& s : stages_) {
    if (s.dense == nullptr) continue;
    const auto p = static_cast<size_t>(s.kernel_param);
    s.dense->compute_kernel_gradient(factored == nullptr || p >= factored->size() || !(*factored)[p]);
  }
  ConstMatMap<T> logits = forward(params, inputs, batch);
  LossResult result = softmax_cross_entropy<T>(logits, labels, deltas_[stages_.back().output_buffer].data());
  for (size_t k = stages_.size(); k-- > 0;) {
    Stage& s = stages_[k];
    const T* in = s.input_buffer < 0 ? inputs : activations_[s.input_buffer].data();
    T* din = s.input_buffer < 0 ? nullptr : deltas_[s.input_buffer].data();
    s.layer->backward(params, ConstMatMap<T>(in, s.in_size, batch),
                      ConstMatMap<T>(activations_[s.output_buffer].data(), s.out_size, batch),
                      MatMap<T>(deltas_[s.output_buffer].data(), s.out_size, batch), grads, din);
    if (ready && s.first_param_offset < layout_.total_size()) ready(s.first_param_offset);
  }
  return result;
}

template <typename T>
const typename Model<T>::Stage& Model<T>::dense_stage(size_t param) const {
  for (const Stage& s : stages_) {
    if (s.dense != nullptr && s.kernel_param == static_cast<int>(param)) return s;
  }
  throw Error("parameter " + std::to_string(param) + " is not a dense kernel");
}

template <typename T>
bool Model<T>::is_dense_kernel(size_t param) const {
  return std::any_of(stages_.begin(), stages_.end(),
                     [&](const Stage& s) { return s.dense != nullptr && s.kernel_param == static_cast<int>(param); });
}

template <typename T>
typename Model<T>::KernelFactors Model<T>::kernel_factors(size_t param) const {
  const Stage& s = dense_stage(param);
  const T* in = s.input_buffer < 0 ? last_input_ : activations_[s.input_buffer].data();
  return {ConstMatMap<T>(in, s.in_size, last_batch_),
          ConstMatMap<T>(deltas_[s.output_buffer].data(), s.out_size, last_batch_)};
}

template <typename T>
int Model<T>::first_layer_kernel() const {
  const Stage& s = stages_.front();
  return s.dense != nullptr && s.input_buffer < 0 ? s.kernel_param : -1;
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
