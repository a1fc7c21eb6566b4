// The losses: gradient checks through a model, values by hand, sparse =
// categorical without smoothing bit for bit, the class probabilities predict
// answers with, and the spec's checks.
#include "common/engine/nn/loss.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <string>
#include <vector>

#include "common/base/error.h"
#include "common/base/rng.h"
#include "common/data/dataset.h"
#include "common/data/job_spec.h"
#include "common/engine/nn/model.h"
#include "tests/common/engine/gradient_check.h"

using namespace pstrain;
using namespace pstrain::testing;
using nn::Model;

namespace {

LossSpec loss_of(LossType type, float smoothing = 0.0f) {
  LossSpec l;
  l.type = type;
  l.label_smoothing = smoothing;
  return l;
}

}  // namespace

TEST_CASE("categorical cross-entropy with label smoothing and binary cross-entropy: gradients through a model") {
  ModelSpec spec;
  spec.input_shape = {6};
  spec.layers = {dense(5, true), dense(4, false)};
  check_gradients(spec, 5, 301, GradientCheck{loss_of(LossType::kCategoricalCrossEntropy, 0.1f), {}});
  check_gradients(spec, 5, 302, GradientCheck{loss_of(LossType::kCategoricalCrossEntropy, 1.0f), {}});
  spec.layers = {dense(5, true), dense(1, false)};
  check_gradients(spec, 6, 303, GradientCheck{loss_of(LossType::kBinaryCrossEntropy), {}});
  check_gradients(spec, 6, 304, GradientCheck{loss_of(LossType::kBinaryCrossEntropy, 0.2f), {}});
}

TEST_CASE("loss values by hand") {
  // Categorical, z = (1, 2, 3), label 0, smoothing 0.3: target (0.8, 0.1, 0.1).
  const std::vector<double> z = {1, 2, 3};
  const float label0 = 0;
  std::vector<double> d(3);
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  nn::LossResult r = nn::compute_loss<double>(loss_of(LossType::kCategoricalCrossEntropy, 0.3f),
                                              nn::ConstMatMap<double>(z.data(), 3, 1), &label0, d.data());
  CHECK(r.loss_sum == doctest::Approx(lse - (0.8 * 1 + 0.1 * 2 + 0.1 * 3)).epsilon(1e-6));
  CHECK(d[0] == doctest::Approx(std::exp(1.0 - lse) - 0.8).epsilon(1e-6));
  CHECK(d[2] == doctest::Approx(std::exp(3.0 - lse) - 0.1).epsilon(1e-6));
  CHECK(r.correct == 0);
  // Binary: z = 2, label 1: log(1 + e^-2); label 0: 2 + log(1 + e^-2); z = -30
  // stays finite.
  const std::vector<double> logits = {2.0, 2.0, -30.0};
  const std::vector<float> labels = {1, 0, 1};
  std::vector<double> dz(3);
  r = nn::compute_loss<double>(loss_of(LossType::kBinaryCrossEntropy), nn::ConstMatMap<double>(logits.data(), 1, 3),
                               labels.data(), dz.data());
  CHECK(r.loss_sum == doctest::Approx(2 * std::log1p(std::exp(-2.0)) + 2.0 + 30.0 + std::log1p(std::exp(-30.0))));
  CHECK(r.correct == 1);
  CHECK(dz[0] == doctest::Approx(1 / (1 + std::exp(-2.0)) - 1));
  CHECK(dz[1] == doctest::Approx(1 / (1 + std::exp(-2.0))));
  // Smoothing 0.2 moves a label 1 to 0.9.
  r = nn::compute_loss<double>(loss_of(LossType::kBinaryCrossEntropy, 0.2f),
                               nn::ConstMatMap<double>(logits.data(), 1, 1), labels.data(), dz.data());
  CHECK(dz[0] == doctest::Approx(1 / (1 + std::exp(-2.0)) - 0.9).epsilon(1e-6));
}

TEST_CASE("categorical cross-entropy without smoothing is the sparse loss bit for bit") {
  Rng rng(5);
  std::vector<float> z(10 * 7);
  for (float& v : z) v = rng.uniform_float(-4, 4);
  std::vector<float> labels(7);
  for (auto& l : labels) l = static_cast<float>(rng.uniform_index(10));
  std::vector<float> da(z.size()), db(z.size());
  const auto a = nn::compute_loss<float>(loss_of(LossType::kSparseCategoricalCrossEntropy),
                                         nn::ConstMatMap<float>(z.data(), 10, 7), labels.data(), da.data());
  const auto b = nn::compute_loss<float>(loss_of(LossType::kCategoricalCrossEntropy),
                                         nn::ConstMatMap<float>(z.data(), 10, 7), labels.data(), db.data());
  CHECK(a.loss_sum == b.loss_sum);
  CHECK(da == db);
}

TEST_CASE("class probabilities: softmax, or 1 - p and p for one binary logit") {
  std::vector<double> p(2);
  const float z = 0.5f;
  CHECK(nn::class_probabilities(loss_of(LossType::kBinaryCrossEntropy), &z, 1, p.data()) == 1);
  CHECK(p[1] == doctest::Approx(1 / (1 + std::exp(-0.5))));
  CHECK(p[0] + p[1] == doctest::Approx(1.0));
  const float zero = 0.0f;
  CHECK(nn::class_probabilities(loss_of(LossType::kBinaryCrossEntropy), &zero, 1, p.data()) == 0);
  std::vector<double> q(3);
  const std::vector<float> logits = {0.0f, 2.0f, 1.0f};
  CHECK(nn::class_probabilities(LossSpec{}, logits.data(), 3, q.data()) == 1);
  CHECK(q[0] + q[1] + q[2] == doctest::Approx(1.0));
}

TEST_CASE("a sigmoid on the output layer is binary cross-entropy's own, as a softmax is the categorical losses'") {
  ModelSpec spec;
  spec.input_shape = {4};
  LayerSpec out = dense(1, false);
  out.activation = Activation::kSigmoid;
  spec.layers = {dense(3, true), out};
  Model<float> with(spec, 2, loss_of(LossType::kBinaryCrossEntropy));
  spec.layers[1].activation = Activation::kLinear;
  Model<float> without(spec, 2, loss_of(LossType::kBinaryCrossEntropy));
  std::vector<float> params(with.layout().total_size());
  glorot_uniform_init(with.layout(), 1, params.data());
  const std::vector<float> x = {1, -1, 0.5f, 2, 0, 1, -2, 1};
  const auto a = with.forward(params.data(), x.data(), 2);
  const std::vector<float> first(a.data(), a.data() + 2);
  const auto b = without.forward(params.data(), x.data(), 2);
  CHECK(first == std::vector<float>(b.data(), b.data() + 2));
}

TEST_CASE("the loss in a job spec: names, Keras' spellings, smoothing, and what a dataset allows") {
  const std::string base = R"({"dataset": {"name": "mnist10k"},
    "model": {"input_shape": [784], "layers": [{"type": "dense", "units": 10}]},
    "optimizer": {"type": "sgd"}, "training": {"global_batch_size": 32, "epochs": 1}, "loss": LOSS})";
  auto with = [&](const std::string& loss) {
    std::string s = base;
    return s.replace(s.find("LOSS"), 4, loss);
  };
  auto error = [&](const std::string& loss) {
    try {
      parse_job_spec(with(loss));
    } catch (const SpecError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  CHECK(parse_job_spec(with(R"("categorical_crossentropy")")).loss.type == LossType::kCategoricalCrossEntropy);
  CHECK(parse_job_spec(with(R"("sparse_categorical_crossentropy")")).loss.type ==
        LossType::kSparseCategoricalCrossEntropy);
  const JobSpec smoothed = parse_job_spec(with(R"({"type": "categorical_cross_entropy", "label_smoothing": 0.1})"));
  CHECK(smoothed.loss.label_smoothing == 0.1f);
  CHECK(parse_job_spec(job_spec_to_json(smoothed)).loss.label_smoothing == 0.1f);
  CHECK(error(R"({"type": "sparse_softmax_cross_entropy", "label_smoothing": 0.1})") ==
        "/loss/label_smoothing applies to categorical_cross_entropy and "
        "binary_cross_entropy only");
  CHECK(error(R"({"type": "categorical_cross_entropy", "label_smoothing": 2})").find("/loss/label_smoothing ") == 0);
  CHECK(error(R"("hinge")").find("/loss must be one of ") == 0);
  CHECK(error(R"("binary_cross_entropy")") ==
        "/loss binary_cross_entropy needs a dataset of 2 classes (labels 0 and "
        "1), but mnist10k has 10");
}

TEST_CASE("top-5 accuracy: the label among the five largest outputs, ties to the lower class") {
  // 7 classes; the label's output ranks 5th in the first example, 6th in the second, and ties
  // with the 5th in the third (the lower class ranks first: class 6 loses the tie).
  const std::vector<float> z = {7, 6, 5, 4, 3, 2, 1,   //
                                7, 6, 5, 4, 3, 2, 1,   //
                                7, 6, 5, 4, 3, 3, 3};
  const std::vector<float> labels = {4, 5, 6};
  const auto r = nn::compute_loss<float>(LossSpec{}, nn::ConstMatMap<float>(z.data(), 7, 3), labels.data(), nullptr);
  CHECK(r.top_k_correct == 1);
  CHECK(r.correct == 0);
}

TEST_CASE("AUC: Keras' 200 thresholds, against the exact rank statistic and by hand") {
  nn::BinaryScores s;
  // Perfectly ranked: AUC 1; reversed: 0; all probabilities equal: 0.5.
  for (double p : {0.9, 0.8}) s.add(p, true);
  for (double p : {0.2, 0.1}) s.add(p, false);
  CHECK(s.auc() == doctest::Approx(1.0));
  nn::BinaryScores reversed;
  for (double p : {0.9, 0.8}) reversed.add(p, false);
  for (double p : {0.2, 0.1}) reversed.add(p, true);
  CHECK(reversed.auc() == doctest::Approx(0.0));
  nn::BinaryScores tied;
  tied.add(0.5, true);
  tied.add(0.5, false);
  CHECK(tied.auc() == doctest::Approx(0.5));
  CHECK(nn::BinaryScores{}.auc() == 0.0);  // no example of a class: no AUC
  // Random overlapping scores: within the thresholds' resolution of the exact Mann-Whitney AUC.
  Rng rng(3);
  nn::BinaryScores many;
  std::vector<double> pos, neg;
  for (int i = 0; i < 400; ++i) {
    const bool positive = rng.uniform_index(2) == 1;
    const double p = std::clamp(rng.uniform_float(0, 1) * 0.7 + (positive ? 0.3 : 0.0), 0.0, 1.0);
    many.add(p, positive);
    (positive ? pos : neg).push_back(p);
  }
  double wins = 0;
  for (double a : pos) {
    for (double b : neg) wins += a > b ? 1.0 : a == b ? 0.5 : 0.0;
  }
  const double exact = wins / (static_cast<double>(pos.size()) * static_cast<double>(neg.size()));
  MESSAGE("AUC with 200 thresholds " << many.auc() << ", exact " << exact);
  CHECK(std::abs(many.auc() - exact) < 0.01);
  // Buckets add: two halves make the whole.
  nn::BinaryScores a, b;
  a.add(0.9, true);
  a.add(0.3, false);
  b.add(0.6, false);
  b.add(0.55, true);
  a += b;
  nn::BinaryScores whole;
  for (auto [p, y] : std::vector<std::pair<double, bool>>{{0.9, true}, {0.3, false}, {0.6, false}, {0.55, true}}) whole.add(p, y);
  CHECK(a.auc() == whole.auc());
  CHECK(whole.auc() == doctest::Approx(0.75));
}

TEST_CASE("multi-label binary cross-entropy: one logit per label, the mean over labels, subset accuracy") {
  ModelSpec spec;
  spec.input_shape = {5};
  spec.layers = {dense(6, true), dense(3, false)};
  check_gradients(spec, 4, 311, GradientCheck{loss_of(LossType::kBinaryCrossEntropy), {}});
  check_gradients(spec, 4, 312, GradientCheck{loss_of(LossType::kBinaryCrossEntropy, 0.1f), {}});
  // By hand: z = (2, -1 | 0.5, 3), labels (1, 0 | 1, 0): the mean of each example's two losses;
  // the first example has both labels right, the second not (z = 3 for a 0).
  const std::vector<double> z = {2, -1, 0.5, 3};
  const std::vector<float> y = {1, 0, 1, 0};
  std::vector<double> d(4);
  const auto r = nn::compute_loss<double>(loss_of(LossType::kBinaryCrossEntropy), nn::ConstMatMap<double>(z.data(), 2, 2),
                                          y.data(), d.data());
  auto bce = [](double zz, double t) { return std::max(zz, 0.0) - zz * t + std::log1p(std::exp(-std::abs(zz))); };
  CHECK(r.loss_sum == doctest::Approx((bce(2, 1) + bce(-1, 0)) / 2 + (bce(0.5, 1) + bce(3, 0)) / 2));
  CHECK(r.correct == 1);
  CHECK(d[3] == doctest::Approx((1 / (1 + std::exp(-3.0))) / 2));
  // A label outside [0, 1] fails the step.
  const std::vector<float> bad = {1, 2, 0, 0};
  CHECK_THROWS_AS(nn::compute_loss<double>(loss_of(LossType::kBinaryCrossEntropy), nn::ConstMatMap<double>(z.data(), 2, 2),
                                           bad.data(), nullptr),
                  Error);
}
