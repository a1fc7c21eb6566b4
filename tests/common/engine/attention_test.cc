// multi_head_attention and position_embedding (common/engine/nn/attention.h): forward and backward
// equal to Keras' formulas computed by PyTorch's autograd on the same weights
// (tests/common/engine/attention_reference.py, float64 on both sides), with and without padding,
// causal and not, with and without biases; gradients against finite differences inside a
// transformer encoder block behind a masked embedding; what the masks change; Keras' tensor
// names; the spec's JSON and checks.
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/base/error.h"
#include "common/data/job_spec.h"
#include "common/engine/nn/attention.h"
#include "common/engine/nn/model.h"
#include "common/engine/param_layout.h"
#include "tests/common/engine/gradient_check.h"
#include "tests/common/engine/reference_files.h"
#include "tests/test_support.h"

using namespace pstrain;
using namespace pstrain::testing;
using nn::Model;

namespace {


// The model's output for one example under `params` drawn from the spec's seed.
std::vector<double> outputs(const ModelSpec& spec, const std::vector<double>& input) {
  Model<double> model(spec, 1);
  std::vector<float> init(model.layout().total_size());
  glorot_uniform_init(model.layout(), spec.seed, init.data());
  const std::vector<double> params(init.begin(), init.end());
  const auto y = model.forward(params.data(), input.data(), 1);
  return std::vector<double>(y.data(), y.data() + y.size());
}

}  // namespace

TEST_CASE("multi_head_attention equals Keras' formulas in PyTorch: outputs and every gradient, masked, causal, without biases") {
  using Layer = nn::MultiHeadAttention<double>;
  // 40 steps: padding at the end, inside, an example of padding only, one of no padding, and one
  // padded on both sides whose span (attention.h) starts past step 16, the softmax lanes' width.
  const int64_t batch = 5, steps = 40, channels = 4;
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> value(-0.9, 0.9);
  std::vector<std::vector<int>> keep(batch, std::vector<int>(steps, 0));
  for (int64_t t = 0; t < steps; ++t) {
    keep[0][t] = t < 3;
    keep[1][t] = t != 1 && t != 30;
    keep[3][t] = 1;
    keep[4][t] = t >= 21 && t < 33 && t != 25;
  }
  struct Case {
    int64_t heads, key_dim, value_dim;
    bool causal, masked, bias;
  };
  for (const Case c : {Case{2, 3, 3, false, false, true}, Case{2, 3, 2, false, true, true}, Case{1, 4, 4, true, false, true},
                       Case{3, 2, 5, true, true, true}, Case{2, 2, 3, false, true, false}}) {
    const std::string name = "heads" + std::to_string(c.heads) + "-key" + std::to_string(c.key_dim) + "-value" +
                             std::to_string(c.value_dim) + (c.causal ? "-causal" : "") + (c.masked ? "-masked" : "") +
                             (c.bias ? "" : "-nobias");
    CAPTURE(name);
    const int64_t hk = c.heads * c.key_dim, hv = c.heads * c.value_dim;
    const std::vector<std::pair<std::string, std::array<int64_t, 2>>> parts = {
        {"query", {channels * hk, hk}}, {"key", {channels * hk, hk}}, {"value", {channels * hv, hv}}, {"output", {hv * channels, channels}}};
    Layer::Tensors w;
    size_t at = 0;
    std::vector<size_t> kernel_at, bias_at;
    for (const auto& [part, sizes] : parts) {
      kernel_at.push_back(at);
      at += static_cast<size_t>(sizes[0]);
      bias_at.push_back(c.bias ? at : Layer::kNoBias);
      if (c.bias) at += static_cast<size_t>(sizes[1]);
    }
    w = {kernel_at[0], bias_at[0], kernel_at[1], bias_at[1], kernel_at[2], bias_at[2], kernel_at[3], bias_at[3]};
    std::vector<double> params(at);
    for (double& p : params) p = value(rng);
    Layer layer({steps, channels, c.heads, c.key_dim, c.value_dim, c.causal}, w, batch);
    std::vector<double> ids(static_cast<size_t>(steps * batch));
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t t = 0; t < steps; ++t) ids[static_cast<size_t>(b * steps + t)] = keep[b][t] != 0 ? 2 : 0;
    }
    if (c.masked) layer.use_mask(ids.data(), steps);
    const int64_t rows = steps * channels;
    std::vector<double> x(static_cast<size_t>(rows * batch)), out(x.size()), dout(x.size()), din(x.size()), grads(params.size());
    for (double& v : x) v = value(rng);
    for (double& v : dout) v = value(rng);
    layer.forward(params.data(), nn::ConstMatMap<double>(x.data(), rows, batch), nn::MatMap<double>(out.data(), rows, batch));
    std::vector<double> dout_copy = dout;
    layer.backward(params.data(), nn::ConstMatMap<double>(x.data(), rows, batch), nn::ConstMatMap<double>(out.data(), rows, batch),
                   nn::MatMap<double>(dout_copy.data(), rows, batch), grads.data(), din.data());
    const TempDir dir;
    std::string keep_json = "[";
    for (int64_t b = 0; b < batch; ++b) {
      keep_json += b ? ", [" : "[";
      for (int64_t t = 0; t < steps; ++t) keep_json += std::string(t ? ", " : "") + (c.masked && keep[b][t] == 0 ? "0" : "1");
      keep_json += "]";
    }
    keep_json += "]";
    std::ofstream(dir.file("case.json")) << R"({"name": ")" << name << R"(", "batch": )" << batch << R"(, "steps": )" << steps
                                         << R"(, "channels": )" << channels << R"(, "heads": )" << c.heads << R"(, "key_dim": )"
                                         << c.key_dim << R"(, "value_dim": )" << c.value_dim << R"(, "causal": )"
                                         << (c.causal ? "true" : "false") << R"(, "use_bias": )" << (c.bias ? "true" : "false")
                                         << R"(, "keep": )" << keep_json << "}";
    write_doubles(dir.file("x.f64"), x.data(), x.size());
    write_doubles(dir.file("dout.f64"), dout.data(), dout.size());
    write_doubles(dir.file("out.f64"), out.data(), out.size());
    write_doubles(dir.file("din.f64"), din.data(), din.size());
    for (size_t k = 0; k < parts.size(); ++k) {
      const auto& [part, sizes] = parts[k];
      write_doubles(dir.file(part + "_kernel.f64"), params.data() + kernel_at[k], static_cast<size_t>(sizes[0]));
      write_doubles(dir.file("d" + part + "_kernel.f64"), grads.data() + kernel_at[k], static_cast<size_t>(sizes[0]));
      if (!c.bias) continue;
      write_doubles(dir.file(part + "_bias.f64"), params.data() + bias_at[k], static_cast<size_t>(sizes[1]));
      write_doubles(dir.file("d" + part + "_bias.f64"), grads.data() + bias_at[k], static_cast<size_t>(sizes[1]));
    }
    // Debian's interpreter with python3-torch (deploy/setup.sh installs it); a missing one fails.
    const std::string command =
        std::string("/usr/bin/python3 ") + PSTRAIN_SOURCE_DIR + "/tests/common/engine/attention_reference.py " + dir.path();
    CHECK_MESSAGE(std::system(command.c_str()) == 0, "failed: " << command);
  }
}

TEST_CASE("a transformer encoder block: finite differences behind a masked embedding, causal and not, with attention dropout") {
  // ids 0 are padding: at the end, inside, and one example of padding only.
  const auto ids = [](Problem& p) {
    p.inputs = {3, 1, 0, 4, 0, 0, /**/ 2, 2, 5, 1, 7, 3, /**/ 0, 0, 0, 0, 0, 0};
  };
  for (const bool causal : {false, true}) {
    for (const bool mask_zero : {true, false}) {
      CAPTURE(causal);
      CAPTURE(mask_zero);
      const std::string flag = causal ? "true" : "false";
      // The masked causal block also drops its attention weights (training: the check's keys).
      const std::string dropout = causal && mask_zero ? R"(, "dropout": 0.3)" : "";
      const ModelSpec spec = parse_model_spec(std::string(R"({"input_shape": [6], "seed": 8, "layers": [
          {"name": "tokens", "type": "embedding", "input_dim": 8, "output_dim": 4, "mask_zero": )") + (mask_zero ? "true" : "false") + R"(},
          {"name": "x", "type": "position_embedding"},
          {"name": "attend", "type": "multi_head_attention", "num_heads": 2, "key_dim": 3, "value_dim": 2, "use_causal_mask": )" + flag + dropout + R"(},
          {"name": "sum1", "type": "add", "inputs": ["x", "attend"]},
          {"name": "norm1", "type": "layer_norm"},
          {"name": "ff1", "type": "conv1d", "filters": 5, "kernel_size": 1, "activation": "relu"},
          {"name": "ff2", "type": "conv1d", "filters": 4, "kernel_size": 1},
          {"name": "sum2", "type": "add", "inputs": ["norm1", "ff2"]},
          {"name": "norm2", "type": "layer_norm"},
          {"type": "global_avgpool1d"},
          {"type": "dense", "units": 3}]})");
      check_gradients(spec, 3, 95, GradientCheck{{}, ids});
    }
  }
}

TEST_CASE("finite differences over spans past step 16: padding before and after, causal, with attention dropout") {
  // 40 steps: example 0's span is [16, 33) (padding before step 21, inside at 25, after 32),
  // example 1 has no padding, example 2 only its first 5 steps.
  const auto ids = [](Problem& p) {
    p.inputs.assign(3 * 40, 0.0);
    for (int64_t t = 0; t < 40; ++t) {
      if (t >= 21 && t < 33 && t != 25) p.inputs[static_cast<size_t>(t)] = static_cast<double>(1 + t % 7);
      p.inputs[static_cast<size_t>(40 + t)] = static_cast<double>(1 + (t * 3) % 7);
      if (t < 5) p.inputs[static_cast<size_t>(80 + t)] = static_cast<double>(1 + t);
    }
  };
  for (const bool causal : {false, true}) {
    CAPTURE(causal);
    const ModelSpec spec = parse_model_spec(std::string(R"({"input_shape": [40], "seed": 9, "layers": [
        {"name": "tokens", "type": "embedding", "input_dim": 8, "output_dim": 4, "mask_zero": true},
        {"name": "x", "type": "position_embedding"},
        {"name": "attend", "type": "multi_head_attention", "num_heads": 2, "key_dim": 3, "value_dim": 2, "dropout": 0.3,
         "use_causal_mask": )") + (causal ? "true" : "false") + R"(},
        {"name": "sum1", "type": "add", "inputs": ["x", "attend"]},
        {"type": "global_avgpool1d"},
        {"type": "dense", "units": 3}]})");
    check_gradients(spec, 3, 96, GradientCheck{{}, ids});
  }
}

TEST_CASE("causal attention in blocks: finite differences over spans of four blocks, padding inside, with dropout") {
  // 100 steps, blocks of 32 queries (attention.h): example 0's span is [16, 100) (padding before
  // step 20 and at 57: blocks whose keys start before their queries, a middle block seeing keys of
  // two earlier blocks, a last partial block), example 1 has none ([0, 100): four blocks, the last
  // of 4 queries), example 2 only its first 40 steps.
  const auto ids = [](Problem& p) {
    p.inputs.assign(3 * 100, 0.0);
    for (int64_t t = 0; t < 100; ++t) {
      if (t >= 20 && t != 57) p.inputs[static_cast<size_t>(t)] = static_cast<double>(1 + t % 7);
      p.inputs[static_cast<size_t>(100 + t)] = static_cast<double>(1 + (t * 3) % 7);
      if (t < 40) p.inputs[static_cast<size_t>(200 + t)] = static_cast<double>(1 + t % 5);
    }
  };
  const ModelSpec spec = parse_model_spec(R"({"input_shape": [100], "seed": 11, "layers": [
      {"name": "tokens", "type": "embedding", "input_dim": 8, "output_dim": 4, "mask_zero": true},
      {"name": "x", "type": "position_embedding"},
      {"name": "attend", "type": "multi_head_attention", "num_heads": 2, "key_dim": 3, "value_dim": 2, "dropout": 0.3,
       "use_causal_mask": true},
      {"name": "sum1", "type": "add", "inputs": ["x", "attend"]},
      {"type": "global_avgpool1d"},
      {"type": "dense", "units": 3}]})");
  check_gradients(spec, 3, 97, GradientCheck{{}, ids});
}

TEST_CASE("attention masks: padding changes nothing, a causal step sees only the past, masks flow through residual adds") {
  // Padding: the pooled output over [3, 5, 0, 0] masked is the one over [3, 5] (attention's
  // tensors do not depend on the steps), and the padding's own vectors do not matter.
  const auto block = [](int64_t steps, bool mask_zero, bool causal) {
    return parse_model_spec(R"({"input_shape": [)" + std::to_string(steps) + R"(], "seed": 3, "layers": [
        {"name": "e", "type": "embedding", "input_dim": 8, "output_dim": 4, "mask_zero": )" + (mask_zero ? "true" : "false") + R"(},
        {"name": "a", "type": "multi_head_attention", "num_heads": 2, "key_dim": 2, "use_causal_mask": )" +
                            (causal ? "true" : "false") + R"(},
        {"type": "add", "inputs": ["e", "a"]},
        {"type": "global_avgpool1d"}]})");
  };
  const std::vector<double> short_out = outputs(block(2, false, false), {3, 5});
  const std::vector<double> padded = outputs(block(4, true, false), {3, 5, 0, 0});
  REQUIRE(short_out.size() == padded.size());
  for (size_t k = 0; k < padded.size(); ++k) CHECK(padded[k] == doctest::Approx(short_out[k]).epsilon(1e-12));
  CHECK(outputs(block(4, false, false), {3, 5, 0, 0}) != padded);  // unmasked, the padding counts
  // Causal: the first steps' outputs do not depend on the later steps (the model's every-step output).
  const auto sequence = [](bool causal) {
    return parse_model_spec(std::string(R"({"input_shape": [4], "seed": 3, "layers": [
        {"type": "embedding", "input_dim": 8, "output_dim": 4},
        {"type": "multi_head_attention", "num_heads": 2, "key_dim": 2, "use_causal_mask": )") + (causal ? "true" : "false") + R"(},
        {"type": "flatten"}]})");
  };
  const std::vector<double> a = outputs(sequence(true), {3, 5, 1, 6}), b = outputs(sequence(true), {3, 5, 7, 2});
  for (size_t k = 0; k < 8; ++k) CHECK(a[k] == b[k]);  // steps 0 and 1: 2 x 4 values
  CHECK(a[8] != b[8]);
  const std::vector<double> c = outputs(sequence(false), {3, 5, 1, 6}), d = outputs(sequence(false), {3, 5, 7, 2});
  CHECK(c[0] != d[0]);  // not causal: step 0 sees step 2
}

TEST_CASE("attention over spans: a padded batch after an unpadded one has a fresh layer's bits, dropout too, causal too") {
  // The layer computes each example's span only (attention.h), causal in blocks, and reuses its
  // buffers: whatever an earlier batch left outside a span or a block's keys must not reach the
  // outputs or the gradients (float engine, bit for bit; the same shapes on both sides, so the
  // same products).
  for (const bool causal : {false, true}) {
    CAPTURE(causal);
    const std::string mask = causal ? R"(, "use_causal_mask": true)" : "";
    const ModelSpec spec = parse_model_spec(R"({"input_shape": [40], "seed": 5, "layers": [
        {"name": "e", "type": "embedding", "input_dim": 30, "output_dim": 8, "mask_zero": true},
        {"name": "a", "type": "multi_head_attention", "num_heads": 2, "key_dim": 4, "dropout": 0.2)" + mask + R"(},
        {"type": "add", "inputs": ["e", "a"]},
        {"type": "global_avgpool1d"}, {"type": "dense", "units": 3}]})");
    const int64_t batch = 3, steps = 40;
    std::vector<float> full(static_cast<size_t>(batch * steps)), padded(full.size(), 0.0f);
    for (size_t k = 0; k < full.size(); ++k) full[k] = static_cast<float>(1 + (k * 7) % 29);
    for (int64_t t = 0; t < steps; ++t) {
      if (t < 9) padded[static_cast<size_t>(t)] = static_cast<float>(1 + t);                  // trailing padding
      if (t >= 18 && t < 27) padded[static_cast<size_t>(steps + t)] = static_cast<float>(t);  // both sides
    }  // example 2: padding only
    const std::vector<int32_t> labels = {0, 2, 1};
    const std::vector<uint32_t> ids = {4, 9, 13};
    const nn::ExampleKeys keys{1, ids.data()};
    nn::Model<float> reused(spec, batch), fresh(spec, batch);
    std::vector<float> params(reused.layout().total_size());
    glorot_uniform_init(reused.layout(), spec.seed, params.data());
    std::vector<float> g_reused(params.size()), g_fresh(params.size());
    reused.compute_gradients(params.data(), full.data(), labels.data(), batch, g_reused.data(), {}, nullptr, keys);
    const auto train = [&](nn::Model<float>& model, std::vector<float>& grads) {
      return model.compute_gradients(params.data(), padded.data(), labels.data(), batch, grads.data(), {}, nullptr, keys);
    };
    const float loss_reused = train(reused, g_reused).loss_sum, loss_fresh = train(fresh, g_fresh).loss_sum;
    CHECK(loss_reused == loss_fresh);
    CHECK(g_reused == g_fresh);
    const auto y_fresh = fresh.forward(params.data(), padded.data(), batch);
    const std::vector<float> first(y_fresh.data(), y_fresh.data() + y_fresh.size());
    reused.forward(params.data(), full.data(), batch);
    const auto y_reused = reused.forward(params.data(), padded.data(), batch);
    CHECK(std::vector<float>(y_reused.data(), y_reused.data() + y_reused.size()) == first);
    // Every step's output (the padding's too: the output bias there), not only the pooled ones.
    const ModelSpec every_step = parse_model_spec(R"({"input_shape": [40], "seed": 5, "layers": [
        {"name": "e", "type": "embedding", "input_dim": 30, "output_dim": 8, "mask_zero": true},
        {"name": "a", "type": "multi_head_attention", "num_heads": 2, "key_dim": 4)" + mask + R"(},
        {"type": "flatten"}]})");
    nn::Model<float> steps_reused(every_step, batch), steps_fresh(every_step, batch);
    std::vector<float> steps_params(steps_reused.layout().total_size());
    glorot_uniform_init(steps_reused.layout(), every_step.seed, steps_params.data());
    const auto fresh_steps = steps_fresh.forward(steps_params.data(), padded.data(), batch);
    const std::vector<float> expected(fresh_steps.data(), fresh_steps.data() + fresh_steps.size());
    steps_reused.forward(steps_params.data(), full.data(), batch);
    const auto reused_steps = steps_reused.forward(steps_params.data(), padded.data(), batch);
    CHECK(std::vector<float>(reused_steps.data(), reused_steps.data() + reused_steps.size()) == expected);
  }
}

TEST_CASE("attention tensors: Keras' names, shapes and initializers, and position_embedding's") {
  const ModelSpec spec = parse_model_spec(R"({"input_shape": [6], "seed": 9, "layers": [
      {"type": "embedding", "input_dim": 20, "output_dim": 8},
      {"name": "pos", "type": "position_embedding"},
      {"name": "mha", "type": "multi_head_attention", "num_heads": 4, "key_dim": 3, "value_dim": 5},
      {"name": "plain", "type": "multi_head_attention", "num_heads": 1, "key_dim": 2, "use_bias": false},
      {"type": "global_maxpool1d"}, {"type": "dense", "units": 2}]})");
  const std::vector<Shape> shapes = infer_shapes(spec);
  CHECK(shapes[1] == Shape{6, 8});
  CHECK(shapes[2] == Shape{6, 8});
  const ParamLayout layout = make_param_layout(spec);
  CHECK(layout.find("layers.pos.embeddings")->shape == Shape{6, 8});
  CHECK(layout.find("layers.mha.query.kernel")->shape == Shape{8, 4, 3});
  CHECK(layout.find("layers.mha.key.bias")->shape == Shape{4, 3});
  CHECK(layout.find("layers.mha.value.kernel")->shape == Shape{8, 4, 5});
  CHECK(layout.find("layers.mha.attention_output.kernel")->shape == Shape{4, 5, 8});
  CHECK(layout.find("layers.mha.attention_output.bias")->shape == Shape{8});
  CHECK(layout.find("layers.plain.query.bias") == nullptr);
  CHECK(layout.find("layers.plain.attention_output.kernel")->shape == Shape{1, 2, 8});
  std::vector<float> params(layout.total_size());
  glorot_uniform_init(layout, spec.seed, params.data());
  // Glorot with Keras' fans for a 3-D kernel: [8, 4, 3]: fan_in 4 x 8, fan_out 3 x 8.
  const ParamInfo* query = layout.find("layers.mha.query.kernel");
  const float limit = std::sqrt(6.0f / (32 + 24));
  float largest = 0;
  for (size_t k = 0; k < query->size; ++k) largest = std::max(largest, std::abs(params[query->offset + k]));
  CHECK(largest <= limit);
  CHECK(largest > 0.8f * limit);
  const ParamInfo* bias = layout.find("layers.mha.query.bias");
  for (size_t k = 0; k < bias->size; ++k) CHECK(params[bias->offset + k] == 0.0f);
  const ParamInfo* positions = layout.find("layers.pos.embeddings");
  for (size_t k = 0; k < positions->size; ++k) CHECK(std::abs(params[positions->offset + k]) <= 0.05f);
}

TEST_CASE("attention dropout: inference is the layer without it, training drops by the examples' keys whatever the batch") {
  const auto spec_with = [](const std::string& dropout) {
    return parse_model_spec(R"({"input_shape": [5], "seed": 4, "layers": [
        {"type": "embedding", "input_dim": 9, "output_dim": 4},
        {"name": "attend", "type": "multi_head_attention", "num_heads": 2, "key_dim": 3)" + dropout + R"(},
        {"type": "global_avgpool1d"}, {"type": "dense", "units": 3}]})");
  };
  Model<double> dropping(spec_with(R"(, "dropout": 0.5)"), 2), plain(spec_with(""), 2);
  REQUIRE(dropping.needs_keys());
  CHECK_FALSE(plain.needs_keys());
  std::vector<float> init(plain.layout().total_size());
  glorot_uniform_init(plain.layout(), 4, init.data());
  const std::vector<double> params(init.begin(), init.end());
  const std::vector<double> inputs = {1, 2, 3, 4, 5, /**/ 8, 7, 6, 5, 4};
  const std::vector<int32_t> labels = {0, 2};
  const std::vector<uint32_t> ids = {10, 11};
  // Inference: the same bits as the layer without dropout.
  CHECK(dropping.evaluate(params.data(), inputs.data(), labels.data(), 2).loss_sum ==
        plain.evaluate(params.data(), inputs.data(), labels.data(), 2).loss_sum);
  // Training: the weights are dropped (another loss), the same draws on repeat.
  const nn::ExampleKeys keys{1, ids.data()};
  const double trained = dropping.evaluate(params.data(), inputs.data(), labels.data(), 2, keys).loss_sum;
  CHECK(trained != plain.evaluate(params.data(), inputs.data(), labels.data(), 2).loss_sum);
  CHECK(dropping.evaluate(params.data(), inputs.data(), labels.data(), 2, keys).loss_sum == trained);
  // An example's draws are its own: alone in a batch it loses what it lost beside the other.
  const double first = dropping.evaluate(params.data(), inputs.data(), labels.data(), 1, keys).loss_sum;
  const nn::ExampleKeys second_keys{1, ids.data() + 1};
  const double second = dropping.evaluate(params.data(), inputs.data() + 5, labels.data() + 1, 1, second_keys).loss_sum;
  CHECK(first + second == doctest::Approx(trained).epsilon(1e-14));
  // Another epoch draws again.
  CHECK(dropping.evaluate(params.data(), inputs.data(), labels.data(), 2, nn::ExampleKeys{2, ids.data()}).loss_sum != trained);
}

TEST_CASE("attention in JSON: a round trip and the checks naming the field") {
  const ModelSpec spec = parse_model_spec(R"({"input_shape": [10], "layers": [
      {"type": "embedding", "input_dim": 50, "output_dim": 8, "mask_zero": true},
      {"type": "position_embedding"},
      {"type": "multi_head_attention", "num_heads": 2, "key_dim": 4, "value_dim": 3, "use_causal_mask": true, "use_bias": false, "dropout": 0.25},
      {"type": "global_avgpool1d"}, {"type": "dense", "units": 2}]})");
  const std::string json = model_spec_to_json(spec);
  CHECK(json.find(R"({"type":"position_embedding"})") != std::string::npos);
  CHECK(json.find(R"({"type":"multi_head_attention","num_heads":2,"key_dim":4,"value_dim":3,"use_causal_mask":true,"use_bias":false,"dropout":2.5E-1})") !=
        std::string::npos);
  CHECK(model_spec_to_json(parse_model_spec(json)) == json);
  const auto refused = [](const std::string& model, const std::string& field) {
    CHECK_THROWS_WITH_AS(parse_model_spec(model), doctest::Contains(field.c_str()), SpecError);
  };
  refused(R"({"input_shape": [10], "layers": [{"type": "multi_head_attention", "num_heads": 2, "key_dim": 2}, {"type": "dense", "units": 2}]})",
          "/model/layers/0/type");
  refused(R"({"input_shape": [10, 4], "layers": [{"type": "multi_head_attention", "key_dim": 2}, {"type": "flatten"}]})",
          "/model/layers/0/num_heads");
  refused(R"({"input_shape": [10, 4], "layers": [{"type": "multi_head_attention", "num_heads": 2, "key_dim": 0}, {"type": "flatten"}]})",
          "/model/layers/0/key_dim");
  refused(R"({"input_shape": [10, 4], "layers": [{"type": "multi_head_attention", "num_heads": 2, "key_dim": 2, "units": 3}, {"type": "flatten"}]})",
          "/model/layers/0/units");
  refused(R"({"input_shape": [4096, 4], "layers": [{"type": "multi_head_attention", "num_heads": 2, "key_dim": 2}, {"type": "flatten"}]})",
          "/model/layers/0/num_heads");
  refused(R"({"input_shape": [10], "layers": [{"type": "position_embedding"}, {"type": "dense", "units": 2}]})", "/model/layers/0/type");
  refused(R"({"input_shape": [10, 4], "layers": [{"type": "multi_head_attention", "num_heads": 2, "key_dim": 2, "dropout": 1}, {"type": "flatten"}]})",
          "/model/layers/0/dropout");
}

TEST_CASE("dense over a sequence: each step through one kernel (conv1d of width 1's bits), gradients, and the mask passes through it") {
  const auto model_with = [](const std::string& per_step) {
    return parse_model_spec(R"({"input_shape": [5], "seed": 4, "layers": [
        {"type": "embedding", "input_dim": 9, "output_dim": 3}, )" + per_step + R"(, {"type": "flatten"}]})");
  };
  const ModelSpec dense = model_with(R"({"type": "dense", "units": 4, "activation": "relu"})");
  const ModelSpec conv = model_with(R"({"type": "conv1d", "filters": 4, "kernel_size": 1, "activation": "relu"})");
  CHECK(infer_shapes(dense)[1] == Shape{5, 4});
  CHECK(make_param_layout(dense).find("layers.1.kernel")->shape == Shape{3, 4});
  const std::vector<double> ids = {3, 1, 8, 0, 2};
  CHECK(outputs(dense, ids) == outputs(conv, ids));  // the same initial values and the same kernel
  // Finite differences: a masked encoder block whose feed-forward is two dense layers.
  const ModelSpec block = parse_model_spec(R"({"input_shape": [6], "seed": 8, "layers": [
      {"name": "tokens", "type": "embedding", "input_dim": 8, "output_dim": 4, "mask_zero": true},
      {"name": "attend", "type": "multi_head_attention", "num_heads": 2, "key_dim": 2},
      {"name": "norm1", "type": "layer_norm", "inputs": ["attend"]},
      {"name": "ff1", "type": "dense", "units": 6, "activation": "gelu"},
      {"name": "ff2", "type": "dense", "units": 4},
      {"type": "add", "inputs": ["norm1", "ff2"]},
      {"type": "global_avgpool1d"}, {"type": "dense", "units": 3}]})");
  check_gradients(block, 3, 96, GradientCheck{{}, [](Problem& p) { p.inputs = {3, 1, 0, 4, 0, 0, 2, 2, 5, 1, 7, 3, 0, 0, 0, 0, 0, 0}; }});
  // The mask passes through the dense layers: padding changes nothing.
  const auto masked = [](int64_t steps, bool mask_zero) {
    return parse_model_spec(R"({"input_shape": [)" + std::to_string(steps) + R"(], "seed": 3, "layers": [
        {"type": "embedding", "input_dim": 8, "output_dim": 4, "mask_zero": )" + (mask_zero ? "true" : "false") + R"(},
        {"type": "dense", "units": 5, "activation": "relu"},
        {"type": "multi_head_attention", "num_heads": 1, "key_dim": 3},
        {"type": "global_maxpool1d"}]})");
  };
  const std::vector<double> short_out = outputs(masked(2, false), {3, 5}), padded = outputs(masked(4, true), {3, 5, 0, 0});
  REQUIRE(short_out.size() == padded.size());
  for (size_t k = 0; k < padded.size(); ++k) CHECK(padded[k] == doctest::Approx(short_out[k]).epsilon(1e-12));
  // An image still needs a flatten first.
  CHECK_THROWS_WITH_AS(parse_model_spec(R"({"input_shape": [4, 4, 2], "layers": [{"type": "dense", "units": 2}]})"),
                       doctest::Contains("/model/layers/0/type"), SpecError);
}
