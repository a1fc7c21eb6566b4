// Dropout: masks from (seed, layer, epoch, example index, position), inverted scaling, the
// identity in inference, gradients through the kept values, and the spec's checks.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/base/error.h"
#include "common/data/job_spec.h"
#include "common/engine/nn/dropout.h"
#include "common/engine/nn/model.h"
#include "tests/common/engine/gradient_check.h"

using namespace pstrain;
using namespace pstrain::testing;
using nn::Model;

namespace {

LayerSpec dropout(float rate) {
  LayerSpec l = simple(LayerType::kDropout);
  l.rate = rate;
  return l;
}

// A model that is only dropout on 200 features (flatten makes a layer that computes nothing).
ModelSpec dropout_only(float rate) {
  ModelSpec spec;
  spec.input_shape = {200};
  spec.layers = {dropout(rate), simple(LayerType::kFlatten)};
  return spec;
}

}  // namespace

TEST_CASE("dropout in a dense chain, after a conv2d, and in a residual branch: gradients in training") {
  ModelSpec spec;
  spec.input_shape = {6};
  spec.layers = {dense(8, true), dropout(0.3f), dense(4, false), dropout(0.5f), dense(3, false)};
  check_gradients(spec, 5, 201);
  spec.input_shape = {5, 4, 2};
  spec.layers = {conv(3, 2, 2, true), dropout(0.25f), simple(LayerType::kFlatten), dense(3, false)};
  check_gradients(spec, 4, 202);
  spec.input_shape = {6};
  spec.layers = {named(dense(6, true), "a"), dropout(0.4f), named(simple(LayerType::kAdd), "sum", {"a", "1"}),
                 dense(3, false)};
  check_gradients(spec, 4, 203);
}

TEST_CASE("dropout by hand: about `rate` dropped, the rest scaled by 1 / (1 - rate), inference passes all") {
  const ModelSpec spec = dropout_only(0.25f);
  Model<double> model(spec, 50);
  std::vector<double> x(200 * 50, 1.0);
  std::vector<uint32_t> ids(50);
  for (uint32_t i = 0; i < 50; ++i) ids[i] = 1000 + i;
  // Inference passes every value.
  const auto y = model.forward(nullptr, x.data(), 50);
  CHECK(y.minCoeff() == 1.0);
  CHECK(y.maxCoeff() == 1.0);
  int dropped = 0;
  for (uint32_t id : ids) {
    for (int64_t j = 0; j < 200; ++j) dropped += !nn::Dropout<double>::kept(77, 0, id, j, 0.25f);
  }
  CHECK(std::abs(dropped / 10000.0 - 0.25) < 0.02);
  // The scaled values: a training forward of all-ones examples gives 0 or 4/3 only.
  nn::Dropout<double> layer(0.25f, 77, 200, 50);
  layer.set_keys({0, ids.data()});
  std::vector<double> out(200 * 50);
  layer.forward(nullptr, nn::ConstMatMap<double>(x.data(), 200, 50), nn::MatMap<double>(out.data(), 200, 50));
  int zeros = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const bool kept = nn::Dropout<double>::kept(77, 0, ids[i / 200], static_cast<int64_t>(i % 200), 0.25f);
    CHECK(out[i] == (kept ? 4.0 / 3.0 : 0.0));
    zeros += out[i] == 0.0;
  }
  CHECK(zeros == dropped);
}

TEST_CASE("dropout masks follow the example, not its place in the batch or the worker that has it") {
  const uint64_t stream = 5;
  // Another epoch, another example, another position: another draw; the same ones: the same.
  int same_epoch_other = 0;
  for (int64_t j = 0; j < 1000; ++j) {
    CHECK(nn::Dropout<float>::kept(stream, 2, 9, j, 0.5f) == nn::Dropout<float>::kept(stream, 2, 9, j, 0.5f));
    same_epoch_other += nn::Dropout<float>::kept(stream, 2, 9, j, 0.5f) != nn::Dropout<float>::kept(stream, 3, 9, j, 0.5f);
  }
  CHECK(same_epoch_other > 400);
  // A batch and the same examples in another order, split in two: the same values per example.
  ModelSpec spec;
  spec.input_shape = {6};
  spec.layers = {dense(8, true), dropout(0.5f), dense(3, false)};
  Model<float> whole(spec, 4), part(spec, 2);
  std::vector<float> params(whole.layout().total_size());
  glorot_uniform_init(whole.layout(), 3, params.data());
  std::vector<float> x(6 * 4);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) * 0.25f - 0.5f;
  std::vector<int32_t> labels = {0, 1, 2, 1};
  const std::vector<uint32_t> ids = {40, 41, 42, 43};
  std::vector<float> g_whole(params.size()), g_a(params.size()), g_b(params.size());
  const auto r = whole.compute_gradients(params.data(), x.data(), labels.data(), 4, g_whole.data(), {}, nullptr,
                                         {1, ids.data()});
  const auto ra = part.compute_gradients(params.data(), x.data(), labels.data(), 2, g_a.data(), {}, nullptr,
                                         {1, ids.data()});
  const auto rb = part.compute_gradients(params.data(), x.data() + 12, labels.data() + 2, 2, g_b.data(), {}, nullptr,
                                         {1, ids.data() + 2});
  CHECK(r.loss_sum == doctest::Approx(ra.loss_sum + rb.loss_sum).epsilon(1e-6));
  for (size_t i = 0; i < params.size(); ++i) CHECK(g_whole[i] == doctest::Approx(g_a[i] + g_b[i]).epsilon(1e-5));
}

TEST_CASE("training a model with dropout needs the examples' keys") {
  ModelSpec spec;
  spec.input_shape = {6};
  spec.layers = {dense(4, true), dropout(0.5f), dense(3, false)};
  Model<float> model(spec, 2);
  CHECK(model.needs_keys());
  std::vector<float> params(model.layout().total_size()), grads(params.size()), x(12);
  std::vector<int32_t> labels = {0, 1};
  CHECK_THROWS_WITH_AS(model.compute_gradients(params.data(), x.data(), labels.data(), 2, grads.data()),
                       "dropout and augmentation need the batch's example keys", Error);
}

TEST_CASE("dropout's rate in JSON: required, at least 0 and below 1, named when wrong") {
  auto error = [](const std::string& layer) {
    try {
      parse_model_spec(R"({"input_shape": [6], "layers": [)" + layer + R"(, {"type": "dense", "units": 2}]})");
    } catch (const SpecError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  CHECK(error(R"({"type": "dropout", "rate": 0.5})") == "(accepted)");
  CHECK(error(R"({"type": "dropout", "rate": 0})") == "(accepted)");
  CHECK(error(R"({"type": "dropout"})") == "/model/layers/0/rate is required");
  CHECK(error(R"({"type": "dropout", "rate": 1})") ==
        "/model/layers/0/rate must be below 1 (the fraction of values dropped)");
  CHECK(error(R"({"type": "dropout", "rate": -0.1})").find("/model/layers/0/rate ") == 0);
  const ModelSpec spec =
      parse_model_spec(R"({"input_shape": [6], "layers": [{"type": "dropout", "rate": 0.25}, {"type": "dense", "units": 2}]})");
  CHECK(parse_model_spec(model_spec_to_json(spec)).layers[0].rate == 0.25f);
}
