// The engine (nn::Model + optimizer, what the standalone trainer and the workers run) on data of
// other shapes and class counts than the built-in 28x28x1, 10-class datasets (tests/synthetic_data.h).
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "common/base/aligned.h"
#include "common/data/job_spec.h"
#include "common/engine/nn/gradient_scaling.h"
#include "common/engine/nn/model.h"
#include "common/engine/optim/optimizer.h"
#include "common/base/rng.h"
#include "tests/synthetic_data.h"

using namespace pstrain;

namespace {

using testing::Examples;
using testing::quadrant_images;
using testing::separable_features;

// Trains `spec` with Adam (batch 32, `epochs` passes in order) and returns the accuracy on `test`.
double train_and_test(const ModelSpec& spec, const Examples& train, const Examples& test, int epochs) {
  constexpr int64_t kBatch = 32;
  nn::Model<float> model(spec, kBatch);
  const ParamLayout& layout = model.layout();
  AlignedFloats params(layout.total_size()), grads(layout.total_size());
  glorot_uniform_init(layout, spec.seed, params.data());
  OptimizerSpec adam;
  adam.learning_rate = 0.01f;
  const auto optimizer = optim::make_optimizer(adam);
  optim::OptimizerState state = optimizer->make_state(layout.total_size());
  const int64_t d = model.input_size();
  const auto size = static_cast<int64_t>(train.labels.size());
  for (int epoch = 0; epoch < epochs; ++epoch) {
    for (int64_t first = 0; first < size; first += kBatch) {
      const int64_t n = std::min(kBatch, size - first);
      model.compute_gradients(params.data(), train.inputs.data() + first * d, train.labels.data() + first, n,
                              grads.data());
      nn::scale_and_regularize(layout, grads.data(), params.data(), n);
      optimizer->apply(params, grads, state);
    }
  }
  int64_t correct = 0;
  const auto test_size = static_cast<int64_t>(test.labels.size());
  for (int64_t first = 0; first < test_size; first += kBatch) {
    const int64_t n = std::min(kBatch, test_size - first);
    correct += model.evaluate(params.data(), test.inputs.data() + first * d, test.labels.data() + first, n).correct;
  }
  return static_cast<double>(correct) / static_cast<double>(test_size);
}

}  // namespace

TEST_CASE("30 features in 3 linearly separable classes: a dense model learns them") {
  Rng rng(7);
  std::vector<float> w(3 * 30);
  for (float& v : w) v = rng.uniform_float(-1.0f, 1.0f);
  const Examples train = separable_features(rng, w, 1200);
  const Examples test = separable_features(rng, w, 400);

  ModelSpec spec;
  spec.input_shape = {30};
  spec.seed = 3;
  LayerSpec hidden;
  hidden.units = 32;
  hidden.activation = Activation::kReLU;
  LayerSpec out;
  out.units = 3;
  spec.layers = {hidden, out};
  const double accuracy = train_and_test(spec, train, test, 30);
  MESSAGE("test accuracy " << accuracy);
  CHECK(accuracy >= 0.9);
}

TEST_CASE("8x8x1 images in 4 classes: a conv model learns them") {
  Rng rng(11);
  const Examples train = quadrant_images(rng, 800);
  const Examples test = quadrant_images(rng, 200);

  ModelSpec spec;
  spec.input_shape = {8, 8, 1};
  spec.seed = 5;
  LayerSpec conv;
  conv.type = LayerType::kConv2D;
  conv.filters = 4;
  conv.kernel_size = {3, 3};
  conv.activation = Activation::kReLU;
  LayerSpec pool;
  pool.type = LayerType::kMaxPool2D;
  LayerSpec flatten;
  flatten.type = LayerType::kFlatten;
  LayerSpec out;
  out.units = 4;
  spec.layers = {conv, pool, flatten, out};
  const double accuracy = train_and_test(spec, train, test, 10);
  MESSAGE("test accuracy " << accuracy);
  CHECK(accuracy >= 0.95);
}
