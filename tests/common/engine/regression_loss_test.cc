// The regression losses (mean_squared_error, mean_absolute_error, huber): gradient checks through
// a model with one and several outputs, values and derivatives by hand, the metrics' sums, and
// the spec's checks (names, delta, a loss that does not fit the dataset's labels).
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/base/error.h"
#include "common/data/dataset.h"
#include "common/data/job_spec.h"
#include "common/engine/nn/loss.h"
#include "common/engine/nn/model.h"
#include "tests/common/engine/gradient_check.h"

using namespace pstrain;
using namespace pstrain::testing;

namespace {

LossSpec regression(LossType type, float delta = 1.0f) { return LossSpec{type, 0.0f, delta}; }

}  // namespace

TEST_CASE("regression losses: gradients through a model with one and three outputs") {
  ModelSpec spec;
  spec.input_shape = {5};
  for (int64_t outputs : {1, 3}) {
    CAPTURE(outputs);
    spec.layers = {dense(6, true), dense(outputs, false)};
    check_gradients(spec, 5, 401, GradientCheck{regression(LossType::kMeanSquaredError), {}});
    check_gradients(spec, 5, 402, GradientCheck{regression(LossType::kMeanAbsoluteError), {}});
    // delta 0.3: some errors in the quadratic part, some in the linear one.
    check_gradients(spec, 5, 403, GradientCheck{regression(LossType::kHuber, 0.3f), {}});
    check_gradients(spec, 5, 404, GradientCheck{regression(LossType::kHuber, 5.0f), {}});
  }
}

TEST_CASE("regression loss values, derivatives and metric sums by hand") {
  // Two examples, two outputs: z = (1, 3 | -2, 0.5), y = (0, 3.5 | 1, 0.5): e = (1, -0.5 | -3, 0).
  const std::vector<double> z = {1, 3, -2, 0.5};
  const std::vector<float> y = {0, 3.5f, 1, 0.5f};
  std::vector<double> d(4);
  const nn::ConstMatMap<double> outputs(z.data(), 2, 2);

  nn::LossResult mse = nn::compute_loss<double>(regression(LossType::kMeanSquaredError), outputs, y.data(), d.data());
  CHECK(mse.loss_sum == doctest::Approx((1 + 0.25) / 2 + (9 + 0) / 2.0));
  CHECK(d == std::vector<double>{1.0, -0.5, -3.0, 0.0});  // 2 e / K
  CHECK(mse.correct == 0);
  CHECK(mse.regression.values == 4);
  CHECK(mse.regression.abs_error == doctest::Approx(4.5));
  CHECK(mse.regression.squared_error == doctest::Approx(10.25));
  CHECK(mse.regression.target == doctest::Approx(5.0));
  CHECK(mse.regression.target_squared == doctest::Approx(0 + 12.25 + 1 + 0.25));
  CHECK(mse.regression.mae() == doctest::Approx(4.5 / 4));
  CHECK(mse.regression.rmse() == doctest::Approx(std::sqrt(10.25 / 4)));
  // R^2 = 1 - SSE / SST, SST = sum y^2 - (sum y)^2 / n = 13.5 - 6.25.
  CHECK(mse.regression.r2() == doctest::Approx(1 - 10.25 / 7.25));

  nn::LossResult mae = nn::compute_loss<double>(regression(LossType::kMeanAbsoluteError), outputs, y.data(), d.data());
  CHECK(mae.loss_sum == doctest::Approx(1.5 / 2 + 3.0 / 2));
  CHECK(d == std::vector<double>{0.5, -0.5, -0.5, 0.0});  // sign(e) / K, 0 at e = 0

  // Huber, delta 1: e = 1 -> 0.5, e = -0.5 -> 0.125, e = -3 -> 1 * (3 - 0.5) = 2.5, e = 0 -> 0.
  nn::LossResult huber = nn::compute_loss<double>(regression(LossType::kHuber), outputs, y.data(), d.data());
  CHECK(huber.loss_sum == doctest::Approx((0.5 + 0.125) / 2 + 2.5 / 2));
  CHECK(d == std::vector<double>{0.5, -0.25, -0.5, 0.0});  // clip(e, -1, 1) / K

  // Sums add across batches (workers) into the same metrics.
  nn::LossResult total = mse;
  total += mse;
  CHECK(total.regression.r2() == doctest::Approx(mse.regression.r2()));
  CHECK(total.loss_sum == doctest::Approx(2 * mse.loss_sum));
  // Targets that do not vary: R^2 is 0, not a division by zero.
  nn::RegressionSums flat{2, 1, 1, 2, 2};
  CHECK(flat.r2() == 0.0);
}

TEST_CASE("a class target outside the outputs fails the step, naming it") {
  const std::vector<double> z = {0, 1, 2};
  const float label = 3;
  CHECK_THROWS_WITH_AS(nn::compute_loss<double>(LossSpec{}, nn::ConstMatMap<double>(z.data(), 3, 1), &label, nullptr),
                       "label 3.000000 is not a class of the model's 3", Error);
  const float fraction = 0.5f;
  CHECK_THROWS_AS(nn::compute_loss<double>(LossSpec{}, nn::ConstMatMap<double>(z.data(), 3, 1), &fraction, nullptr),
                  Error);
}

TEST_CASE("regression losses in a job spec: names, Keras' spellings, delta, and the dataset's labels") {
  const std::string base = R"({"dataset": {"name": "mnist10k"},
    "model": {"input_shape": [784], "layers": [{"type": "dense", "units": 10}]},
    "optimizer": {"type": "sgd"}, "training": {"global_batch_size": 32, "epochs": 1}, "loss": LOSS})";
  auto with = [&](const std::string& loss) {
    std::string s = base;
    return s.replace(s.find("LOSS"), 4, loss);
  };
  auto error = [&](const std::string& text) {
    try {
      parse_job_spec(text);
    } catch (const SpecError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  // mnist10k has class labels: every regression loss is refused, naming the loss.
  CHECK(error(with(R"("mse")")) ==
        "/loss mean_squared_error needs a dataset of float targets, but mnist10k has class labels (10 classes)");
  CHECK(error(with(R"("mean_absolute_error")")).find("/loss mean_absolute_error needs a dataset of float targets") == 0);
  CHECK(error(with(R"({"type": "huber", "delta": 0})")).find("/loss/delta ") == 0);
  CHECK(error(with(R"({"type": "huber", "delta": -1})")).find("/loss/delta ") == 0);
  CHECK(error(with(R"({"type": "mse", "delta": 2})")) == "/loss/delta applies to huber only");
  CHECK(error(with(R"({"type": "mse", "label_smoothing": 0.1})")) ==
        "/loss/label_smoothing applies to categorical_cross_entropy and binary_cross_entropy only");

  // Checked against a regression dataset: its target count is the model's outputs.
  JobSpec spec = parse_accepted_job_spec(with(R"({"type": "huber", "delta": 2.5})"));
  CHECK(spec.loss.type == LossType::kHuber);
  CHECK(spec.loss.delta == 2.5f);
  CHECK(parse_accepted_job_spec(job_spec_to_json(spec)).loss.delta == 2.5f);
  DatasetInfo table;
  table.name = "houses";
  table.num_classes = 0;
  table.target_width = 1;
  table.example_shape = {784};
  try {
    check_spec_against_dataset(spec, table);
    FAIL("accepted 10 outputs for 1 target");
  } catch (const SpecError& e) {
    CHECK(std::string(e.what()) == "/model/layers/0 must output 1 value(s) (the targets of houses) but outputs [10]");
  }
  table.target_width = 10;
  CHECK_NOTHROW(check_spec_against_dataset(spec, table));
  // binary_cross_entropy on float targets is multi-label: one logit per label.
  spec.loss.type = LossType::kBinaryCrossEntropy;
  CHECK_NOTHROW(check_spec_against_dataset(spec, table));
  table.target_width = 3;
  try {
    check_spec_against_dataset(spec, table);
    FAIL("accepted 10 logits for 3 labels");
  } catch (const SpecError& e) {
    CHECK(std::string(e.what()) == "/model/layers/0 must output 3 logit(s) (the labels of houses) but outputs [10]");
  }
  table.target_width = 10;
  spec.loss = LossSpec{};
  try {
    check_spec_against_dataset(spec, table);
    FAIL("accepted a class loss on float targets");
  } catch (const SpecError& e) {
    CHECK(std::string(e.what()).find("/loss sparse_softmax_cross_entropy needs class labels, but houses has float targets") == 0);
  }
}
