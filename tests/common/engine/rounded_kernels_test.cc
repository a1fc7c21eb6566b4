// Mixed precision's rounded kernels (Model::rounded_kernels): the parameters a model reads only
// rounded to bfloat16, which a worker therefore takes from the servers in bfloat16
// (PushParams.replyBfloat16, docs/DESIGN-NOTES.md "bfloat16 replies"). The promise checked here:
// those values rounded beforehand, as a server rounds them, give the same loss, gradients and
// evaluation bit for bit; and a kernel left out of the list (a data-input dense layer's, whose
// sparse-input forward reads float32) would not.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/base/aligned.h"
#include "common/base/rng.h"
#include "common/data/job_spec.h"
#include "common/engine/compression.h"
#include "common/engine/nn/model.h"
#include "common/engine/nn/onednn_conv.h"

using namespace pstrain;

namespace {

constexpr int64_t kBatch = 7;

struct Run {
  nn::LossResult loss, evaluation;
  std::vector<float> grads;
};

// One step's loss and gradients, and an evaluation, of `model` at `params`; `labels` class
// labels (int32_t) or regression targets (float).
template <typename Label>
Run run(nn::Model<float>& model, const AlignedFloats& params, const std::vector<float>& inputs,
        const std::vector<Label>& labels) {
  Run r;
  AlignedFloats grads(model.layout().total_size());
  r.loss = model.compute_gradients(params.data(), inputs.data(), labels.data(), kBatch, grads.data());
  r.grads.assign(grads.begin(), grads.end());
  r.evaluation = model.evaluate(params.data(), inputs.data(), labels.data(), kBatch);
  return r;
}

bool same_bits(const Run& a, const Run& b) {
  return std::bit_cast<uint64_t>(a.loss.loss_sum) == std::bit_cast<uint64_t>(b.loss.loss_sum) &&
         std::bit_cast<uint64_t>(a.evaluation.loss_sum) == std::bit_cast<uint64_t>(b.evaluation.loss_sum) &&
         a.evaluation.correct == b.evaluation.correct &&
         std::memcmp(a.grads.data(), b.grads.data(), a.grads.size() * sizeof(float)) == 0;
}

// `params` with tensor p's values as a server's bfloat16 reply brings them.
AlignedFloats rounded(const ParamLayout& layout, const AlignedFloats& params, const std::vector<size_t>& which) {
  AlignedFloats out(params.size());
  std::copy(params.begin(), params.end(), out.begin());
  for (const size_t p : which) {
    const ParamInfo& info = layout.params()[p];
    std::vector<unsigned char> wire(info.size * 2);
    encode_rounded_bfloat16({params.data() + info.offset, info.size}, wire.data());
    decode_bfloat16(wire.data(), {out.data() + info.offset, info.size});
  }
  return out;
}

// Initial values, with every kernel also holding float32 denormals, bfloat16 ties and values a
// hair off them (where a second rounding would go wrong if the roundings differed).
AlignedFloats initial(const nn::Model<float>& model, uint64_t seed) {
  const ParamLayout& layout = model.layout();
  AlignedFloats params(layout.total_size());
  glorot_uniform_init(layout, seed, params.data());
  for (const ParamInfo& p : layout.params()) {
    if (p.role != ParamRole::kKernel || p.size < 8) continue;
    float* w = params.data() + p.offset;
    const uint32_t tie = (std::bit_cast<uint32_t>(w[2]) & 0xffff0000u) | 0x8000u;
    w[0] = 3e-39f;   // denormal
    w[1] = -1e-40f;  // denormal
    w[2] = std::bit_cast<float>(tie);
    w[3] = std::bit_cast<float>(tie + 1);
    w[4] = std::bit_cast<float>(0x007fffffu);  // the largest denormal (nearest even: the smallest normal)
  }
  return params;
}

}  // namespace

TEST_CASE("rounded kernels: a mixed-precision model computes the same bits from its kernels rounded beforehand") {
  if (!nn::onednn_bf16()) {
    MESSAGE("oneDNN runs " << std::string(nn::onednn_isa()) << " here: no bfloat16 products; float32 rounds nothing");
    nn::Model<float> model(parse_model_spec(R"({"input_shape": [6], "seed": 1, "layers": [{"type": "dense", "units": 3}]})"), kBatch);
    CHECK(model.rounded_kernels().empty());
    return;
  }
  // Convolutions (with a batch norm and pooling between), then dense layers: every kernel of it
  // is read only rounded.
  const ModelSpec conv_spec = parse_model_spec(R"({"input_shape": [9, 9, 2], "seed": 4, "layers": [
      {"type": "conv2d", "filters": 6, "kernel_size": 3, "activation": "relu"},
      {"type": "batch_norm"},
      {"type": "conv2d", "filters": 5, "kernel_size": 3, "padding": "same", "use_bias": false},
      {"type": "maxpool2d"},
      {"type": "flatten"},
      {"type": "dense", "units": 11, "activation": "relu"},
      {"type": "dense", "units": 4}]})");
  nn::Model<float> conv(conv_spec, kBatch);
  CHECK(conv.rounded_kernels().empty());  // float32 until switched
  const auto switched = conv.use_bf16_products();
  CHECK(switched.convolutions == 2);
  const std::vector<size_t> conv_rounded = conv.rounded_kernels();
  CHECK(conv_rounded.size() == 4);
  for (const size_t p : conv_rounded) CHECK(conv.layout().params()[p].role == ParamRole::kKernel);

  // On one input channel, the first convolution is the one-channel method's: float32 in mixed
  // precision too, so its kernel is not listed.
  nn::Model<float> gray(parse_model_spec(R"({"input_shape": [9, 9, 1], "seed": 4, "layers": [
      {"type": "conv2d", "filters": 6, "kernel_size": 3, "activation": "relu"},
      {"type": "conv2d", "filters": 5, "kernel_size": 3},
      {"type": "flatten"},
      {"type": "dense", "units": 4}]})"),
                        kBatch);
  const auto gray_switched = gray.use_bf16_products();
  CHECK(gray_switched.one_channel == 1);
  CHECK(gray_switched.convolutions == 1);
  const auto& gray_params = gray.layout().params();
  const auto gray_first = static_cast<size_t>(std::find_if(gray_params.begin(), gray_params.end(), [](const auto& p) {
                                                  return p.role == ParamRole::kKernel;
                                                }) - gray_params.begin());
  const std::vector<size_t> gray_rounded = gray.rounded_kernels();
  CHECK(gray_rounded.size() == 2);  // the second convolution's and the dense layer's
  CHECK(std::find(gray_rounded.begin(), gray_rounded.end(), gray_first) == gray_rounded.end());

  Rng rng(5);
  std::vector<float> images(static_cast<size_t>(conv.input_size() * kBatch));
  for (float& v : images) v = rng.uniform_float(-1.0f, 1.0f);
  std::vector<int32_t> classes(kBatch);
  for (int32_t& c : classes) c = static_cast<int32_t>(rng.uniform_index(4));
  const AlignedFloats conv_params = initial(conv, 4);
  const Run plain = run(conv, conv_params, images, classes);
  const Run from_rounded = run(conv, rounded(conv.layout(), conv_params, conv_rounded), images, classes);
  CHECK(same_bits(plain, from_rounded));

  // A kernel of nothing but float32's largest denormal (which rounds to 2^-126 to nearest even, and
  // to zero flushed), between layers whose values are large: its products are about 1e-36 or
  // exactly zero, so they show how it was rounded. The server's rounding (flushed) must be the
  // products' own for the bits to agree: oneDNN's reorder for a convolution (its forward, on
  // inputs near 100), ours and oneDNN's for a dense layer (the forward on activations near 100,
  // the input gradient on output gradients in the thousands: a squared error against targets
  // near 1000).
  const auto check_denormal_kernel = [&](const std::string& layers, size_t which, int64_t outputs) {
    CAPTURE(layers);
    const ModelSpec spec = parse_model_spec(R"({"input_shape": [2, 2, 3], "seed": 6, "layers": )" + layers + "}");
    LossSpec squared;
    squared.type = LossType::kMeanSquaredError;
    nn::Model<float> model(spec, kBatch, squared);
    model.use_bf16_products();
    const std::vector<size_t> listed = model.rounded_kernels();
    REQUIRE(which < listed.size());
    AlignedFloats params(model.layout().total_size());
    glorot_uniform_init(model.layout(), 6, params.data());
    const ParamInfo& kernel = model.layout().params()[listed[which]];
    for (size_t i = 0; i < kernel.size; ++i) {
      params[kernel.offset + i] = std::bit_cast<float>(0x007fffffu | (i % 3 == 0 ? 0x80000000u : 0u));
    }
    std::vector<float> large(static_cast<size_t>(model.input_size() * kBatch));
    for (float& v : large) v = rng.uniform_float(50.0f, 100.0f);
    std::vector<float> targets(static_cast<size_t>(outputs * kBatch));
    for (float& v : targets) v = rng.uniform_float(900.0f, 1100.0f);
    CHECK(same_bits(run(model, params, large, targets), run(model, rounded(model.layout(), params, listed), large, targets)));
  };
  // The convolution's kernel (the forward shows it: the dense after it reads its output).
  check_denormal_kernel(R"([{"type": "conv2d", "filters": 4, "kernel_size": 1, "use_bias": false},
      {"type": "flatten"}, {"type": "dense", "units": 3}])", 0, 3);
  // A hidden dense kernel, after a convolution that makes the activations large.
  check_denormal_kernel(R"([{"type": "conv2d", "filters": 4, "kernel_size": 1, "activation": "relu"},
      {"type": "flatten"}, {"type": "dense", "units": 5}, {"type": "dense", "units": 3}])", 1, 3);

  // An MLP on mostly-zero features: its first layer is a data input, whose forward skips the zero
  // features in float32, so its kernel is not in the list; the others are.
  const ModelSpec mlp_spec = parse_model_spec(R"({"input_shape": [40], "seed": 2, "layers": [
      {"type": "dense", "units": 24, "activation": "relu"}, {"type": "dense", "units": 12, "activation": "relu"},
      {"type": "dense", "units": 3}]})");
  nn::Model<float> mlp(mlp_spec, kBatch);
  CHECK(mlp.use_bf16_products().dense == 3);
  const std::vector<size_t> mlp_rounded = mlp.rounded_kernels();
  const size_t first_kernel = 0;  // layers.0.kernel
  REQUIRE(mlp.layout().params()[first_kernel].role == ParamRole::kKernel);
  CHECK(mlp_rounded.size() == 2);
  CHECK(std::find(mlp_rounded.begin(), mlp_rounded.end(), first_kernel) == mlp_rounded.end());
  std::vector<float> features(static_cast<size_t>(mlp.input_size() * kBatch), 0.0f);
  for (size_t i = 0; i < features.size(); i += 5) features[i] = rng.uniform_float(0.0f, 2.0f);  // 80% zeros
  std::vector<int32_t> labels(kBatch);
  for (int32_t& c : labels) c = static_cast<int32_t>(rng.uniform_index(3));
  const AlignedFloats mlp_params = initial(mlp, 2);
  const Run mlp_plain = run(mlp, mlp_params, features, labels);
  CHECK(same_bits(mlp_plain, run(mlp, rounded(mlp.layout(), mlp_params, mlp_rounded), features, labels)));
  // The first kernel rounded too: other bits (what its exclusion is for).
  std::vector<size_t> with_first = mlp_rounded;
  with_first.push_back(first_kernel);
  CHECK_FALSE(same_bits(mlp_plain, run(mlp, rounded(mlp.layout(), mlp_params, with_first), features, labels)));
}
