#include "tests/common/engine/gradient_check.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "common/base/rng.h"
#include "common/engine/nn/gradient_scaling.h"
#include "common/engine/nn/loss.h"
#include "common/engine/nn/moving_statistics.h"

namespace pstrain::testing {

LayerSpec dense(int64_t units, bool relu, float l2) {
  LayerSpec l;
  l.type = LayerType::kDense;
  l.units = units;
  l.activation = relu ? Activation::kReLU : Activation::kLinear;
  l.l2 = l2;
  return l;
}

LayerSpec conv(int64_t filters, int64_t kh, int64_t kw, bool relu, float l2) {
  LayerSpec l;
  l.type = LayerType::kConv2D;
  l.filters = filters;
  l.kernel_size = {kh, kw};
  l.activation = relu ? Activation::kReLU : Activation::kLinear;
  l.l2 = l2;
  return l;
}

LayerSpec conv(int64_t filters, int64_t kh, int64_t kw, bool relu, std::array<int64_t, 2> strides, Padding padding) {
  LayerSpec l = conv(filters, kh, kw, relu);
  l.strides = strides;
  l.padding = padding;
  return l;
}

LayerSpec maxpool(int64_t ph, int64_t pw, int64_t sh, int64_t sw) {
  LayerSpec l;
  l.type = LayerType::kMaxPool2D;
  l.pool_size = {ph, pw};
  l.strides = std::array<int64_t, 2>{sh, sw};
  return l;
}

LayerSpec simple(LayerType type) {
  LayerSpec l;
  l.type = type;
  return l;
}

LayerSpec reshape(Shape target) {
  LayerSpec l;
  l.type = LayerType::kReshape;
  l.target_shape = std::move(target);
  return l;
}

Problem random_problem(nn::Model<double>& model, int64_t batch, uint64_t seed) {
  Rng rng(seed);
  Problem p;
  p.params.resize(model.layout().total_size());
  for (auto& v : p.params) v = rng.uniform_float(-0.5f, 0.5f);
  p.inputs.resize(static_cast<size_t>(model.input_size() * batch));
  for (auto& v : p.inputs) v = rng.uniform_float(-1.0f, 1.0f);
  if (is_regression(model.loss())) {
    p.targets.resize(static_cast<size_t>(model.output_size() * batch));
    for (auto& t : p.targets) t = rng.uniform_float(-2.0f, 2.0f);
    return p;
  }
  if (model.loss().type == LossType::kBinaryCrossEntropy && model.output_size() > 1) {  // multi-label
    p.targets.resize(static_cast<size_t>(model.output_size() * batch));
    for (auto& t : p.targets) t = static_cast<float>(rng.uniform_index(2));
    return p;
  }
  const auto classes = static_cast<uint64_t>(nn::loss_classes(model.loss(), model.output_size()));
  for (int64_t b = 0; b < batch; ++b) p.labels.push_back(static_cast<int32_t>(rng.uniform_index(classes)));
  return p;
}

namespace {

// The problem's targets as the engine takes them (nn/loss.h).
std::vector<float> targets_of(const Problem& p) {
  if (!p.targets.empty()) return p.targets;
  return std::vector<float>(p.labels.begin(), p.labels.end());
}

}  // namespace

double objective(nn::Model<double>& model, const Problem& p, const std::vector<double>& params, int64_t batch,
                 const nn::ExampleKeys& keys) {
  return model.evaluate(params.data(), p.inputs.data(), targets_of(p).data(), batch, keys).loss_sum /
             static_cast<double>(batch) +
         nn::regularization_loss(model.layout(), params.data());
}

void check_gradients(const ModelSpec& spec, int64_t batch, uint64_t seed, const std::vector<int64_t>& zero_features) {
  const int64_t input_size = num_elements(spec.input_shape);
  check_gradients(spec, batch, seed, GradientCheck{{}, [&](Problem& p) {
                                                     for (int64_t b = 0; b < batch; ++b) {
                                                       for (int64_t j : zero_features) {
                                                         p.inputs[static_cast<size_t>(b * input_size + j)] = 0.0;
                                                       }
                                                     }
                                                   }});
}

void check_gradients(const ModelSpec& spec, int64_t batch, uint64_t seed, const GradientCheck& check) {
  nn::Model<double> model(spec, batch, check.loss);
  Problem p = random_problem(model, batch, seed);
  if (check.prepare) check.prepare(p);
  std::vector<uint32_t> ids;
  for (int64_t b = 0; b < batch; ++b) ids.push_back(static_cast<uint32_t>(seed * 1000 + 7 * b));
  const nn::ExampleKeys keys{3, ids.data()};  // training, in the gradients and the objective
  std::vector<double> grads(model.layout().total_size(), 1e9);  // garbage: every entry must be overwritten
  model.compute_gradients(p.params.data(), p.inputs.data(), targets_of(p).data(), batch, grads.data(), {}, nullptr, keys);
  nn::scale_and_regularize(model.layout(), grads.data(), p.params.data(), batch);

  const double h = 1e-6;
  const size_t n = grads.size();
  const size_t stride = n > 1500 ? n / 1500 : 1;
  double worst = 0;
  for (const ParamInfo& info : model.layout().params()) {
    if (nn::is_moving_statistic(info.role)) continue;  // set as averages, not by gradients
    for (size_t k = 0; k < info.size; k += std::max<size_t>(1, std::min(stride, info.size / 8 + 1))) {
      const size_t i = info.offset + k;
      std::vector<double> plus = p.params, minus = p.params;
      plus[i] += h;
      minus[i] -= h;
      const double fd = (objective(model, p, plus, batch, keys) - objective(model, p, minus, batch, keys)) / (2 * h);
      const double error = std::abs(fd - grads[i]) / std::max(1e-3, std::abs(fd) + std::abs(grads[i]));
      worst = std::max(worst, error);
      INFO(info.name << "[" << k << "]: finite difference " << fd << ", backprop " << grads[i]);
      REQUIRE(error < 1e-5);
    }
  }
  MESSAGE("worst relative error " << worst);
}

LayerSpec named(LayerSpec layer, std::string name, std::vector<std::string> inputs) {
  layer.name = std::move(name);
  layer.inputs = std::move(inputs);
  return layer;
}

}  // namespace pstrain::testing
