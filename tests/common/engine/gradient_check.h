// Model-building helpers and the finite-difference gradient check shared by the engine's tests.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "common/engine/model_spec.h"
#include "common/engine/nn/model.h"

namespace pstrain::testing {

LayerSpec dense(int64_t units, bool relu, float l2 = 0);
LayerSpec conv(int64_t filters, int64_t kh, int64_t kw, bool relu, float l2 = 0);
// conv2d with strides and padding.
LayerSpec conv(int64_t filters, int64_t kh, int64_t kw, bool relu, std::array<int64_t, 2> strides, Padding padding);
LayerSpec maxpool(int64_t ph, int64_t pw, int64_t sh, int64_t sw);
LayerSpec simple(LayerType type);
LayerSpec reshape(Shape target);
// `layer` with a name and named inputs (the layer graph).
LayerSpec named(LayerSpec layer, std::string name, std::vector<std::string> inputs = {});

struct Problem {
  std::vector<double> params, inputs;
  std::vector<int32_t> labels;  // class losses
  std::vector<float> targets;   // regression and multi-label binary: the model's outputs per example
};
// Parameters in [-0.5, 0.5], inputs in [-1, 1], labels uniform over the model's loss's classes
// (regression: targets in [-2, 2]), from `seed`.
Problem random_problem(nn::Model<double>& model, int64_t batch, uint64_t seed);
// Summed loss / batch + L2, exactly what scale_and_regularize's gradient is of; with `keys`, of
// training (dropout on).
double objective(nn::Model<double>& model, const Problem& p, const std::vector<double>& params, int64_t batch,
                 const nn::ExampleKeys& keys = {});
// Backprop against central differences for a sample of every tensor's entries (relative error
// under 1e-5). zero_features: input features set to zero in every example (the first dense layer
// then skips them). Checked in training (dropout's keys from `seed`, batch_norm on its ghost
// batches); moving statistics are not gradients and are skipped.
void check_gradients(const ModelSpec& spec, int64_t batch, uint64_t seed, const std::vector<int64_t>& zero_features = {});
// The same check under another loss, with `prepare` changing the drawn problem first (integer
// ids as inputs, say).
struct GradientCheck {
  LossSpec loss;
  std::function<void(Problem&)> prepare;
};
void check_gradients(const ModelSpec& spec, int64_t batch, uint64_t seed, const GradientCheck& check);

}  // namespace pstrain::testing
