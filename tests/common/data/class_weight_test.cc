// training.class_weight: the weighted loss and gradient by hand and by finite differences,
// evaluation unweighted, "balanced" as scikit-learn computes it, and the spec's checks.
#include "common/data/class_weight.h"

#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "common/base/error.h"
#include "common/data/dataset.h"
#include "common/data/job_spec.h"
#include "common/data/table_schema.h"
#include "common/engine/nn/loss.h"
#include "tests/common/engine/gradient_check.h"

using namespace pstrain;
using namespace pstrain::testing;

namespace {

LossSpec weighted(LossType type, std::vector<float> weights) {
  LossSpec l;
  l.type = type;
  l.class_weights = std::move(weights);
  return l;
}

const char* kSpec = R"({
  "dataset": {"name": "penguins"},
  "model": {"input_shape": [4], "layers": [{"type": "dense", "units": 3}]},
  "optimizer": {"type": "sgd", "learning_rate": 0.1},
  "training": {"global_batch_size": 8, "class_weight": CW}
})";

std::string spec_with(const std::string& class_weight) {
  std::string s = kSpec;
  return s.replace(s.find("CW"), 2, class_weight);
}

DatasetInfo penguins_info() {
  auto schema = std::make_shared<TableSchema>();
  schema->class_names = {"Adelie", "Chinstrap", "Gentoo"};
  for (const char* name : {"bill_length", "bill_depth", "flipper", "mass"}) schema->columns.push_back(TableColumn{name});
  DatasetInfo info{"penguins", "", "", "", 3, "", "", {4}, 0, schema};
  return info;
}

}  // namespace

TEST_CASE("class weights multiply each example loss term and gradient, evaluation ignores them") {
  // Softmax, z = (1, 2) for an example of class 1 and (0, 3) for one of class 0; weights (0.5, 3).
  const std::vector<double> z = {1, 2, 0, 3};
  const std::vector<float> labels = {1, 0};
  std::vector<double> d(4), plain_d(4);
  const LossSpec loss = weighted(LossType::kSparseCategoricalCrossEntropy, {0.5f, 3.0f});
  const nn::LossResult r = nn::compute_loss<double>(loss, nn::ConstMatMap<double>(z.data(), 2, 2), labels.data(), d.data());
  const nn::LossResult plain = nn::compute_loss<double>(loss, nn::ConstMatMap<double>(z.data(), 2, 2), labels.data(),
                                                        plain_d.data(), nn::LossWeights::kIgnore);
  const double l0 = std::log(std::exp(1.0) + std::exp(2.0)) - 2.0;  // class 1's example
  const double l1 = std::log(1.0 + std::exp(3.0)) - 0.0;            // class 0's example
  CHECK(r.loss_sum == doctest::Approx(3.0 * l0 + 0.5 * l1).epsilon(1e-12));
  CHECK(plain.loss_sum == doctest::Approx(l0 + l1).epsilon(1e-12));
  for (int k = 0; k < 2; ++k) {
    CHECK(d[k] == doctest::Approx(3.0 * plain_d[k]).epsilon(1e-12));
    CHECK(d[2 + k] == doctest::Approx(0.5 * plain_d[2 + k]).epsilon(1e-12));
  }
  CHECK(r.correct == plain.correct);
  CHECK(r.correct == 1);

  // Binary, one logit z = 2 for a positive and a negative example; weights (4, 0.25).
  const std::vector<double> zb = {2, 2};
  const std::vector<float> yb = {1, 0};
  std::vector<double> db(2);
  const nn::LossResult b = nn::compute_loss<double>(weighted(LossType::kBinaryCrossEntropy, {4.0f, 0.25f}),
                                                    nn::ConstMatMap<double>(zb.data(), 1, 2), yb.data(), db.data());
  const double pos = std::log1p(std::exp(-2.0)), neg = 2.0 + std::log1p(std::exp(-2.0));
  const double p = 1.0 / (1.0 + std::exp(-2.0));
  CHECK(b.loss_sum == doctest::Approx(0.25 * pos + 4.0 * neg).epsilon(1e-12));
  CHECK(db[0] == doctest::Approx(0.25 * (p - 1.0)).epsilon(1e-12));
  CHECK(db[1] == doctest::Approx(4.0 * p).epsilon(1e-12));

  // A weight count that is not the model's classes is an error, not a read past the end.
  CHECK_THROWS_AS(nn::compute_loss<double>(weighted(LossType::kSparseCategoricalCrossEntropy, {1.0f}),
                                           nn::ConstMatMap<double>(z.data(), 2, 2), labels.data(), d.data()),
                  Error);
}

TEST_CASE("weighted losses: gradients through a model against finite differences") {
  ModelSpec spec;
  spec.input_shape = {6};
  spec.layers = {dense(5, true), dense(4, false)};
  check_gradients(spec, 7, 401, GradientCheck{weighted(LossType::kSparseCategoricalCrossEntropy, {0.5f, 2, 1, 3}), {}});
  LossSpec smoothed = weighted(LossType::kCategoricalCrossEntropy, {1, 0.25f, 4, 2});
  smoothed.label_smoothing = 0.1f;
  check_gradients(spec, 7, 402, GradientCheck{smoothed, {}});
  spec.layers = {dense(5, true), dense(1, false)};
  check_gradients(spec, 7, 403, GradientCheck{weighted(LossType::kBinaryCrossEntropy, {3.0f, 0.5f}), {}});
}

TEST_CASE("balanced weights are n / (classes x count) over the training examples") {
  Split train;
  train.dataset = "t";
  train.num_classes = 3;
  train.labels = {0, 0, 0, 1, 0, 1};  // class 2 has no example: weight 1
  train.size = 6;
  ClassWeightSpec balanced;
  balanced.kind = ClassWeightSpec::Kind::kBalanced;
  const std::vector<float> w = resolve_class_weights(balanced, LossSpec{}, train);
  REQUIRE(w.size() == 3);
  CHECK(w[0] == static_cast<float>(6.0 / (3 * 4)));
  CHECK(w[1] == static_cast<float>(6.0 / (3 * 2)));
  CHECK(w[2] == 1.0f);

  ClassWeightSpec by_class;
  by_class.kind = ClassWeightSpec::Kind::kByClass;
  by_class.by_class = {{"2", 5.0}};
  CHECK(resolve_class_weights(by_class, LossSpec{}, train) == std::vector<float>{1, 1, 5});
}

TEST_CASE("class_weight in the spec: the forms, the round trip and the checks") {
  const std::vector<DatasetInfo> datasets = {penguins_info()};
  const JobSpec named = parse_job_spec(spec_with(R"({"Gentoo": 2, "0": 0.5})"), datasets);
  CHECK(named.training.class_weight.kind == ClassWeightSpec::Kind::kByClass);
  CHECK(named.loss.class_weights.empty());  // resolved when the job starts
  CHECK(parse_job_spec(job_spec_to_json(named), datasets).training.class_weight.by_class ==
        named.training.class_weight.by_class);

  const JobSpec listed = parse_job_spec(spec_with("[1, 0.25, 3.5]"), datasets);
  CHECK(listed.loss.class_weights == std::vector<float>{1, 0.25f, 3.5f});
  CHECK(parse_job_spec(job_spec_to_json(listed), datasets).loss.class_weights == listed.loss.class_weights);
  CHECK(parse_job_spec(spec_with(R"("balanced")"), datasets).training.class_weight.kind ==
        ClassWeightSpec::Kind::kBalanced);

  const auto path_of = [&](const std::string& class_weight) {
    try {
      parse_job_spec(spec_with(class_weight), datasets);
    } catch (const SpecError& e) {
      return e.path();
    }
    return std::string("accepted");
  };
  CHECK(path_of(R"("even")") == "/training/class_weight");
  CHECK(path_of(R"({"Emperor": 2})") == "/training/class_weight/Emperor");
  CHECK(path_of(R"({"3": 2})") == "/training/class_weight/3");
  CHECK(path_of(R"({"Adelie": -1})") == "/training/class_weight/Adelie");
  CHECK(path_of("[1, 2]") == "/training/class_weight");
  CHECK(path_of("{}") == "/training/class_weight");
  CHECK(path_of("7") == "/training/class_weight");

  // Regression has no classes to weigh.
  DatasetInfo regression = penguins_info();
  regression.num_classes = 0;
  regression.target_width = 1;
  std::string spec = spec_with(R"("balanced")");
  spec.replace(spec.find(R"("units": 3)"), 10, R"("units": 1)");
  spec.replace(spec.find(R"("optimizer")"), 0, R"("loss": "mse", )");
  try {
    parse_job_spec(spec, {regression});
    FAIL("a regression job with class weights was accepted");
  } catch (const SpecError& e) {
    CHECK(e.path() == "/training/class_weight");
  }
}
