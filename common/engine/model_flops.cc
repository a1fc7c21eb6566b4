#include "common/engine/model_flops.h"

#include <vector>

namespace pstrain {
namespace {

double product(const Shape& s, size_t from, size_t to) {
  double p = 1;
  for (size_t i = from; i < to && i < s.size(); ++i) p *= static_cast<double>(s[i]);
  return p;
}

double layer_flops(const LayerSpec& l, const Shape& in, const Shape& out) {
  if (in.empty() || out.empty()) return 0;
  const double channels = static_cast<double>(in.back());
  switch (l.type) {
    case LayerType::kDense:
      return 2 * product(in, 0, in.size() - 1) * channels * static_cast<double>(l.units);
    case LayerType::kConv1D:
    case LayerType::kConv2D: {
      // (conv1d's kernel is {1, k}: a one-row image's.)
      const double taps = static_cast<double>(l.kernel_size[0]) * static_cast<double>(l.kernel_size[1]);
      return 2 * product(out, 0, out.size() - 1) * static_cast<double>(l.filters) * taps * channels;
    }
    case LayerType::kLstm:
    case LayerType::kGru: {
      const double steps = in.size() > 1 ? static_cast<double>(in[0]) : 1;
      const double gates = l.type == LayerType::kLstm ? 4 : 3, units = static_cast<double>(l.units);
      return 2 * steps * gates * units * (channels + units) * (l.bidirectional ? 2 : 1);
    }
    case LayerType::kMultiHeadAttention: {
      const double steps = in.size() > 1 ? static_cast<double>(in[0]) : 1, heads = static_cast<double>(l.num_heads);
      const double key = static_cast<double>(l.key_dim), value = static_cast<double>(l.value_dim > 0 ? l.value_dim : l.key_dim);
      return 2 * steps * channels * heads * (2 * key + value) + 2 * heads * steps * steps * (key + value) +
             2 * steps * heads * value * channels;
    }
    default:
      return 0;
  }
}

}  // namespace

double forward_flops(const ModelSpec& spec) {
  const std::vector<Shape> shapes = infer_shapes(spec);
  const ModelGraph graph = model_graph(spec);
  double total = 0;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const int from = graph.inputs[i].empty() ? kModelInput : graph.inputs[i][0];
    const Shape& in = from == kModelInput ? spec.input_shape : shapes[static_cast<size_t>(from)];
    total += layer_flops(spec.layers[i], in, shapes[i]);
  }
  return total;
}

}  // namespace pstrain
