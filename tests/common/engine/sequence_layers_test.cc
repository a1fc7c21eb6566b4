// The 1-D layers (conv1d, maxpool1d, avgpool1d, global_maxpool1d, global_avgpool1d): by hand on a
// small sequence (Keras' Conv1D arithmetic: kernel [k, in, filters], "same" padding split with
// the extra after, dilation), their gradients against finite differences behind an embedding of
// token ids, and the spec's JSON and checks.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "common/base/error.h"
#include "common/data/job_spec.h"
#include "common/engine/nn/model.h"
#include "tests/common/engine/gradient_check.h"

using namespace pstrain;
using namespace pstrain::testing;
using nn::Model;

namespace {

ModelSpec spec_of(const std::string& json) { return parse_model_spec(json); }

}  // namespace

TEST_CASE("conv1d by hand: Keras' kernel layout, same padding with the extra after, dilation and strides") {
  // 5 steps of 2 channels; one filter of 3 taps; then flatten so the model's output is the conv's.
  // out[t] = sum_k sum_c x[t * stride + k * dilation - pad_before][c] w[k][c], padding zeros.
  for (const std::string options : {R"("padding": "valid")", R"("padding": "same")", R"("padding": "valid", "dilation_rate": 2)",
                                    R"("padding": "same", "strides": 2)"}) {
    CAPTURE(options);
    const ModelSpec spec = spec_of(R"({"input_shape": [5, 2], "layers": [
        {"type": "conv1d", "filters": 1, "kernel_size": 3, "use_bias": false, )" + options + R"(},
        {"type": "flatten"}]})");
    Model<double> model(spec, 1);
    const ParamInfo* kernel = model.layout().find("layers.0.kernel");
    REQUIRE(kernel != nullptr);
    CHECK(kernel->shape == Shape{3, 2, 1});
    std::vector<double> params(model.layout().total_size(), 0.0);
    const double w[3][2] = {{1, 10}, {100, 1000}, {10000, 100000}};
    for (int k = 0; k < 3; ++k)
      for (int c = 0; c < 2; ++c) params[kernel->offset + k * 2 + c] = w[k][c];
    const double x[5][2] = {{1, 2}, {3, 4}, {5, 6}, {7, 8}, {9, 10}};
    std::vector<double> input;
    for (const auto& step : x) input.insert(input.end(), step, step + 2);
    // The expected values from the formula, with the padding and dilation of each case.
    const LayerSpec& l = spec.layers[0];
    const int64_t stride = layer_strides(l)[1], dilation = l.dilation_rate[1];
    const WindowAxis axis = window_axis(5, dilated_extent(3, dilation), stride, l.padding);
    std::vector<double> want;
    for (int64_t t = 0; t < axis.out; ++t) {
      double sum = 0;
      for (int64_t k = 0; k < 3; ++k) {
        const int64_t at = t * stride + k * dilation - axis.pad_before;
        if (at < 0 || at >= 5) continue;
        for (int c = 0; c < 2; ++c) sum += x[at][c] * w[k][c];
      }
      want.push_back(sum);
    }
    CHECK(infer_shapes(spec)[0] == Shape{axis.out, 1});
    const auto y = model.forward(params.data(), input.data(), 1);
    CHECK(std::vector<double>(y.data(), y.data() + y.size()) == want);
  }
  // Same padding of 3 taps on 5 steps: one zero before and one after (out = 5).
  CHECK(window_axis(5, 3, 1, Padding::kSame).pad_before == 1);
  // Same padding, stride 2: out 3, total padding 2, one before.
  CHECK(window_axis(5, 3, 2, Padding::kSame).out == 3);
}

TEST_CASE("1-D pooling by hand: maxpool1d, avgpool1d, global max and average over the steps per channel") {
  const std::vector<double> input = {1, -1, 4, -2, 3, -3, 2, -4};  // 4 steps of 2 channels
  const auto run = [&](const std::string& layer) {
    const ModelSpec spec = spec_of(R"({"input_shape": [4, 2], "layers": [)" + layer + R"(, {"type": "flatten"}]})");
    Model<double> model(spec, 1);
    std::vector<double> params(model.layout().total_size(), 0.0);
    const auto y = model.forward(params.data(), input.data(), 1);
    return std::vector<double>(y.data(), y.data() + y.size());
  };
  CHECK(run(R"({"type": "maxpool1d"})") == std::vector<double>{4, -1, 3, -3});
  CHECK(run(R"({"type": "maxpool1d", "pool_size": 3, "strides": 1})") == std::vector<double>{4, -1, 4, -2});
  CHECK(run(R"({"type": "avgpool1d", "pool_size": 2})") == std::vector<double>{2.5, -1.5, 2.5, -3.5});
  CHECK(run(R"({"type": "global_maxpool1d"})") == std::vector<double>{4, -1});
  CHECK(run(R"({"type": "global_avgpool1d"})") == std::vector<double>{2.5, -2.5});
}

TEST_CASE("1-D layers' gradients: finite differences behind an embedding of token ids") {
  // A text CNN in small: ids -> vectors of 3 -> conv1d (same, dilated) -> maxpool1d -> conv1d
  // (strided, valid) -> global max and average pooling, concatenated -> 2 classes.
  const ModelSpec spec = spec_of(R"({"input_shape": [9], "seed": 3, "layers": [
      {"name": "vectors", "type": "embedding", "input_dim": 7, "output_dim": 3},
      {"name": "c1", "type": "conv1d", "filters": 4, "kernel_size": 3, "padding": "same", "dilation_rate": 2, "activation": "tanh"},
      {"name": "p1", "type": "maxpool1d", "pool_size": 2},
      {"name": "c2", "type": "conv1d", "filters": 3, "kernel_size": 2, "strides": 2, "activation": "relu"},
      {"name": "a", "type": "avgpool1d", "pool_size": 1, "inputs": ["c2"]},
      {"name": "gmax", "type": "global_maxpool1d", "inputs": ["a"]},
      {"name": "gavg", "type": "global_avgpool1d", "inputs": ["c1"]},
      {"name": "both", "type": "concatenate", "inputs": ["gmax", "gavg"]},
      {"type": "dense", "units": 2}]})");
  const std::vector<Shape> shapes = infer_shapes(spec);
  CHECK(shapes[1] == Shape{9, 4});
  CHECK(shapes[2] == Shape{4, 4});
  CHECK(shapes[3] == Shape{2, 3});
  CHECK(shapes[7] == Shape{7});
  check_gradients(spec, 3, 77, GradientCheck{{}, [](Problem& p) {
                    for (size_t i = 0; i < p.inputs.size(); ++i) p.inputs[i] = static_cast<double>((i * 5 + 1) % 7);
                  }});
}

TEST_CASE("1-D layers in JSON: a round trip, lengths as integers, and the checks naming the field") {
  const ModelSpec spec = spec_of(R"({"input_shape": [20, 8], "layers": [
      {"type": "conv1d", "filters": 5, "kernel_size": 3, "strides": 2, "padding": "same", "activation": "relu"},
      {"type": "conv1d", "filters": 4, "kernel_size": [2], "dilation_rate": 3, "use_bias": false},
      {"type": "maxpool1d", "pool_size": 2, "strides": 1},
      {"type": "global_avgpool1d"}, {"type": "dense", "units": 2}]})");
  const std::string json = model_spec_to_json(spec);
  CHECK(json.find(R"("type":"conv1d","filters":5,"kernel_size":3,"padding":"same")") != std::string::npos);
  CHECK(json.find(R"("strides":2)") != std::string::npos);
  CHECK(json.find(R"("dilation_rate":3)") != std::string::npos);
  CHECK(model_spec_to_json(parse_model_spec(json)) == json);
  const std::vector<Shape> shapes = infer_shapes(spec);
  CHECK(shapes[0] == Shape{10, 5});
  CHECK(shapes[1] == Shape{7, 4});
  CHECK(shapes[2] == Shape{6, 4});
  CHECK(shapes[3] == Shape{4});
  const auto refused = [](const std::string& model, const std::string& field) {
    CHECK_THROWS_WITH_AS(parse_model_spec(model), doctest::Contains(field.c_str()), SpecError);
  };
  refused(R"({"input_shape": [20], "layers": [{"type": "conv1d", "filters": 2, "kernel_size": 3}, {"type": "flatten"}]})",
          "/model/layers/0/type");
  refused(R"({"input_shape": [20, 2], "layers": [{"type": "conv1d", "filters": 2, "kernel_size": [3, 3]}, {"type": "flatten"}]})",
          "/model/layers/0/kernel_size");
  refused(R"({"input_shape": [4, 2], "layers": [{"type": "conv1d", "filters": 2, "kernel_size": 5}, {"type": "flatten"}]})",
          "/model/layers/0/kernel_size");
  refused(R"({"input_shape": [4, 2], "layers": [{"type": "maxpool1d", "pool_size": 6}, {"type": "flatten"}]})",
          "/model/layers/0/pool_size");
  refused(R"({"input_shape": [8, 2], "layers": [{"type": "conv1d", "filters": 2, "kernel_size": 2, "strides": 2, "dilation_rate": 2},
          {"type": "flatten"}]})", "/model/layers/0/dilation_rate");
}

TEST_CASE("1-D layers: the float engine (oneDNN convolutions, vector pooling) agrees with the double engine") {
  for (const std::string layer : {R"({"type": "conv1d", "filters": 6, "kernel_size": 3, "padding": "same", "activation": "relu"})",
                                  R"({"type": "conv1d", "filters": 5, "kernel_size": 2, "dilation_rate": 2})",
                                  R"({"type": "maxpool1d", "pool_size": 2})", R"({"type": "maxpool1d", "pool_size": 3, "strides": 1})",
                                  R"({"type": "avgpool1d", "pool_size": 2})", R"({"type": "global_maxpool1d"})",
                                  R"({"type": "global_avgpool1d"})"}) {
    CAPTURE(layer);
    const ModelSpec spec = spec_of(R"({"input_shape": [16], "seed": 8, "layers": [
        {"type": "embedding", "input_dim": 30, "output_dim": 4}, )" + layer + R"(, {"type": "flatten"}, {"type": "dense", "units": 3}]})");
    Model<double> md(spec, 4);
    Model<float> mf(spec, 4);
    Problem p = random_problem(md, 4, 9);
    for (size_t i = 0; i < p.inputs.size(); ++i) p.inputs[i] = static_cast<double>((i * 7 + 3) % 30);
    const std::vector<float> pf(p.params.begin(), p.params.end()), xf(p.inputs.begin(), p.inputs.end());
    const auto yd = md.forward(p.params.data(), p.inputs.data(), 4);
    const auto yf = mf.forward(pf.data(), xf.data(), 4);
    for (int64_t i = 0; i < yd.size(); ++i) CHECK(yf.data()[i] == doctest::Approx(yd.data()[i]).epsilon(1e-5));
  }
}
