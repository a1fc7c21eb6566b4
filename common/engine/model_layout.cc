// make_param_layout (model_spec.h): the tensors of a model spec, by layer, in Keras' names and
// layouts, with their roles and Glorot fans.
#include <string>
#include <utility>

#include "common/engine/model_spec.h"

namespace pstrain {

ParamLayout make_param_layout(const ModelSpec& spec) {
  const std::vector<Shape> shapes = infer_shapes(spec);
  const ModelGraph graph = model_graph(spec);
  ParamLayout layout;
  for (const size_t i : graph.order) {
    const LayerSpec& layer = spec.layers[i];
    const int input = graph.inputs[i][0];
    const Shape& in = input == kModelInput ? spec.input_shape : shapes[static_cast<size_t>(input)];
    const std::string prefix = "layers." + layer_key(spec, i) + ".";
    const int index = static_cast<int>(i);
    if (layer.type == LayerType::kDense) {  // [in, units]; over a sequence, in = its channels
      layout.add({prefix + "kernel", {in.back(), layer.units}, ParamRole::kKernel, 0, 0, layer.l2, index,
                  in.back(), layer.units});
      layout.add({prefix + "bias", {layer.units}, ParamRole::kBias, 0, 0, 0.0f, index, 0, 0});
    } else if (layer.type == LayerType::kConv2D || layer.type == LayerType::kConv1D) {
      const auto [kh, kw] = layer.kernel_size;
      const int64_t channels = in.back();  // [k, in, filters] for conv1d (Keras), the same values
      layout.add({prefix + "kernel",
                  layer.type == LayerType::kConv1D ? Shape{kw, channels, layer.filters} : Shape{kh, kw, channels, layer.filters},
                  ParamRole::kKernel, 0, 0, layer.l2, index, kh * kw * channels, kh * kw * layer.filters});
      if (layer.use_bias) layout.add({prefix + "bias", {layer.filters}, ParamRole::kBias, 0, 0, 0.0f, index, 0, 0});
    } else if (layer.type == LayerType::kLstm || layer.type == LayerType::kGru) {
      // Keras' names (Bidirectional's forward_ and backward_ layers as .forward. and .backward.).
      const int64_t gates = (layer.type == LayerType::kLstm ? 4 : 3) * layer.units;
      for (const char* direction : {"", "forward.", "backward."}) {
        if (layer.bidirectional == (*direction == 0)) continue;
        const std::string p = prefix + direction;
        layout.add({p + "kernel", {in[1], gates}, ParamRole::kCellKernel, 0, 0, 0.0f, index, in[1], gates});
        layout.add({p + "recurrent_kernel", {layer.units, gates}, ParamRole::kRecurrentKernel, 0, 0, 0.0f, index, 0, 0});
        if (layer.type == LayerType::kLstm) {
          layout.add({p + "bias", {gates}, ParamRole::kCellBias, 0, 0, 0.0f, index, layer.units, 0});
        } else {
          layout.add({p + "bias", {2, gates}, ParamRole::kCellBias, 0, 0, 0.0f, index, 0, 0});
        }
      }
    } else if (layer.type == LayerType::kMultiHeadAttention) {
      // Keras' names and layouts (its EinsumDense kernels, their Glorot fans as Keras computes
      // them for a 3-D kernel: the leading axis is the receptive field).
      const int64_t c = in[1], h = layer.num_heads, k = layer.key_dim;
      const int64_t v = layer.value_dim > 0 ? layer.value_dim : k;
      for (const auto& [part, width] : {std::pair<const char*, int64_t>{"query", k}, {"key", k}, {"value", v}}) {
        const std::string p = prefix + part + ".";
        layout.add({p + "kernel", {c, h, width}, ParamRole::kKernel, 0, 0, 0.0f, index, c * h, c * width});
        if (layer.use_bias) layout.add({p + "bias", {h, width}, ParamRole::kBias, 0, 0, 0.0f, index, 0, 0});
      }
      layout.add({prefix + "attention_output.kernel", {h, v, c}, ParamRole::kKernel, 0, 0, 0.0f, index, h * v, h * c});
      if (layer.use_bias) layout.add({prefix + "attention_output.bias", {c}, ParamRole::kBias, 0, 0, 0.0f, index, 0, 0});
    } else if (layer.type == LayerType::kPositionEmbedding) {
      // A vector per position, Keras' Embedding initializer (the position half of the Keras
      // guide's TokenAndPositionEmbedding).
      layout.add({prefix + "embeddings", {in[0], in[1]}, ParamRole::kEmbeddings, 0, 0, 0.0f, index, 0, 0});
    } else if (layer.type == LayerType::kEmbedding) {
      // Keras' name; one row per id. Sparse tables come after every dense tensor (below).
      if (!layer.sparse) {
        layout.add({prefix + "embeddings", {layer.input_dim, layer.output_dim}, ParamRole::kEmbeddings, 0, 0, 0.0f,
                    index, 0, 0});
      }
    } else if (layer.type == LayerType::kLayerNorm || layer.type == LayerType::kBatchNorm) {
      // Keras' names: gamma (scale), then beta (center), over the last axis.
      if (layer.scale) layout.add({prefix + "gamma", {in.back()}, ParamRole::kGamma, 0, 0, 0.0f, index, 0, 0});
      if (layer.center) layout.add({prefix + "beta", {in.back()}, ParamRole::kBeta, 0, 0, 0.0f, index, 0, 0});
      if (layer.type == LayerType::kBatchNorm) {
        layout.add({prefix + "moving_mean", {in.back()}, ParamRole::kMovingMean, 0, 0, 0.0f, index, 0, 0});
        layout.add({prefix + "moving_variance", {in.back()}, ParamRole::kMovingVariance, 0, 0, 0.0f, index, 0, 0});
      }
    }
  }
  layout.end_dense();
  for (const size_t i : graph.order) {
    const LayerSpec& layer = spec.layers[i];
    if (layer.type != LayerType::kEmbedding || !layer.sparse) continue;
    ParamInfo table{"layers." + layer_key(spec, i) + ".embeddings", {layer.input_dim, layer.output_dim},
                    ParamRole::kEmbeddings, 0, 0, 0.0f, static_cast<int>(i), 0, 0};
    table.sparse = true;
    layout.add(std::move(table));
  }
  return layout;
}

}  // namespace pstrain
