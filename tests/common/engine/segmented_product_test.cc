// simd::product_segments (common/engine/simd/segmented_product.h) and its use in
// nn::DataParallelModel: a kernel gradient over R slices, multiplied out once by all threads, has
// the bits of R separate products summed in slice order, for every shape (blocks of C at their
// edges, more rows than a block holds), segment count, thread count, and in bfloat16; and a
// data-parallel step gives the same loss and gradients with its large kernels multiplied together as
// with each replica's products summed (the order a sync cluster's server sums its workers' pushes);
// and a batch smaller than the replica count is cut as a cluster cuts it among its workers; and an
// error in any replica reaches the caller.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/base/aligned.h"
#include "common/base/error.h"
#include "common/base/rng.h"
#include "common/data/job_spec.h"
#include "common/engine/nn/data_parallel_model.h"
#include "common/engine/nn/onednn_conv.h"
#include "common/engine/simd/bf16_product.h"
#include "common/engine/simd/segmented_product.h"

using namespace pstrain;

namespace {

std::vector<float> random_values(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = rng.uniform_float(-1.0f, 1.0f);
  for (size_t i = 0; i < n; i += 7) v[i] = 0.0f;  // zeros, as after a ReLU
  return v;
}

size_t differing(const std::vector<float>& a, const std::vector<float>& b) {
  size_t count = 0;
  for (size_t i = 0; i < a.size(); ++i) count += std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i]);
  return count;
}

// The kernel gradient's layout (common/engine/nn/dense.cc): deltas out x k, inputs in x k, both
// column-major; C = deltas * inputs^T, out x in.
struct Slice {
  std::vector<float> deltas, inputs;
  int64_t k;
};

std::vector<float> separately_summed(int64_t out, int64_t in, const std::vector<Slice>& slices, bool bf16) {
  std::vector<float> sum(static_cast<size_t>(out * in)), one(sum.size());
  for (size_t s = 0; s < slices.size(); ++s) {
    std::vector<float>& target = s == 0 ? sum : one;
    const simd::Operand a{slices[s].deltas.data(), 1, out}, b{slices[s].inputs.data(), 1, in};
    if (bf16) {
      simd::product_bf16(out, in, slices[s].k, a, b, false, target.data(), out);
    } else {
      simd::product(out, in, slices[s].k, a, b, false, target.data(), out);
    }
    if (s > 0) {
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += one[i];
    }
  }
  return sum;
}

std::vector<float> together(int64_t out, int64_t in, const std::vector<Slice>& slices, int threads, bool bf16) {
  std::vector<simd::ProductSegment> segments;
  for (const Slice& s : slices) segments.push_back({{s.deltas.data(), 1, out}, {s.inputs.data(), 1, in}, s.k});
  std::vector<float> c(static_cast<size_t>(out * in), 12345.0f);  // every element must be written
  simd::product_segments(out, in, segments, c.data(), out, threads, bf16);
  return c;
}

}  // namespace

TEST_CASE("product_segments: the bits of one product per slice summed in slice order") {
  struct Shape {
    int64_t out, in;
    std::vector<int64_t> ks;
  };
  // Small shapes (one thread: below the work worth a second) and shapes above that with edges:
  // rows past a block of 384, columns not a multiple of any level's tile, odd k.
  const std::vector<Shape> shapes = {
      {1, 1, {1, 1}},          {10, 500, {64, 64}},  {128, 1000, {43, 43, 42}}, {7, 13, {5}},
      {385, 37, {3, 8, 1, 4}}, {800, 300, {32, 33}}, {128, 21632 / 16, {64, 64}}, {33, 1, {9, 9}},
      {385, 1301, {64, 63}},   {33, 5003, {17, 17, 17}}, {1000, 7, {200, 201}},
  };
  uint64_t seed = 1;
  for (const bool bf16 : {false, true}) {
    for (const Shape& shape : shapes) {
      std::vector<Slice> slices;
      for (const int64_t k : shape.ks) {
        slices.push_back({random_values(static_cast<size_t>(shape.out * k), ++seed),
                          random_values(static_cast<size_t>(shape.in * k), ++seed), k});
      }
      const std::vector<float> expected = separately_summed(shape.out, shape.in, slices, bf16);
      for (const int threads : {1, 2, 3}) {
        CAPTURE(bf16);
        CAPTURE(shape.out);
        CAPTURE(shape.in);
        CAPTURE(shape.ks.size());
        CAPTURE(threads);
        CHECK(differing(together(shape.out, shape.in, slices, threads, bf16), expected) == 0);
      }
    }
  }
}

TEST_CASE("product_segments: infinities, NaNs and signed zeros as the slices' sum gives them") {
  // An output gradient that overflowed, a NaN, and negative zeros: each element's bits (or both
  // NaN) as the separate products summed.
  const int64_t out = 96, in = 3000, k = 40;
  std::vector<Slice> slices = {{random_values(out * k, 11), random_values(in * k, 12), k},
                               {random_values(out * k, 13), random_values(in * k, 14), k}};
  slices[0].deltas[5] = std::numeric_limits<float>::infinity();
  slices[1].deltas[out + 7] = -std::numeric_limits<float>::infinity();
  slices[1].deltas[3 * out + 9] = std::numeric_limits<float>::quiet_NaN();
  for (size_t i = 0; i < slices[0].inputs.size(); i += 11) slices[0].inputs[i] = -0.0f;
  const std::vector<float> expected = separately_summed(out, in, slices, false);
  for (const int threads : {1, 2}) {
    const std::vector<float> got = together(out, in, slices, threads, false);
    size_t nans = 0, mismatched = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (std::isnan(expected[i]) && std::isnan(got[i])) {
        ++nans;
      } else {
        mismatched += std::bit_cast<uint32_t>(expected[i]) != std::bit_cast<uint32_t>(got[i]);
      }
    }
    CHECK(nans > 0);
    CHECK(mismatched == 0);
  }
}

TEST_CASE("product_segments: the check above tells the slices' sum from one chain over the whole batch") {
  // One product over the concatenated slices sums each element in one chain: other bits, which
  // the comparison above must be able to see.
  const int64_t out = 64, in = 200, k = 50;
  std::vector<Slice> slices = {{random_values(out * k, 3), random_values(in * k, 4), k},
                               {random_values(out * k, 5), random_values(in * k, 6), k}};
  Slice whole{std::vector<float>(static_cast<size_t>(out * 2 * k)), std::vector<float>(static_cast<size_t>(in * 2 * k)),
              2 * k};
  for (int s = 0; s < 2; ++s) {
    std::memcpy(whole.deltas.data() + s * out * k, slices[static_cast<size_t>(s)].deltas.data(), out * k * sizeof(float));
    std::memcpy(whole.inputs.data() + s * in * k, slices[static_cast<size_t>(s)].inputs.data(), in * k * sizeof(float));
  }
  const std::vector<float> chained = together(out, in, {whole}, 1, false);
  CHECK(differing(chained, separately_summed(out, in, slices, false)) > 0);
  CHECK(differing(together(out, in, slices, 2, false), separately_summed(out, in, slices, false)) == 0);
}

namespace {

struct Step {
  nn::LossResult loss;
  std::vector<float> grads;
};

Step step(nn::DataParallelModel<float>& model, const AlignedFloats& params, const std::vector<float>& inputs,
          const std::vector<int32_t>& labels, int64_t batch) {
  AlignedFloats grads(model.layout().total_size());
  Step s;
  s.loss = model.compute_gradients(params.data(), inputs.data(), labels.data(), batch, grads.data());
  s.grads.assign(grads.begin(), grads.end());
  return s;
}

bool same_step(const Step& a, const Step& b) {
  return std::bit_cast<uint64_t>(a.loss.loss_sum) == std::bit_cast<uint64_t>(b.loss.loss_sum) &&
         a.loss.correct == b.loss.correct && differing(a.grads, b.grads) == 0;
}

void check_model(const std::string& spec_json, size_t together, int replicas, int64_t batch, bool bf16) {
  CAPTURE(spec_json);
  CAPTURE(replicas);
  CAPTURE(bf16);
  const ModelSpec spec = parse_model_spec(spec_json);
  nn::DataParallelModel<float> model(spec, batch, replicas);
  CHECK(model.kernels_together() == together);
  if (bf16) model.use_bf16_products();
  AlignedFloats params(model.layout().total_size());
  glorot_uniform_init(model.layout(), 9, params.data());
  Rng rng(10);
  std::vector<float> inputs(static_cast<size_t>(model.input_size() * batch));
  for (float& v : inputs) v = rng.uniform_float(0.0f, 1.0f);
  std::vector<int32_t> labels(static_cast<size_t>(batch));
  for (int32_t& c : labels) c = static_cast<int32_t>(rng.uniform_index(static_cast<uint64_t>(model.output_size())));
  for (int repeat = 0; repeat < 2; ++repeat) {  // the second step reuses the replicas' buffers
    model.multiply_kernels_together(true);
    const Step joint = step(model, params, inputs, labels, batch);
    model.multiply_kernels_together(false);
    const Step summed = step(model, params, inputs, labels, batch);
    CHECK(same_step(joint, summed));
    for (float& v : inputs) v = rng.uniform_float(0.0f, 1.0f);
  }
}

}  // namespace

TEST_CASE("data-parallel steps: kernels multiplied together equal the replicas' products summed") {
  // Kernels from 2^18 values up are multiplied together: the CNN's first dense (14,400 x 80), the
  // MLP's second (1,100 x 1,000); not the MLP's first (on the input) nor the small last ones.
  const std::string cnn = R"({"input_shape": [32, 32, 1], "seed": 3, "layers": [
      {"type": "conv2d", "filters": 16, "kernel_size": 3, "activation": "relu"}, {"type": "flatten"},
      {"type": "dense", "units": 80, "activation": "relu"}, {"type": "dense", "units": 5}]})";
  const std::string mlp = R"({"input_shape": [30], "seed": 4, "layers": [
      {"type": "dense", "units": 1100, "activation": "relu"}, {"type": "dense", "units": 1000, "activation": "relu"},
      {"type": "dense", "units": 3}]})";
  for (const bool bf16 : {false, true}) {
    if (bf16 && !nn::onednn_bf16()) {
      MESSAGE("oneDNN runs " << std::string(nn::onednn_isa()) << " here: the bfloat16 kernels are checked by "
                             << "product_segments' own test (emulated) only");
      continue;
    }
    for (const int replicas : {2, 3}) {
      check_model(cnn, 1, replicas, 13, bf16);
      check_model(mlp, 1, replicas, 64, bf16);
    }
  }
}

TEST_CASE("data-parallel steps: a batch smaller than the replica count is split as a cluster's workers split it") {
  // 8 replicas and a last batch of 5: the slices [5r/8, 5(r+1)/8) leave replicas 0, 2 and 5 empty,
  // as a sync batch leaves workers (common/data/data_plan.h); the gradient is each slice's (one
  // example's) added in replica order from zero, the empty ones as zeros, as a server adds its
  // workers' pushes. Evaluation still runs such a batch on replica 0 whole.
  const ModelSpec spec = parse_model_spec(R"({"input_shape": [6], "seed": 2, "layers": [
      {"type": "dense", "units": 5, "activation": "relu"}, {"type": "dense", "units": 3}]})");
  nn::DataParallelModel<float> parallel(spec, 8, 8);
  REQUIRE(parallel.replicas() == 8);
  nn::Model<float> one(spec, 1), single(spec, 5);
  AlignedFloats params(single.layout().total_size());
  glorot_uniform_init(single.layout(), 3, params.data());
  Rng rng(4);
  std::vector<float> inputs(6 * 5);
  for (float& v : inputs) v = rng.uniform_float(-1.0f, 1.0f);
  const std::vector<int32_t> labels = {0, 2, 1, 1, 0};
  for (const bool caller_sums : {false, true}) {
    CAPTURE(caller_sums);
    parallel.leave_sum_to_caller(caller_sums);
    AlignedFloats a(params.size()), g(params.size());
    const nn::LossResult pa = parallel.compute_gradients(params.data(), inputs.data(), labels.data(), 5, a.data());
    if (caller_sums) parallel.sum_into(a.data(), 0, a.size());
    std::vector<float> expected(params.size(), 0.0f);
    nn::LossResult total;
    int empty = 0;
    for (int64_t r = 0; r < 8; ++r) {
      const int64_t begin = 5 * r / 8, end = 5 * (r + 1) / 8;
      std::fill(g.begin(), g.end(), 0.0f);
      if (end > begin) {
        total += one.compute_gradients(params.data(), inputs.data() + begin * 6, labels.data() + begin, end - begin,
                                       g.data());
      } else {
        ++empty;
      }
      for (size_t i = 0; i < expected.size(); ++i) expected[i] += g[i];
    }
    CHECK(empty == 3);
    CHECK(std::memcmp(a.data(), expected.data(), a.size() * sizeof(float)) == 0);
    CHECK(pa.loss_sum == doctest::Approx(total.loss_sum).epsilon(1e-12));
    CHECK(pa.correct == total.correct);
  }
  parallel.leave_sum_to_caller(false);
  std::vector<float> targets(labels.begin(), labels.end());
  const nn::LossResult ea = parallel.evaluate(params.data(), inputs.data(), targets.data(), 5);
  const nn::LossResult eb = single.evaluate(params.data(), inputs.data(), targets.data(), 5);
  CHECK(std::bit_cast<uint64_t>(ea.loss_sum) == std::bit_cast<uint64_t>(eb.loss_sum));
  CHECK(ea.correct == eb.correct);
}

TEST_CASE("data-parallel steps: replicas left unsummed and added by sum_into in blocks give the summed bits") {
  // The trainer's fused tail (worker/local_trainer.cc): compute_gradients leaves replicas 1..R-1's
  // gradients where they are and the update adds them block by block. Blocks of an odd size in
  // reverse order, with the kernels multiplied together and without (every range then unsummed).
  const std::string cnn = R"({"input_shape": [32, 32, 1], "seed": 3, "layers": [
      {"type": "conv2d", "filters": 16, "kernel_size": 3, "activation": "relu"}, {"type": "flatten"},
      {"type": "dense", "units": 80, "activation": "relu"}, {"type": "dense", "units": 5}]})";
  for (const int replicas : {2, 3}) {
    for (const bool together : {true, false}) {
      CAPTURE(replicas);
      CAPTURE(together);
      nn::DataParallelModel<float> model(parse_model_spec(cnn), 13, replicas);
      AlignedFloats params(model.layout().total_size());
      glorot_uniform_init(model.layout(), 9, params.data());
      Rng rng(11);
      std::vector<float> inputs(static_cast<size_t>(model.input_size() * 13));
      for (float& v : inputs) v = rng.uniform_float(-1.0f, 1.0f);
      const std::vector<int32_t> labels = {0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2};
      // First a step with every kernel in the replicas' buffers, so that the deferred kernels'
      // ranges there hold values a wrong sum_into would add (not zeros).
      model.multiply_kernels_together(false);
      step(model, params, inputs, labels, 13);
      model.multiply_kernels_together(together);
      const Step summed = step(model, params, inputs, labels, 13);
      model.leave_sum_to_caller(true);
      Step left = step(model, params, inputs, labels, 13);
      CHECK(differing(left.grads, summed.grads) > 0);  // something was left to add
      const size_t n = model.layout().dense_size(), block = 1001;
      for (size_t end = n; end > 0;) {
        const size_t begin = end > block ? end - block : 0;
        model.sum_into(left.grads.data(), begin, end);
        end = begin;
      }
      CHECK(same_step(left, summed));
      // A batch smaller than the replicas (empty slices, nothing deferred): the same, and the
      // slices' own gradients (one Model each, the empty ones zero) added in replica order.
      Step small = step(model, params, inputs, labels, replicas - 1);
      model.sum_into(small.grads.data(), 0, n);
      model.leave_sum_to_caller(false);
      CHECK(same_step(small, step(model, params, inputs, labels, replicas - 1)));
      nn::Model<float> one(parse_model_spec(cnn), 1);
      std::vector<float> expected(small.grads.size(), 0.0f);
      AlignedFloats g(expected.size());
      const int64_t b = replicas - 1;
      for (int64_t r = 0; r < replicas; ++r) {
        const int64_t begin = b * r / replicas, end = b * (r + 1) / replicas;
        std::fill(g.begin(), g.end(), 0.0f);
        if (end > begin) {
          one.compute_gradients(params.data(), inputs.data() + begin * model.input_size(), labels.data() + begin,
                                end - begin, g.data());
        }
        for (size_t i = 0; i < expected.size(); ++i) expected[i] += g[i];
      }
      CHECK(differing(small.grads, expected) == 0);
    }
  }
}

TEST_CASE("a bad label in any replica's slice is the caller's error, not the end of the process") {
  // An exception that leaves an OpenMP region ends the process (std::terminate); the replicas'
  // errors are carried out of it and the lowest replica's rethrown.
  const ModelSpec spec = parse_model_spec(R"({"input_shape": [4], "seed": 3, "layers": [
      {"type": "dense", "units": 5, "activation": "relu"}, {"type": "dense", "units": 3}]})");
  const int64_t batch = 6;
  nn::DataParallelModel<float> parallel(spec, batch, 3);
  std::vector<float> params(parallel.layout().total_size(), 0.1f), grads(params.size());
  std::vector<float> inputs(static_cast<size_t>(4 * batch), 0.5f);
  for (const int64_t bad : {int64_t{5}, int64_t{2}, int64_t{0}}) {  // in the last, the middle, the first slice
    CAPTURE(bad);
    std::vector<float> labels = {0, 1, 2, 0, 1, 2};
    labels[static_cast<size_t>(bad)] = 7;  // the model scores 3 classes
    const auto error_of = [](const auto& call) -> std::string {
      try {
        call();
      } catch (const Error& e) {
        return e.what();
      }
      return "";
    };
    const std::string training = error_of([&] {
      parallel.compute_gradients(params.data(), inputs.data(), labels.data(), batch, grads.data());
    });
    CHECK(training.find("label 7") != std::string::npos);
    CHECK(training.find("not a class of the model's 3") != std::string::npos);
    CHECK(error_of([&] { parallel.evaluate(params.data(), inputs.data(), labels.data(), batch); }) == training);
    labels[static_cast<size_t>(bad)] = 0;
    CHECK_NOTHROW(parallel.compute_gradients(params.data(), inputs.data(), labels.data(), batch, grads.data()));
  }
}
