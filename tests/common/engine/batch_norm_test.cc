// batch_norm: gradients over ghost batches, the statistics by hand, inference on the moving
// statistics, the moving-average update of the trainer, and the spec's checks.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/base/error.h"
#include "common/data/job_spec.h"
#include "common/base/rng.h"
#include "common/engine/nn/activations.h"
#include "common/engine/nn/batch_norm.h"
#include "common/engine/nn/merge.h"
#include "common/engine/nn/model.h"
#include "common/engine/nn/moving_statistics.h"
#include "tests/common/engine/gradient_check.h"

using namespace pstrain;
using namespace pstrain::testing;
using nn::Model;

namespace {

LayerSpec batch_norm(int64_t ghost = 0) {
  LayerSpec l = simple(LayerType::kBatchNorm);
  l.virtual_batch_size = ghost;
  return l;
}

LayerSpec relu() {
  LayerSpec l = simple(LayerType::kActivation);
  l.activation = Activation::kReLU;
  return l;
}

std::vector<float> random_values(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = rng.uniform_float(-1.0f, 1.0f);
  return v;
}

}  // namespace

TEST_CASE("batch_norm after dense and conv2d layers, whole batches and ghost batches, with and without center and scale") {
  ModelSpec spec;
  spec.input_shape = {6};
  spec.layers = {dense(5, false), batch_norm(), dense(3, false)};
  check_gradients(spec, 6, 401);
  spec.layers = {dense(5, true), batch_norm(2), dense(3, false)};
  check_gradients(spec, 6, 402);
  spec.layers = {dense(5, true), batch_norm(4), dense(3, false)};  // ghost batches of 4 and 2
  check_gradients(spec, 6, 403);
  LayerSpec plain = batch_norm(3);
  plain.center = plain.scale = false;
  spec.layers = {dense(5, true), plain, dense(3, false)};
  check_gradients(spec, 6, 404);
  spec.input_shape = {5, 4, 2};
  spec.layers = {conv(3, 2, 2, false), batch_norm(2), simple(LayerType::kFlatten), dense(3, false)};
  check_gradients(spec, 4, 405);
  const ParamLayout layout = make_param_layout(spec);
  CHECK(layout.find("layers.1.moving_mean")->role == ParamRole::kMovingMean);
  CHECK(layout.find("layers.1.moving_variance")->shape == Shape{3});
}

TEST_CASE("batch_norm by hand: each ghost batch on its own statistics, their weighted sum for the moving update") {
  ModelSpec spec;
  spec.input_shape = {1};
  LayerSpec norm = batch_norm(2);
  norm.epsilon = 0.0f;
  spec.layers = {norm, simple(LayerType::kFlatten)};
  Model<double> model(spec, 4);
  std::vector<float> init(model.layout().total_size());
  glorot_uniform_init(model.layout(), 1, init.data());
  CHECK(init[model.layout().find("layers.0.moving_variance")->offset] == 1.0f);
  CHECK(init[model.layout().find("layers.0.moving_mean")->offset] == 0.0f);
  std::vector<double> params(init.begin(), init.end());
  const std::vector<double> x = {1, 3, 10, 20};  // ghost batches {1, 3} and {10, 20}
  const std::vector<uint32_t> ids = {0, 1, 2, 3};
  std::vector<int32_t> labels(4, 0);
  std::vector<double> grads(params.size());
  model.compute_gradients(params.data(), x.data(), labels.data(), 4, grads.data(), {}, nullptr, {0, ids.data()});
  // Means 2 and 15, variances 1 and 25, each over 2 examples.
  CHECK(grads[model.layout().find("layers.0.moving_mean")->offset] == doctest::Approx(2 * 2 + 2 * 15));
  CHECK(grads[model.layout().find("layers.0.moving_variance")->offset] == doctest::Approx(2 * 1 + 2 * 25));
  // Inference normalizes with the moving statistics: (x - 0) / sqrt(1) * 1 + 0.
  const auto y = model.forward(params.data(), x.data(), 4);
  CHECK(y(0, 2) == 10.0);
}

TEST_CASE("the moving average: momentum * moving + (1 - momentum) * the step's statistic") {
  const std::vector<float> before = {0.0f, 1.0f};
  const std::vector<float> statistic = {2.0f, 5.0f};
  std::vector<float> out(2);
  nn::moving_average(before.data(), statistic.data(), 2, 0.9f, out.data());
  CHECK(out[0] == doctest::Approx(0.2f));
  CHECK(out[1] == doctest::Approx(0.9f + 0.5f));
}

TEST_CASE("batch_norm in a job spec: fields, the default ghost batch written in, the splits refused") {
  const std::string base = R"({"dataset": {"name": "mnist10k"},
    "model": {"input_shape": [784], "layers": [{"type": "dense", "units": 16}, NORM, {"type": "dense", "units": 10}]},
    "optimizer": {"type": "sgd"}, "training": {"global_batch_size": BATCH, "epochs": 1, "workers": 2}})";
  auto spec_with = [&](const std::string& norm, const std::string& batch) {
    std::string s = base;
    s.replace(s.find("NORM"), 4, norm);
    return s.replace(s.find("BATCH"), 5, batch);
  };
  auto error = [&](const std::string& norm, const std::string& batch) {
    try {
      parse_job_spec(spec_with(norm, batch));
    } catch (const SpecError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  const JobSpec spec = parse_job_spec(spec_with(R"({"type": "batch_norm", "momentum": 0.9})", "64"));
  CHECK(spec.model.layers[1].virtual_batch_size == 32);
  CHECK(spec.model.layers[1].momentum == 0.9f);
  const JobSpec again = parse_job_spec(job_spec_to_json(spec));
  CHECK(again.model.layers[1].virtual_batch_size == 32);
  CHECK(parse_job_spec(spec_with(R"({"type": "batch_norm", "virtual_batch_size": 8})", "64"))
            .model.layers[1].virtual_batch_size == 8);
  CHECK(error(R"({"type": "batch_norm", "virtual_batch_size": 12})", "64") ==
        "/model/layers/1/virtual_batch_size 12 does not divide each worker's 32 examples (the global batch 64 over 2 "
        "workers) into whole ghost batches");
  CHECK(error(R"({"type": "batch_norm"})", "63").find("/model/layers/1/virtual_batch_size batch_norm needs the global "
                                                      "batch (63) to split evenly over the 2 workers") == 0);
  CHECK(error(R"({"type": "batch_norm", "momentum": 1.5})", "64").find("/model/layers/1/momentum ") == 0);
  CHECK(error(R"({"type": "batch_norm", "virtual_batch_size": 0})", "64").find("/model/layers/1/virtual_batch_size ") ==
        0);
}

TEST_CASE("a ReLU fused into batch_norm or add: gradients checked, in ghost batches and residual blocks") {
  ModelSpec spec;
  spec.input_shape = {6};
  spec.layers = {dense(5, false), batch_norm(2), relu(), dense(3, false)};
  check_gradients(spec, 6, 411);
  LayerSpec plain = batch_norm(3);
  plain.center = plain.scale = false;
  spec.layers = {dense(5, false), plain, relu(), dense(3, false)};
  check_gradients(spec, 6, 412);
  // A residual block: conv, batch_norm + ReLU (fused), conv, batch_norm, add + ReLU (fused); the
  // first ReLU's output is read twice, which does not stop its fusion.
  spec.input_shape = {5, 4, 2};
  spec.layers = {conv(3, 2, 2, false), batch_norm(2), named(relu(), "stem"), conv(3, 2, 2, false, {1, 1}, Padding::kSame),
                 named(batch_norm(2), "block"), named(simple(LayerType::kAdd), "sum", {"stem", "block"}), relu(),
                 simple(LayerType::kFlatten), dense(3, false)};
  check_gradients(spec, 4, 413);
  // A batch_norm read by its ReLU and by another layer keeps the ReLU separate.
  spec.layers = {conv(3, 2, 2, false), named(batch_norm(2), "norm"), named(relu(), "r"),
                 named(simple(LayerType::kAdd), "sum", {"norm", "r"}), simple(LayerType::kFlatten), dense(3, false)};
  check_gradients(spec, 4, 414);
}

TEST_CASE("a ReLU fused into batch_norm or add gives the separate layers' values bit for bit") {
  const int64_t positions = 12, c = 19, batch = 8, size = positions * c;  // 19: vector tails at every width
  const auto n = static_cast<size_t>(size * batch);
  const std::vector<float> x = random_values(n, 21), x2 = random_values(n, 22), dy = random_values(n, 23);
  std::vector<float> params = random_values(static_cast<size_t>(4 * c), 24);
  for (int64_t k = 0; k < c; ++k) params[static_cast<size_t>(3 * c + k)] = 0.5f + std::abs(params[static_cast<size_t>(3 * c + k)]);
  const nn::BatchNorm<float>::Offsets at{0, c, 2 * c, 3 * c};
  nn::ActivationLayer<float> relu_layer(Activation::kReLU, c);
  using Map = nn::MatMap<float>;
  using ConstMap = nn::ConstMatMap<float>;
  for (const bool training : {true, false}) {
    CAPTURE(training);
    nn::BatchNorm<float> fused(size, c, 4, 1e-3f, at, batch), separate(size, c, 4, 1e-3f, at, batch);
    fused.set_relu(true);
    fused.set_training(training);
    separate.set_training(training);
    std::vector<float> y_fused(n), y_norm(n), y_relu(n);
    fused.forward(params.data(), ConstMap(x.data(), size, batch), Map(y_fused.data(), size, batch));
    separate.forward(params.data(), ConstMap(x.data(), size, batch), Map(y_norm.data(), size, batch));
    relu_layer.forward(nullptr, ConstMap(y_norm.data(), size, batch), Map(y_relu.data(), size, batch));
    CHECK(y_fused == y_relu);
    CHECK(std::count(y_fused.begin(), y_fused.end(), 0.0f) > static_cast<std::ptrdiff_t>(n / 4));
    if (!training) continue;
    std::vector<float> g_fused(params.size()), g_separate(params.size()), dx_fused(n), dx_separate(n), d_norm(n);
    std::vector<float> dout = dy;
    fused.backward(params.data(), ConstMap(x.data(), size, batch), ConstMap(y_fused.data(), size, batch),
                   Map(dout.data(), size, batch), g_fused.data(), dx_fused.data());
    dout = dy;
    relu_layer.backward(nullptr, ConstMap(y_norm.data(), size, batch), ConstMap(y_relu.data(), size, batch),
                        Map(dout.data(), size, batch), nullptr, d_norm.data());
    separate.backward(params.data(), ConstMap(x.data(), size, batch), ConstMap(y_norm.data(), size, batch),
                      Map(d_norm.data(), size, batch), g_separate.data(), dx_separate.data());
    CHECK(g_fused == g_separate);
    CHECK(dx_fused == dx_separate);
  }
  // add + ReLU against add, then the ReLU layer.
  nn::Merge<float> fused_add(LayerType::kAdd, {c, c}, size), add(LayerType::kAdd, {c, c}, size);
  fused_add.set_relu(true);
  const std::vector<ConstMap> ins = {ConstMap(x.data(), size, batch), ConstMap(x2.data(), size, batch)};
  std::vector<float> y_fused(n), y_sum(n), y_relu(n), d_fused(n), d_relu(n), d_separate(n);
  fused_add.forward(ins, Map(y_fused.data(), size, batch));
  add.forward(ins, Map(y_sum.data(), size, batch));
  relu_layer.forward(nullptr, ConstMap(y_sum.data(), size, batch), Map(y_relu.data(), size, batch));
  CHECK(y_fused == y_relu);
  std::vector<float> dout = dy;
  relu_layer.backward(nullptr, ConstMap(y_sum.data(), size, batch), ConstMap(y_relu.data(), size, batch),
                      Map(dout.data(), size, batch), nullptr, d_relu.data());
  for (size_t k = 0; k < 2; ++k) {
    fused_add.backward(ins, ConstMap(y_fused.data(), size, batch), ConstMap(dy.data(), size, batch), k,
                       Map(d_fused.data(), size, batch));
    add.backward(ins, ConstMap(y_sum.data(), size, batch), ConstMap(d_relu.data(), size, batch), k,
                 Map(d_separate.data(), size, batch));
    CHECK(d_fused == d_separate);
  }
}

TEST_CASE("a model with its ReLUs fused equals the same model with ReLU layers of their own, bit for bit") {
  // The `relu` layer type is never fused: the same residual CNN with it in place of each
  // `activation: relu` runs every ReLU as a stage of its own. Outputs and gradients must agree.
  ModelSpec fused;
  fused.input_shape = {6, 5, 3};
  fused.seed = 3;
  // (5 filters: products small enough that OpenBLAS computes them on the calling thread, whose
  // OpenMP threads ThreadSanitizer cannot see synchronize; the layer test above covers the
  // kernels' vector tails with 19 channels.)
  fused.layers = {conv(5, 3, 3, false, {1, 1}, Padding::kSame), batch_norm(4), named(relu(), "stem"),
                  conv(5, 3, 3, false, {1, 1}, Padding::kSame), named(batch_norm(4), "block"),
                  named(simple(LayerType::kAdd), "sum", {"stem", "block"}), relu(), simple(LayerType::kFlatten),
                  dense(4, false)};
  ModelSpec separate = fused;
  separate.layers[2] = named(simple(LayerType::kReLU), "stem");
  separate.layers[6] = simple(LayerType::kReLU);
  const int64_t batch = 8;
  Model<float> a(fused, batch), b(separate, batch);
  REQUIRE(a.layout().total_size() == b.layout().total_size());
  std::vector<float> params(a.layout().total_size());
  glorot_uniform_init(a.layout(), 5, params.data());
  const std::vector<float> x = random_values(static_cast<size_t>(a.input_size() * batch), 31);
  std::vector<int32_t> labels(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) labels[static_cast<size_t>(i)] = static_cast<int32_t>(i % 4);
  std::vector<uint32_t> ids(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) ids[static_cast<size_t>(i)] = static_cast<uint32_t>(i);
  std::vector<float> ga(params.size()), gb(params.size());
  const nn::LossResult la = a.compute_gradients(params.data(), x.data(), labels.data(), batch, ga.data(), {}, nullptr, {0, ids.data()});
  const nn::LossResult lb = b.compute_gradients(params.data(), x.data(), labels.data(), batch, gb.data(), {}, nullptr, {0, ids.data()});
  CHECK(la.loss_sum == lb.loss_sum);
  CHECK(ga == gb);
  CHECK(std::count(ga.begin(), ga.end(), 0.0f) < static_cast<std::ptrdiff_t>(ga.size() / 4));
  const auto ya = a.forward(params.data(), x.data(), batch);
  const std::vector<float> inference(ya.data(), ya.data() + ya.size());
  const auto yb = b.forward(params.data(), x.data(), batch);
  CHECK(std::equal(inference.begin(), inference.end(), yb.data()));
}
