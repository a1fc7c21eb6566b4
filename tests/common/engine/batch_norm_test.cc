// batch_norm: gradients over ghost batches, the statistics by hand, inference on the moving
// statistics, the moving-average update of the trainer, and the spec's checks.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/base/error.h"
#include "common/data/job_spec.h"
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
