// Finite-difference gradient checks, in double precision, of every layer and of the loss.
//
// Each model places every layer type after another layer, so the gradient of the first layer's
// parameters flows through (and checks) each later layer's input gradient.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "common/base/aligned.h"
#include "common/base/error.h"
#include "common/engine/model_spec.h"
#include "common/engine/nn/data_parallel_model.h"
#include "common/engine/nn/gradient_scaling.h"
#include "common/engine/nn/loss.h"
#include "common/engine/nn/model.h"
#include "common/engine/nn/row_groups.h"
#include "common/base/rng.h"
#include "tests/common/engine/gradient_check.h"

using namespace pstrain;
using nn::Model;

using namespace pstrain::testing;

TEST_CASE("dense layers relu and linear and the loss") {
  ModelSpec spec;
  spec.input_shape = {6};
  spec.layers = {dense(5, true), dense(4, false), dense(3, false)};
  check_gradients(spec, 4, 1);
}

TEST_CASE("a dense first layer on inputs with features zero in the whole batch (the sparse path)") {
  ModelSpec spec;
  spec.input_shape = {3, 4};
  spec.layers = {simple(LayerType::kFlatten), dense(5, true), dense(3, false)};
  // 6 of 12 features zero everywhere: forward and backward take only the other 6. Their kernel
  // rows' gradient must be exactly zero (the finite difference is), the garbage overwritten.
  check_gradients(spec, 4, 7, {0, 1, 5, 6, 10, 11});
  // All of them zero: the product is empty, the output is the bias.
  check_gradients(spec, 3, 8, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
}

TEST_CASE("standalone relu flatten and reshape between dense layers") {
  ModelSpec spec;
  spec.input_shape = {2, 3};
  spec.layers = {simple(LayerType::kFlatten), dense(8, false), simple(LayerType::kReLU), reshape({2, -1}),
                 simple(LayerType::kFlatten), dense(3, false)};
  check_gradients(spec, 5, 2);
}

TEST_CASE("conv2d and maxpool2d with odd sizes - the tutorial CNN in small") {
  ModelSpec spec;
  spec.input_shape = {9, 8, 2};
  spec.layers = {conv(3, 3, 2, true),  // -> 7x7x3
                 simple(LayerType::kMaxPool2D),  // -> 3x3x3 (odd edge dropped)
                 conv(4, 2, 2, false),  // -> 2x2x4, gradient flows through maxpool
                 simple(LayerType::kReLU),
                 simple(LayerType::kMaxPool2D),  // -> 1x1x4
                 simple(LayerType::kFlatten),
                 dense(5, true),
                 dense(3, false)};
  check_gradients(spec, 3, 3);
}

TEST_CASE("conv2d with strides and same padding - shapes") {
  ModelSpec spec;
  spec.input_shape = {8, 8, 1};
  spec.layers = {conv(2, 3, 3, true, {2, 2}, Padding::kSame)};
  CHECK(infer_shapes(spec).back() == Shape{4, 4, 2});
  spec.layers = {conv(2, 3, 3, true, {2, 2}, Padding::kValid)};  // floor((8 - 3) / 2) + 1
  CHECK(infer_shapes(spec).back() == Shape{3, 3, 2});
  spec.input_shape = {7, 9, 1};
  spec.layers = {conv(2, 3, 2, true, {2, 3}, Padding::kSame)};  // ceil(7 / 2), ceil(9 / 3)
  CHECK(infer_shapes(spec).back() == Shape{4, 3, 2});
  spec.layers = {conv(2, 9, 9, true, {1, 1}, Padding::kSame)};  // a kernel larger than the input, padded
  CHECK(infer_shapes(spec).back() == Shape{7, 9, 2});
  spec.layers = {conv(2, 9, 9, true, {1, 1}, Padding::kValid)};
  CHECK_THROWS_WITH_AS(infer_shapes(spec), "/model/layers/0/kernel_size [9, 9] does not fit the input [7, 9, 1]",
                       SpecError);
  spec.layers = {conv(2, 3, 3, true, {0, 1}, Padding::kValid)};
  CHECK_THROWS_WITH_AS(infer_shapes(spec), "/model/layers/0/strides must be positive integers", SpecError);
  // TensorFlow's split: padding max((out - 1) * stride + kernel - in, 0), the extra after.
  CHECK(window_axis(8, 3, 2, Padding::kSame).out == 4);
  CHECK(window_axis(8, 3, 2, Padding::kSame).pad_before == 0);  // total 1: all of it after
  CHECK(window_axis(7, 3, 2, Padding::kSame).pad_before == 1);  // total 2
  CHECK(window_axis(5, 4, 1, Padding::kSame).pad_before == 1);  // total 3: 1 before, 2 after
  CHECK(window_axis(9, 3, 2, Padding::kValid).out == 4);
}

TEST_CASE("maxpool2d with pool sizes and strides - shapes") {
  ModelSpec spec;
  spec.input_shape = {7, 7, 2};
  spec.layers = {maxpool(3, 3, 2, 2)};
  CHECK(infer_shapes(spec).back() == Shape{3, 3, 2});
  spec.layers = {maxpool(2, 2, 1, 1)};
  CHECK(infer_shapes(spec).back() == Shape{6, 6, 2});
  spec.layers = {simple(LayerType::kMaxPool2D)};  // defaults: 2x2, strides = pool size
  CHECK(infer_shapes(spec).back() == Shape{3, 3, 2});
  LayerSpec pool3 = simple(LayerType::kMaxPool2D);
  pool3.pool_size = {3, 2};  // strides default to the pool size
  spec.layers = {pool3};
  CHECK(infer_shapes(spec).back() == Shape{2, 3, 2});
  spec.layers = {maxpool(8, 2, 1, 1)};
  CHECK_THROWS_WITH_AS(infer_shapes(spec),
                       "/model/layers/0/pool_size maxpool2d's [8, 2] window does not fit the input [7, 7, 2]", SpecError);
}

TEST_CASE("conv2d same padding by hand - the padding split and the kernel layout") {
  ModelSpec spec;
  spec.input_shape = {3, 3, 1};
  const std::vector<double> image = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  SUBCASE("2x2 kernel, stride 1: padding 1, all of it after (bottom and right)") {
    spec.layers = {conv(1, 2, 2, false, {1, 1}, Padding::kSame)};
    Model<double> model(spec, 1);
    std::vector<double> params(model.layout().total_size(), 0.0);
    const ParamInfo* kernel = model.layout().find("layers.0.kernel");
    const ParamInfo* bias = model.layout().find("layers.0.bias");
    // [kh, kw, in, out]: w(0,0) = 1, w(0,1) = 2, w(1,0) = 3, w(1,1) = 4.
    for (size_t i = 0; i < 4; ++i) params[kernel->offset + i] = static_cast<double>(i + 1);
    params[bias->offset] = 0.5;
    const auto out = model.forward(params.data(), image.data(), 1);
    // out(y, x) = in(y, x) + 2 in(y, x+1) + 3 in(y+1, x) + 4 in(y+1, x+1), zero outside.
    const std::vector<double> expected = {37.5, 47.5, 21.5, 67.5, 77.5, 33.5, 23.5, 26.5, 9.5};
    REQUIRE(out.size() == 9);
    for (size_t i = 0; i < 9; ++i) CHECK(out.data()[i] == expected[i]);
  }
  SUBCASE("3x3 kernel of ones, stride 2: output 2x2, padding 1 on each side") {
    spec.layers = {conv(1, 3, 3, false, {2, 2}, Padding::kSame)};
    Model<double> model(spec, 1);
    std::vector<double> params(model.layout().total_size(), 0.0);
    const ParamInfo* kernel = model.layout().find("layers.0.kernel");
    for (size_t i = 0; i < 9; ++i) params[kernel->offset + i] = 1.0;
    const auto out = model.forward(params.data(), image.data(), 1);
    // Windows centred on (0, 0), (0, 2), (2, 0), (2, 2).
    const std::vector<double> expected = {12, 16, 24, 28};
    REQUIRE(out.size() == 4);
    for (size_t i = 0; i < 4; ++i) CHECK(out.data()[i] == expected[i]);
  }
}

TEST_CASE("conv2d stride 2 valid") {
  ModelSpec spec;
  spec.input_shape = {10, 9, 2};
  spec.layers = {conv(2, 2, 2, true),                             // -> 9x8x2
                 conv(3, 3, 3, true, {2, 2}, Padding::kValid),   // -> 4x3x3
                 simple(LayerType::kFlatten), dense(3, false)};
  check_gradients(spec, 3, 31);
}

TEST_CASE("conv2d stride 1 same") {
  ModelSpec spec;
  spec.input_shape = {6, 5, 2};
  spec.layers = {conv(2, 3, 3, true, {1, 1}, Padding::kSame),     // -> 6x5x2
                 conv(3, 4, 4, false, {1, 1}, Padding::kSame),    // -> 6x5x3, even kernel: 1 before, 2 after
                 simple(LayerType::kFlatten), dense(3, false)};
  check_gradients(spec, 2, 32);
}

TEST_CASE("conv2d stride 2 same on odd sizes") {
  ModelSpec spec;
  spec.input_shape = {7, 9, 1};
  spec.layers = {conv(2, 2, 2, true, {1, 1}, Padding::kSame),     // -> 7x9x2
                 conv(3, 3, 3, true, {2, 2}, Padding::kSame),     // -> 4x5x3
                 conv(2, 3, 3, false, {2, 2}, Padding::kSame),    // -> 2x3x2
                 simple(LayerType::kFlatten), dense(3, false)};
  check_gradients(spec, 2, 33);
}

TEST_CASE("conv2d non-square kernels and strides") {
  ModelSpec spec;
  spec.input_shape = {8, 7, 2};
  spec.layers = {conv(2, 1, 3, true, {1, 1}, Padding::kValid),    // -> 8x5x2
                 conv(3, 3, 2, true, {2, 1}, Padding::kSame),     // -> 4x5x3
                 conv(2, 2, 4, false, {1, 3}, Padding::kValid),   // -> 3x1x2
                 conv(2, 5, 1, false, {1, 1}, Padding::kSame),    // kernel taller than its input: 3x1x2
                 simple(LayerType::kFlatten), dense(3, false)};
  check_gradients(spec, 2, 34);
}

TEST_CASE("maxpool2d pool 3 stride 2 and pool 2 stride 1 - overlapping windows") {
  ModelSpec spec;
  spec.input_shape = {9, 8, 2};
  spec.layers = {conv(3, 2, 2, true),       // -> 8x7x3
                 maxpool(3, 3, 2, 2),       // -> 3x3x3
                 conv(2, 1, 1, false),      // -> 3x3x2
                 maxpool(2, 2, 1, 1),       // -> 2x2x2
                 simple(LayerType::kFlatten), dense(3, false)};
  check_gradients(spec, 3, 35);
  spec.layers = {conv(2, 2, 2, true), maxpool(3, 2, 1, 2), simple(LayerType::kFlatten), dense(3, false)};
  CHECK(infer_shapes(spec)[1] == Shape{6, 3, 2});
  check_gradients(spec, 2, 36);
}

TEST_CASE("L2 regularisation adds 2 * l2 * w to kernels only") {
  ModelSpec spec;
  spec.input_shape = {5, 5, 1};
  spec.layers = {conv(2, 3, 3, true, 0.05f), simple(LayerType::kFlatten), dense(4, true, 0.1f), dense(3, false)};
  check_gradients(spec, 2, 4);
}

TEST_CASE("softmax cross-entropy is stable for huge logits and matches the closed form") {
  std::vector<double> logits = {1000.0, 0.0, -1000.0, 2.0, 1.0, 0.0};
  std::vector<float> labels = {0, 2};
  std::vector<double> d(6);
  const auto r = nn::compute_loss<double>(LossSpec{}, nn::ConstMatMap<double>(logits.data(), 3, 2), labels.data(), d.data());
  const double second = std::log(std::exp(2.0) + std::exp(1.0) + 1.0) - 0.0;
  CHECK(std::isfinite(r.loss_sum));
  CHECK(r.loss_sum == doctest::Approx(second));
  CHECK(r.correct == 1);
  CHECK(d[0] == doctest::Approx(0.0));  // softmax 1 minus onehot 1
  CHECK(d[5] == doctest::Approx(1.0 / (std::exp(2.0) + std::exp(1.0) + 1.0) - 1.0));
}

TEST_CASE("float engine agrees with the double engine") {
  ModelSpec spec;
  spec.input_shape = {8, 8, 1};
  spec.layers = {conv(4, 3, 3, true), simple(LayerType::kMaxPool2D), simple(LayerType::kFlatten), dense(6, true),
                 dense(3, false)};
  Model<double> md(spec, 4);
  Model<float> mf(spec, 4);
  Problem p = random_problem(md, 4, 9);
  std::vector<float> pf(p.params.begin(), p.params.end()), xf(p.inputs.begin(), p.inputs.end());
  std::vector<double> gd(md.layout().total_size());
  std::vector<float> gf(gd.size());
  const auto rd = md.compute_gradients(p.params.data(), p.inputs.data(), p.labels.data(), 4, gd.data());
  const auto rf = mf.compute_gradients(pf.data(), xf.data(), p.labels.data(), 4, gf.data());
  CHECK(rf.loss_sum == doctest::Approx(rd.loss_sum).epsilon(1e-5));
  for (size_t i = 0; i < gd.size(); ++i) REQUIRE(gf[i] == doctest::Approx(gd[i]).epsilon(1e-3).scale(1e-4));
}

TEST_CASE("data-parallel replicas give the gradient of the whole batch") {
  ModelSpec spec;
  spec.input_shape = {6, 6, 1};
  spec.layers = {conv(3, 3, 3, true), simple(LayerType::kFlatten), dense(5, true), dense(4, false)};
  const int64_t batch = 7;
  Model<double> single(spec, batch);
  nn::DataParallelModel<double> parallel(spec, batch, 3);
  Problem p = random_problem(single, batch, 5);
  std::vector<double> g1(single.layout().total_size()), g3(g1.size());
  const auto r1 = single.compute_gradients(p.params.data(), p.inputs.data(), p.labels.data(), batch, g1.data());
  const auto r3 = parallel.compute_gradients(p.params.data(), p.inputs.data(), p.labels.data(), batch, g3.data());
  CHECK(r3.loss_sum == doctest::Approx(r1.loss_sum).epsilon(1e-12));
  CHECK(r3.correct == r1.correct);
  for (size_t i = 0; i < g1.size(); ++i) REQUIRE(g3[i] == doctest::Approx(g1[i]).epsilon(1e-10));
}

TEST_CASE("glorot-uniform kernels within the limit zero biases reproducible") {
  ModelSpec spec;
  spec.input_shape = {784};
  spec.seed = 22;
  spec.layers = {dense(700, true), dense(10, false)};
  const ParamLayout layout = make_param_layout(spec);
  std::vector<float> a(layout.total_size()), b(layout.total_size());
  glorot_uniform_init(layout, 22, a.data());
  glorot_uniform_init(layout, 22, b.data());
  CHECK(a == b);
  const ParamInfo& kernel = layout.params()[0];
  const float limit = std::sqrt(6.0f / (784 + 700));
  float lo = 0, hi = 0;
  double mean = 0;
  for (size_t i = 0; i < kernel.size; ++i) {
    lo = std::min(lo, a[i]);
    hi = std::max(hi, a[i]);
    mean += a[i];
  }
  CHECK(lo >= -limit);
  CHECK(hi <= limit);
  CHECK(lo < -0.99f * limit);
  CHECK(std::abs(mean / kernel.size) < 0.01 * limit);
  const ParamInfo& bias = layout.params()[1];
  for (size_t i = 0; i < bias.size; ++i) REQUIRE(a[bias.offset + i] == 0.0f);
}

TEST_CASE("factored dense kernels: deltas * inputs^T is the kernel gradient, and the rest is unchanged") {
  ModelSpec spec;
  spec.input_shape = {4, 4, 1};
  spec.layers = {simple(LayerType::kFlatten), dense(6, true), dense(5, true), dense(3, false)};
  const int64_t batch = 5;
  Model<double> model(spec, batch);
  Problem p = random_problem(model, batch, 17);
  // Zero some features in every example so the first layer's sparse path would be taken.
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t j : {3, 7, 8, 12}) p.inputs[static_cast<size_t>(b * 16 + j)] = 0.0;
  }
  const ParamLayout& layout = model.layout();
  std::vector<double> full(layout.total_size()), partial(layout.total_size(), 42.0);
  model.compute_gradients(p.params.data(), p.inputs.data(), p.labels.data(), batch, full.data());

  Model<double>::FactoredKernels factored(layout.params().size(), false);
  const ParamInfo* first = layout.find("layers.1.kernel");
  const ParamInfo* second = layout.find("layers.2.kernel");
  REQUIRE(first != nullptr);
  REQUIRE(second != nullptr);
  const auto index = [&](const ParamInfo* info) { return static_cast<size_t>(info - layout.params().data()); };
  factored[index(first)] = factored[index(second)] = true;
  CHECK(model.is_dense_kernel(index(first)));
  CHECK_FALSE(model.is_dense_kernel(index(layout.find("layers.1.bias"))));
  model.compute_gradients(p.params.data(), p.inputs.data(), p.labels.data(), batch, partial.data(), {}, &factored);

  for (const ParamInfo* kernel : {first, second}) {
    const auto f = model.kernel_factors(index(kernel));
    REQUIRE(f.inputs.cols() == batch);
    REQUIRE(f.inputs.rows() == kernel->shape[0]);
    REQUIRE(f.deltas.rows() == kernel->shape[1]);
    const nn::Mat<double> product = f.deltas * f.inputs.transpose();  // [out x in] column-major
    for (size_t i = 0; i < kernel->size; ++i) {
      REQUIRE(product.data()[i] == doctest::Approx(full[kernel->offset + i]).epsilon(1e-12));
      REQUIRE(partial[kernel->offset + i] == 42.0);  // left as it was
    }
  }
  for (const ParamInfo& info : layout.params()) {
    if (&info == first || &info == second) continue;
    for (size_t i = 0; i < info.size; ++i) REQUIRE(partial[info.offset + i] == doctest::Approx(full[info.offset + i]));
  }
}

TEST_CASE("row groups: the first layer summed per group of kernel rows, computed here or handed in ready-made") {
  ModelSpec spec;
  spec.input_shape = {4, 4, 1};
  spec.layers = {simple(LayerType::kFlatten), dense(6, true), dense(3, false)};
  const int64_t batch = 5;
  Model<float> model(spec, batch);
  Model<double> reference(spec, batch);
  Problem p = random_problem(reference, batch, 23);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t j : {0, 5, 9, 15}) p.inputs[static_cast<size_t>(b * 16 + j)] = 0.0;  // zero in every example
  }
  const std::vector<float> params(p.params.begin(), p.params.end());
  AlignedFloats inputs(p.inputs.begin(), p.inputs.end());
  const auto logits = [&] {
    const auto out = model.forward(params.data(), inputs.data(), batch);
    return std::vector<float>(out.data(), out.data() + out.size());
  };
  const std::vector<float> plain = logits();
  // Rows 0-5 and 12-15 in group 0, rows 6-11 in group 1 (as two servers' striped chunks would be).
  std::vector<uint32_t> group_of_row(16, 0);
  for (int r = 6; r < 12; ++r) group_of_row[r] = 1;
  model.set_first_layer_row_groups(group_of_row, 2);
  const std::vector<float> grouped = logits();
  for (size_t i = 0; i < plain.size(); ++i) CHECK(grouped[i] == doctest::Approx(plain[i]).epsilon(1e-5));

  // Group 1's partial, computed the way a server does (its active rows only), handed in: the same
  // logits bit for bit. Garbage handed in for a group shows (the model really uses it).
  const ParamInfo& kernel = model.layout().params()[static_cast<size_t>(model.first_layer_kernel())];
  std::vector<const float*> rows;
  AlignedFloats group_inputs;
  for (int r = 6; r < 12; ++r) {
    if (r == 9) continue;  // zero in every example: not sent
    rows.push_back(params.data() + kernel.offset + static_cast<size_t>(r) * 6);
  }
  for (int64_t b = 0; b < batch; ++b) {
    for (int r = 6; r < 12; ++r) {
      if (r != 9) group_inputs.push_back(inputs[static_cast<size_t>(b * 16 + r)]);
    }
  }
  AlignedFloats gathered, partial(6 * batch);
  nn::row_group_product<float>(rows, 6, group_inputs.data(), batch, gathered, partial.data());
  model.use_first_layer_partials({nullptr, partial.data()});
  CHECK(logits() == grouped);
  AlignedFloats garbage(6 * batch, 100.0f);
  model.use_first_layer_partials({nullptr, garbage.data()});
  CHECK(logits() != grouped);
  CHECK(logits() == grouped);  // for one forward only

  CHECK_THROWS_WITH_AS(model.set_first_layer_row_groups(std::vector<uint32_t>(15, 0), 2), doctest::Contains("row groups"),
                       Error);
  CHECK_THROWS_WITH_AS(model.set_first_layer_row_groups(std::vector<uint32_t>(16, 2), 2), doctest::Contains("row groups"),
                       Error);
  ModelSpec cnn;
  cnn.input_shape = {4, 4, 1};
  cnn.layers = {conv(2, 3, 3, true), simple(LayerType::kFlatten), dense(3, false)};
  Model<float> conv_first(cnn, batch);
  CHECK(conv_first.first_layer_kernel() == -1);
  CHECK_THROWS_WITH_AS(conv_first.set_first_layer_row_groups(std::vector<uint32_t>(16, 0), 1),
                       doctest::Contains("dense"), Error);
}

TEST_CASE("every activation on dense and conv2d layers and as a layer of its own") {
  const Activation all[] = {Activation::kSigmoid, Activation::kTanh, Activation::kSoftmax, Activation::kGelu,
                            Activation::kElu,     Activation::kLeakyReLU, Activation::kSwish};
  for (Activation a : all) {
    CAPTURE(activation_name(a));
    LayerSpec hidden = dense(5, false);
    hidden.activation = a;
    ModelSpec spec;
    spec.input_shape = {6};
    spec.layers = {hidden, dense(4, false), dense(3, false)};
    check_gradients(spec, 4, 11);

    LayerSpec c = conv(3, 2, 2, false);  // -> 4x3x3; softmax over each position's 3 channels
    c.activation = a;
    LayerSpec own = simple(LayerType::kActivation);
    own.activation = a;
    spec.input_shape = {5, 4, 2};
    spec.layers = {c, simple(LayerType::kFlatten), dense(6, false), own, dense(3, false)};
    check_gradients(spec, 3, 12);
  }
}

TEST_CASE("a softmax on the last layer is the loss's: the model's output stays the logits") {
  ModelSpec linear;
  linear.input_shape = {6};
  linear.layers = {dense(5, true), dense(3, false)};
  ModelSpec softmax = linear;
  softmax.layers.back().activation = Activation::kSoftmax;
  Model<double> a(linear, 4), b(softmax, 4);
  const Problem p = random_problem(a, 4, 5);
  const auto out_a = a.forward(p.params.data(), p.inputs.data(), 4);
  const auto out_b = b.forward(p.params.data(), p.inputs.data(), 4);
  CHECK(out_a == out_b);
  CHECK(a.evaluate(p.params.data(), p.inputs.data(), p.labels.data(), 4).loss_sum ==
        b.evaluate(p.params.data(), p.inputs.data(), p.labels.data(), 4).loss_sum);
  // A softmax then flatten: still the last computing layer.
  ModelSpec reshaped = softmax;
  reshaped.layers.push_back(simple(LayerType::kFlatten));
  Model<double> c(reshaped, 4);
  CHECK(c.forward(p.params.data(), p.inputs.data(), 4) == out_a);
}

TEST_CASE("activations at hand-computed points") {
  const std::vector<double> x = {-2.0, -0.5, 0.0, 1.5};
  // activation(v) through an activation layer and a 1 x 1 identity dense layer.
  auto value = [&](Activation a, double v) {
    ModelSpec one;
    one.input_shape = {1};
    LayerSpec act = simple(LayerType::kActivation);
    act.activation = a;
    LayerSpec out = dense(1, false);
    one.layers = {act, out};
    Model<double> model(one, 1);
    std::vector<double> params(model.layout().total_size(), 0.0);  // bias 0
    params[model.layout().find("layers.1.kernel")->offset] = 1.0;
    return model.forward(params.data(), &v, 1)(0, 0);
  };
  for (double v : x) {
    CAPTURE(v);
    CHECK(value(Activation::kSigmoid, v) == doctest::Approx(1 / (1 + std::exp(-v))).epsilon(1e-15));
    CHECK(value(Activation::kTanh, v) == doctest::Approx(std::tanh(v)).epsilon(1e-15));
    CHECK(value(Activation::kGelu, v) == doctest::Approx(0.5 * v * (1 + std::erf(v / std::sqrt(2.0)))).epsilon(1e-15));
    CHECK(value(Activation::kElu, v) == doctest::Approx(v > 0 ? v : std::exp(v) - 1).epsilon(1e-15));
    CHECK(value(Activation::kLeakyReLU, v) == doctest::Approx(v > 0 ? v : 0.2 * v).epsilon(1e-15));
    CHECK(value(Activation::kSwish, v) == doctest::Approx(v / (1 + std::exp(-v))).epsilon(1e-15));
  }
  // The formulas at chosen points (Python math): gelu(1.5) = 1.39979, swish(-2) = -0.238406, elu(-2) = -0.864665.
  CHECK(value(Activation::kGelu, 1.5) == doctest::Approx(1.39979).epsilon(1e-5));
  CHECK(value(Activation::kSwish, -2.0) == doctest::Approx(-0.238406).epsilon(1e-5));
  CHECK(value(Activation::kElu, -2.0) == doctest::Approx(-0.864665).epsilon(1e-5));
}

TEST_CASE("avgpool2d with pool sizes and strides, global average and max pooling") {
  LayerSpec avg = maxpool(2, 3, 1, 2);  // overlapping rows: -> 4x2x3 from 5x6x3 (4x3x3 conv output)
  avg.type = LayerType::kAvgPool2D;
  ModelSpec spec;
  spec.input_shape = {6, 7, 2};
  spec.layers = {conv(3, 2, 2, true), avg, simple(LayerType::kFlatten), dense(3, false)};
  CHECK(infer_shapes(spec)[1] == Shape{4, 2, 3});
  check_gradients(spec, 3, 21);
  spec.layers = {conv(4, 3, 3, false), simple(LayerType::kGlobalAvgPool2D), dense(3, false)};
  CHECK(infer_shapes(spec)[1] == Shape{4});
  check_gradients(spec, 3, 22);
  spec.layers = {conv(4, 3, 3, false), simple(LayerType::kGlobalMaxPool2D), dense(3, false)};
  CHECK(infer_shapes(spec)[1] == Shape{4});
  check_gradients(spec, 3, 23);
  // A pool on a flat input is refused, naming the layer's type.
  spec.layers = {simple(LayerType::kFlatten), simple(LayerType::kGlobalAvgPool2D), dense(3, false)};
  CHECK_THROWS_WITH_AS(infer_shapes(spec), doctest::Contains("/model/layers/1/type global_avgpool2d needs"), SpecError);
}

TEST_CASE("global average pooling by hand: the mean of each channel") {
  ModelSpec spec;
  spec.input_shape = {2, 2, 2};
  spec.layers = {simple(LayerType::kGlobalAvgPool2D), dense(2, false)};
  Model<double> model(spec, 1);
  // Identity kernel (2 x 2), zero bias.
  std::vector<double> params(model.layout().total_size(), 0.0);
  const size_t kernel = model.layout().find("layers.1.kernel")->offset;
  params[kernel] = params[kernel + 3] = 1.0;
  const std::vector<double> image = {1, 10, 2, 20, 3, 30, 4, 40};  // [h][w][c]
  const auto out = model.forward(params.data(), image.data(), 1);
  CHECK(out(0, 0) == 2.5);
  CHECK(out(1, 0) == 25.0);
}

TEST_CASE("layer_norm after dense and conv2d layers, with and without center and scale") {
  LayerSpec norm = simple(LayerType::kLayerNorm);
  ModelSpec spec;
  spec.input_shape = {6};
  spec.layers = {dense(5, false), norm, dense(3, false)};
  check_gradients(spec, 4, 31);
  norm.center = false;
  spec.layers = {dense(5, true), norm, dense(3, false)};
  check_gradients(spec, 4, 32);
  norm.center = true;
  norm.scale = false;
  spec.layers = {dense(5, true), norm, dense(3, false)};
  check_gradients(spec, 4, 33);
  // Over each position's channels of a conv2d output.
  norm.scale = true;
  spec.input_shape = {5, 4, 2};
  spec.layers = {conv(3, 2, 2, false), norm, simple(LayerType::kFlatten), dense(3, false)};
  check_gradients(spec, 3, 34);
  CHECK(Model<double>(spec, 1).layout().find("layers.1.gamma")->shape == Shape{3});
}

TEST_CASE("layer_norm by hand: gamma starts at 1 and beta at 0, each example normalized on its own") {
  ModelSpec spec;
  spec.input_shape = {4};
  LayerSpec norm = simple(LayerType::kLayerNorm);
  norm.epsilon = 0.0f;
  spec.layers = {norm, dense(4, false)};
  Model<double> model(spec, 2);
  std::vector<float> init(model.layout().total_size());
  glorot_uniform_init(model.layout(), 1, init.data());
  CHECK(init[model.layout().find("layers.0.gamma")->offset] == 1.0f);
  CHECK(init[model.layout().find("layers.0.beta")->offset + 3] == 0.0f);
  std::vector<double> params(init.begin(), init.end());
  const size_t kernel = model.layout().find("layers.1.kernel")->offset;
  for (size_t k = 0; k < 16; ++k) params[kernel + k] = k % 5 == 0 ? 1.0 : 0.0;  // identity
  for (size_t k = 0; k < 4; ++k) params[model.layout().find("layers.1.bias")->offset + k] = 0.0;
  const std::vector<double> x = {1, 2, 3, 4, 10, 10, 10, 14};  // two examples
  const auto y = model.forward(params.data(), x.data(), 2);
  // (1, 2, 3, 4): mean 2.5, variance 1.25.
  CHECK(y(0, 0) == doctest::Approx(-1.5 / std::sqrt(1.25)));
  CHECK(y(3, 0) == doctest::Approx(1.5 / std::sqrt(1.25)));
  // (10, 10, 10, 14): mean 11, variance 3.
  CHECK(y(0, 1) == doctest::Approx(-1 / std::sqrt(3.0)));
  CHECK(y(3, 1) == doctest::Approx(3 / std::sqrt(3.0)));
}

TEST_CASE("conv2d without a bias (use_bias false): no bias tensor, gradients still exact") {
  LayerSpec c = conv(3, 2, 2, true);
  c.use_bias = false;
  ModelSpec spec;
  spec.input_shape = {5, 4, 2};
  spec.layers = {c, simple(LayerType::kFlatten), dense(3, false)};
  check_gradients(spec, 3, 41);
  const ParamLayout layout = make_param_layout(spec);
  CHECK(layout.find("layers.0.bias") == nullptr);
  CHECK(layout.find("layers.0.kernel") != nullptr);
}

TEST_CASE("conv2d without a bias computes what a zero bias does, in the float engine's method") {
  LayerSpec with = conv(4, 3, 3, true);
  LayerSpec without = with;
  without.use_bias = false;
  ModelSpec a, b;
  a.input_shape = b.input_shape = {8, 8, 3};
  a.layers = {with, simple(LayerType::kFlatten), dense(3, false)};
  b.layers = {without, simple(LayerType::kFlatten), dense(3, false)};
  Model<float> ma(a, 5), mb(b, 5);
  std::vector<float> pa(ma.layout().total_size()), pb(mb.layout().total_size());
  glorot_uniform_init(ma.layout(), 3, pa.data());  // biases zero
  for (const ParamInfo& p : mb.layout().params()) {
    const ParamInfo* q = ma.layout().find(p.name);
    std::copy_n(pa.data() + q->offset, p.size, pb.data() + p.offset);
  }
  Rng rng(5);
  std::vector<float> x(8 * 8 * 3 * 5);
  for (float& v : x) v = rng.uniform_float(-1.0f, 1.0f);
  const std::vector<int32_t> labels = {0, 1, 2, 1, 0};
  std::vector<float> ga(pa.size()), gb(pb.size());
  const auto ra = ma.compute_gradients(pa.data(), x.data(), labels.data(), 5, ga.data());
  const auto rb = mb.compute_gradients(pb.data(), x.data(), labels.data(), 5, gb.data());
  CHECK(ra.loss_sum == rb.loss_sum);
  const ParamInfo* ka = ma.layout().find("layers.0.kernel");
  const ParamInfo* kb = mb.layout().find("layers.0.kernel");
  CHECK(std::equal(ga.begin() + ka->offset, ga.begin() + ka->offset + ka->size, gb.begin() + kb->offset));
}
