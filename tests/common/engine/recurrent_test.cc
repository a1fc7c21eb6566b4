// lstm and gru (common/engine/nn/recurrent.h): forward and backward equal to PyTorch's LSTM and GRU
// on the same weights (tests/common/engine/recurrent_reference.py, float64 on both sides), one and
// two directions, the last state and every step's; gradients against finite differences inside a
// model (behind an embedding, stacked, bidirectional); Keras' initializers; the spec's JSON and
// checks.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/base/error.h"
#include "common/data/job_spec.h"
#include "common/engine/nn/model.h"
#include "common/engine/nn/recurrent.h"
#include "common/engine/param_layout.h"
#include "tests/common/engine/gradient_check.h"
#include "tests/common/engine/reference_files.h"
#include "tests/test_support.h"

using namespace pstrain;
using namespace pstrain::testing;
using nn::Model;

TEST_CASE("lstm and gru equal PyTorch's on the same weights: outputs and every gradient, one and two directions") {
  using Layer = nn::Recurrent<double>;
  const int64_t batch = 3, steps = 5, channels = 4, units = 6;
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> value(-0.8, 0.8);
  // Masked: a mask of trailing padding (lengths 5, 3, 1) against PyTorch's packed sequences.
  for (const bool lstm : {true, false}) {
    for (const bool bidirectional : {false, true}) {
      for (const bool sequences : {false, true}) {
       for (const bool masked : {false, true}) {
        const std::vector<int64_t> lengths = {5, 3, 1};
        const std::string name = std::string(lstm ? "lstm" : "gru") + (bidirectional ? "-bidirectional" : "") +
                                 (sequences ? "-sequences" : "") + (masked ? "-masked" : "");
        CAPTURE(name);
        const int64_t gates = (lstm ? 4 : 3) * units;
        const int64_t bias_size = (lstm ? 1 : 2) * gates;
        const size_t per_direction = static_cast<size_t>(channels * gates + units * gates + bias_size);
        const size_t directions = bidirectional ? 2 : 1;
        std::vector<double> params(directions * per_direction);
        for (double& p : params) p = value(rng);
        std::vector<Layer::Tensors> tensors;
        for (size_t d = 0; d < directions; ++d) {
          const size_t at = d * per_direction;
          tensors.push_back({at, at + static_cast<size_t>(channels * gates), at + static_cast<size_t>(channels * gates + units * gates)});
        }
        Layer layer({lstm ? Layer::Cell::kLstm : Layer::Cell::kGru, steps, channels, units, sequences}, tensors, batch);
        std::vector<double> ids(static_cast<size_t>(steps * batch));
        for (int64_t b = 0; b < batch; ++b) {
          for (int64_t t = 0; t < steps; ++t) ids[static_cast<size_t>(b * steps + t)] = t < lengths[static_cast<size_t>(b)] ? 3 : 0;
        }
        if (masked) layer.use_mask(ids.data(), steps);
        const int64_t width = static_cast<int64_t>(directions) * units;
        const int64_t out_rows = sequences ? steps * width : width;
        std::vector<double> x(static_cast<size_t>(steps * channels * batch)), out(static_cast<size_t>(out_rows * batch));
        std::vector<double> dout(out.size()), din(x.size()), grads(params.size());
        for (double& v : x) v = value(rng);
        for (double& v : dout) v = value(rng);
        layer.forward(params.data(), nn::ConstMatMap<double>(x.data(), steps * channels, batch),
                      nn::MatMap<double>(out.data(), out_rows, batch));
        std::vector<double> dout_copy = dout;  // (backward may modify its dout)
        layer.backward(params.data(), nn::ConstMatMap<double>(x.data(), steps * channels, batch),
                       nn::ConstMatMap<double>(out.data(), out_rows, batch), nn::MatMap<double>(dout_copy.data(), out_rows, batch),
                       grads.data(), din.data());
        // Column b of each buffer is example b: the arrays are [batch, ...] row-major as written.
        const TempDir dir;
        std::ofstream(dir.file("case.json")) << R"({"name": ")" << name << R"(", "cell": ")" << (lstm ? "lstm" : "gru")
                                             << R"(", "bidirectional": )" << (bidirectional ? "true" : "false")
                                             << R"(, "return_sequences": )" << (sequences ? "true" : "false") << R"(, "batch": )"
                                             << batch << R"(, "steps": )" << steps << R"(, "channels": )" << channels
                                             << R"(, "units": )" << units
                                             << (masked ? R"(, "lengths": [5, 3, 1])" : "") << "}";
        write_doubles(dir.file("x.f64"), x.data(), x.size());
        write_doubles(dir.file("dout.f64"), dout.data(), dout.size());
        write_doubles(dir.file("out.f64"), out.data(), out.size());
        write_doubles(dir.file("din.f64"), din.data(), din.size());
        for (size_t d = 0; d < directions; ++d) {
          const std::string k = std::to_string(d);
          write_doubles(dir.file("kernel" + k + ".f64"), params.data() + tensors[d].kernel, static_cast<size_t>(channels * gates));
          write_doubles(dir.file("recurrent" + k + ".f64"), params.data() + tensors[d].recurrent, static_cast<size_t>(units * gates));
          write_doubles(dir.file("bias" + k + ".f64"), params.data() + tensors[d].bias, static_cast<size_t>(bias_size));
          write_doubles(dir.file("dkernel" + k + ".f64"), grads.data() + tensors[d].kernel, static_cast<size_t>(channels * gates));
          write_doubles(dir.file("drecurrent" + k + ".f64"), grads.data() + tensors[d].recurrent, static_cast<size_t>(units * gates));
          write_doubles(dir.file("dbias" + k + ".f64"), grads.data() + tensors[d].bias, static_cast<size_t>(bias_size));
        }
        // Debian's interpreter with python3-torch (deploy/setup.sh installs it); a missing one fails.
        const std::string command = std::string("/usr/bin/python3 ") + PSTRAIN_SOURCE_DIR +
                                    "/tests/common/engine/recurrent_reference.py " + dir.path();
        CHECK_MESSAGE(std::system(command.c_str()) == 0, "failed: " << command);
       }
      }
    }
  }
}

TEST_CASE("masked lstm, gru and global 1-D pooling: finite differences with padding inside and at the end, and a mask conv1d drops") {
  // ids 0 are padding (mask_zero): at the end, inside, and one example of padding only.
  const auto ids = [](Problem& p) {
    const std::vector<double> rows = {3, 1, 0, 4, 0, 0, /**/ 2, 2, 5, 1, 7, 3, /**/ 0, 0, 0, 0, 0, 0};
    p.inputs = rows;
  };
  for (const std::string pool : {"global_avgpool1d", "global_maxpool1d"}) {
    CAPTURE(pool);
    const ModelSpec spec = parse_model_spec(R"({"input_shape": [6], "seed": 6, "layers": [
        {"name": "vectors", "type": "embedding", "input_dim": 8, "output_dim": 3, "mask_zero": true},
        {"name": "a", "type": "lstm", "units": 3, "return_sequences": true},
        {"name": "drop", "type": "dropout", "rate": 0.25},
        {"name": "b", "type": "gru", "units": 2, "bidirectional": true, "return_sequences": true},
        {"name": "pooled", "type": ")" + pool + R"("},
        {"name": "last", "type": "lstm", "units": 2, "bidirectional": true, "inputs": ["vectors"]},
        {"name": "both", "type": "concatenate", "inputs": ["pooled", "last"]},
        {"type": "dense", "units": 2}]})");
    check_gradients(spec, 3, 93, GradientCheck{{}, ids});
  }
  // The mask changes what is computed: padding at the end (masked) differs from the same ids
  // unmasked, and an LSTM's last state over [a, b, 0, 0] (masked) is its state after [a, b].
  const auto last_state = [](const std::vector<double>& input, bool mask_zero) {
    const ModelSpec spec = parse_model_spec(std::string(R"({"input_shape": [)") + std::to_string(input.size()) +
                                            R"(], "seed": 6, "layers": [
        {"type": "embedding", "input_dim": 8, "output_dim": 3, "mask_zero": )" + (mask_zero ? "true" : "false") + R"(},
        {"type": "lstm", "units": 3}]})");
    Model<double> model(spec, 1);
    std::vector<double> params(model.layout().total_size());
    std::vector<float> init(params.size());
    glorot_uniform_init(model.layout(), spec.seed, init.data());
    for (size_t k = 0; k < params.size(); ++k) params[k] = init[k];
    const auto y = model.forward(params.data(), input.data(), 1);
    return std::vector<double>(y.data(), y.data() + y.size());
  };
  CHECK(last_state({3, 5, 0, 0}, true) == last_state({3, 5}, false));
  CHECK(last_state({3, 5, 0, 0}, false) != last_state({3, 5}, false));
  // conv1d does not take or pass a mask: the average after it counts every step.
  const ModelSpec conv = parse_model_spec(R"({"input_shape": [4], "layers": [
      {"type": "embedding", "input_dim": 8, "output_dim": 2, "mask_zero": true},
      {"type": "conv1d", "filters": 2, "kernel_size": 1, "use_bias": false}, {"type": "global_avgpool1d"}]})");
  Model<double> model(conv, 1);
  std::vector<double> params(model.layout().total_size(), 1.0);  // kernel ones
  const ParamInfo* table = model.layout().find("layers.0.embeddings");
  for (int64_t id = 0; id < 8; ++id) params[table->offset + 2 * id] = params[table->offset + 2 * id + 1] = double(id);
  const std::vector<double> input = {1, 2, 0, 0};
  const auto y = model.forward(params.data(), input.data(), 1);
  CHECK(y(0, 0) == 1.5);  // steps 2, 4, 0, 0: their mean (the padding counted), not 3
  CHECK_THROWS_AS(parse_model_spec(R"({"input_shape": [4], "layers": [
      {"type": "embedding", "input_dim": 8, "output_dim": 2, "mask_zero": true, "combiner": "mean"}]})"), SpecError);
}

TEST_CASE("lstm and gru gradients inside a model: finite differences behind an embedding, stacked and bidirectional") {
  const ModelSpec spec = parse_model_spec(R"({"input_shape": [6], "seed": 4, "layers": [
      {"type": "embedding", "input_dim": 9, "output_dim": 3},
      {"type": "lstm", "units": 4, "return_sequences": true},
      {"type": "gru", "units": 3, "bidirectional": true, "return_sequences": true},
      {"type": "lstm", "units": 2, "bidirectional": true},
      {"type": "dense", "units": 2}]})");
  const std::vector<Shape> shapes = infer_shapes(spec);
  CHECK(shapes[1] == Shape{6, 4});
  CHECK(shapes[2] == Shape{6, 6});
  CHECK(shapes[3] == Shape{4});
  check_gradients(spec, 3, 91, GradientCheck{{}, [](Problem& p) {
                    for (size_t i = 0; i < p.inputs.size(); ++i) p.inputs[i] = static_cast<double>((i * 4 + 2) % 9);
                  }});
  // A GRU over numbers ([steps, channels] input), its last state regressed.
  const ModelSpec series = parse_model_spec(R"({"input_shape": [7, 2], "seed": 5, "layers": [
      {"type": "gru", "units": 5}, {"type": "dense", "units": 1}]})");
  check_gradients(series, 4, 92, GradientCheck{LossSpec{LossType::kMeanSquaredError}, {}});
}

TEST_CASE("lstm and gru tensors: Keras' names, shapes and initializers (orthogonal recurrent kernel, forget bias 1)") {
  const ModelSpec spec = parse_model_spec(R"({"input_shape": [5, 3], "seed": 7, "layers": [
      {"name": "rnn", "type": "lstm", "units": 4, "bidirectional": true, "return_sequences": true},
      {"name": "g", "type": "gru", "units": 2}, {"type": "dense", "units": 2}]})");
  const ParamLayout layout = make_param_layout(spec);
  REQUIRE(layout.find("layers.rnn.forward.kernel") != nullptr);
  CHECK(layout.find("layers.rnn.forward.kernel")->shape == Shape{3, 16});
  CHECK(layout.find("layers.rnn.backward.recurrent_kernel")->shape == Shape{4, 16});
  CHECK(layout.find("layers.rnn.backward.bias")->shape == Shape{16});
  CHECK(layout.find("layers.g.kernel")->shape == Shape{8, 6});
  CHECK(layout.find("layers.g.bias")->shape == Shape{2, 6});
  std::vector<float> params(layout.total_size());
  glorot_uniform_init(layout, spec.seed, params.data());
  const ParamInfo* bias = layout.find("layers.rnn.forward.bias");
  for (int64_t j = 0; j < 16; ++j) CHECK(params[bias->offset + j] == (j >= 4 && j < 8 ? 1.0f : 0.0f));
  // The recurrent kernel's rows are orthonormal ([4, 16]: 4 rows of 16).
  const ParamInfo* rec = layout.find("layers.rnn.forward.recurrent_kernel");
  for (int a = 0; a < 4; ++a) {
    for (int b = 0; b < 4; ++b) {
      double dot = 0;
      for (int k = 0; k < 16; ++k) dot += double{params[rec->offset + a * 16 + k]} * params[rec->offset + b * 16 + k];
      CHECK(dot == doctest::Approx(a == b ? 1.0 : 0.0).epsilon(1e-5).scale(1.0));
    }
  }
  // GRU: [2, 6] square-ish recurrent kernel, orthonormal rows too; its bias zeros.
  const ParamInfo* g_bias = layout.find("layers.g.bias");
  for (int64_t j = 0; j < 12; ++j) CHECK(params[g_bias->offset + j] == 0.0f);
  std::vector<float> again(layout.total_size());
  glorot_uniform_init(layout, spec.seed, again.data());
  CHECK(again == params);  // a pure function of the seed
}

TEST_CASE("lstm and gru in JSON: a round trip and the checks naming the field") {
  const ModelSpec spec = parse_model_spec(R"({"input_shape": [10], "layers": [
      {"type": "embedding", "input_dim": 50, "output_dim": 8},
      {"type": "lstm", "units": 16, "return_sequences": true, "bidirectional": true},
      {"type": "gru", "units": 8}, {"type": "dense", "units": 2}]})");
  const std::string json = model_spec_to_json(spec);
  CHECK(json.find(R"({"type":"lstm","units":16,"return_sequences":true,"bidirectional":true})") != std::string::npos);
  CHECK(json.find(R"({"type":"gru","units":8})") != std::string::npos);
  CHECK(model_spec_to_json(parse_model_spec(json)) == json);
  const auto refused = [](const std::string& model, const std::string& field) {
    CHECK_THROWS_WITH_AS(parse_model_spec(model), doctest::Contains(field.c_str()), SpecError);
  };
  refused(R"({"input_shape": [10], "layers": [{"type": "lstm", "units": 4}, {"type": "dense", "units": 2}]})", "/model/layers/0/type");
  refused(R"({"input_shape": [10, 2], "layers": [{"type": "gru"}, {"type": "dense", "units": 2}]})", "/model/layers/0/units");
  refused(R"({"input_shape": [10, 2], "layers": [{"type": "gru", "units": 2, "activation": "relu"}, {"type": "dense", "units": 2}]})",
          "/model/layers/0/activation");
  refused(R"({"input_shape": [10, 2], "layers": [{"type": "lstm", "units": 2, "return_sequences": true}, {"type": "global_maxpool2d"}]})",
          "/model/layers/1/type");
}

TEST_CASE("float lstm and gru (their float tanh) against the double layers on the same weights") {
  const int64_t batch = 4, steps = 30, channels = 3, units = 5;
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<double> value(-1.5, 1.5);  // gates well into tanh's curved part
  for (const bool lstm : {true, false}) {
    CAPTURE(lstm);
    const int64_t gates = (lstm ? 4 : 3) * units, bias_size = (lstm ? 1 : 2) * gates;
    std::vector<double> params(static_cast<size_t>(channels * gates + units * gates + bias_size));
    for (double& p : params) p = value(rng);
    const std::vector<nn::Recurrent<double>::Tensors> t64 = {{0, static_cast<size_t>(channels * gates),
                                                              static_cast<size_t>(channels * gates + units * gates)}};
    const std::vector<nn::Recurrent<float>::Tensors> t32 = {{t64[0].kernel, t64[0].recurrent, t64[0].bias}};
    nn::Recurrent<double> wide({lstm ? nn::Recurrent<double>::Cell::kLstm : nn::Recurrent<double>::Cell::kGru, steps, channels, units, true},
                               t64, batch);
    nn::Recurrent<float> narrow({lstm ? nn::Recurrent<float>::Cell::kLstm : nn::Recurrent<float>::Cell::kGru, steps, channels, units, true},
                                t32, batch);
    const int64_t rows = steps * units;
    std::vector<double> x(static_cast<size_t>(steps * channels * batch)), dout(static_cast<size_t>(rows * batch));
    for (double& v : x) v = value(rng);
    for (double& v : dout) v = value(rng);
    std::vector<double> out64(dout.size()), din64(x.size()), grads64(params.size()), d64 = dout;
    wide.forward(params.data(), nn::ConstMatMap<double>(x.data(), steps * channels, batch), nn::MatMap<double>(out64.data(), rows, batch));
    wide.backward(params.data(), nn::ConstMatMap<double>(x.data(), steps * channels, batch), nn::ConstMatMap<double>(out64.data(), rows, batch),
                  nn::MatMap<double>(d64.data(), rows, batch), grads64.data(), din64.data());
    const std::vector<float> p32(params.begin(), params.end()), x32(x.begin(), x.end());
    std::vector<float> out32(dout.size()), din32(x.size()), grads32(params.size()), d32(dout.begin(), dout.end());
    narrow.forward(p32.data(), nn::ConstMatMap<float>(x32.data(), steps * channels, batch), nn::MatMap<float>(out32.data(), rows, batch));
    narrow.backward(p32.data(), nn::ConstMatMap<float>(x32.data(), steps * channels, batch), nn::ConstMatMap<float>(out32.data(), rows, batch),
                    nn::MatMap<float>(d32.data(), rows, batch), grads32.data(), din32.data());
    const auto worst = [](const std::vector<double>& a, const std::vector<float>& b) {
      double w = 0, scale = 1e-30;
      for (size_t i = 0; i < a.size(); ++i) {
        w = std::max(w, std::abs(a[i] - static_cast<double>(b[i])));
        scale = std::max(scale, std::abs(a[i]));
      }
      return w / scale;
    };
    MESSAGE("float against double: output " << worst(out64, out32) << ", input gradient " << worst(din64, din32) << ", weight gradients "
                                             << worst(grads64, grads32));
    CHECK(worst(out64, out32) < 2e-6);
    CHECK(worst(din64, din32) < 2e-5);
    CHECK(worst(grads64, grads32) < 2e-5);
  }
}
