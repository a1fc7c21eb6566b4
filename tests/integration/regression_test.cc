// A regression task end to end over HTTP on a real cluster (2 servers, 2 workers, real processes):
// a CSV whose label column has fractions is uploaded as a regression dataset, a
// mean_squared_error job trains on it in sync mode, the job's epochs carry test MAE, RMSE and
// R^2, evaluate gives the job's own figures, :predict answers values near the targets, and a
// loss that does not fit the dataset's labels is refused naming /loss.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "common/base/rng.h"
#include "tests/integration/cluster.h"
#include "tests/integration/http_test_client.h"
#include "tests/test_support.h"

using namespace pstrain;
using namespace pstrain::testing::http_test;
using namespace std::chrono_literals;

namespace {

// y = 3a - 2b + c^2 + 0.5, with a, b, c uniform in [-1, 1]: a fraction in (almost) every label.
double target(double a, double b, double c) { return 3 * a - 2 * b + c * c + 0.5; }

std::string table(Rng& rng, int rows) {
  std::string csv = "a,b,c,y\n";
  for (int i = 0; i < rows; ++i) {
    const double a = rng.uniform_float(-1, 1), b = rng.uniform_float(-1, 1), c = rng.uniform_float(-1, 1);
    char line[128];
    std::snprintf(line, sizeof line, "%.6f,%.6f,%.6f,%.6f\n", a, b, c, target(a, b, c));
    csv += line;
  }
  return csv;
}

Reply put_csv(int port, const std::string& target, const std::string& body) {
  return call(port, http::verb::put, target, body, "text/csv");
}

const char* kSpec = R"({"name": "poly", "dataset": {"name": "poly", "shuffle_seed": 3},
  "model": {"input_shape": [3], "seed": 3, "layers": [{"type": "dense", "units": 32, "activation": "tanh"},
    {"type": "dense", "units": 1}]},
  "loss": LOSS, "optimizer": {"type": "adam", "learning_rate": 0.01},
  "training": {"mode": "sync", "global_batch_size": 32, "epochs": 25, "workers": 2, "servers": 2}})";

std::string spec_with(const std::string& loss) {
  std::string s = kSpec;
  return s.replace(s.find("LOSS"), 4, loss);
}

}  // namespace

TEST_CASE("regression: a float label column trains, reports MAE, RMSE and R^2, evaluates and predicts values") {
  testing::TempDir data;  // the uploads go here, not into the shared data directory
  testing::ClusterOptions options;
  options.coordinator_flags = {"--data-dir", data.path()};
  testing::Cluster cluster(options);
  const int port = cluster.http_port();
  Rng rng(17);
  Reply r = put_csv(port, "/v1/datasets/poly/train?label=y", table(rng, 800));
  INFO(r.describe());
  REQUIRE(r.status == 201);
  json::object d = object_of(r);
  CHECK(str(d, "task") == "regression");
  CHECK(num(d, "targets") == 1);
  CHECK(num(d, "num_classes") == 0);
  REQUIRE(put_csv(port, "/v1/datasets/poly/test?label=y", table(rng, 200)).status == 201);
  // Whole-number targets (counts) are a regression dataset when the upload says so.
  r = put_csv(port, "/v1/datasets/counts/train?task=regression", "a,label\n1,3\n2,5\n3,8\n");
  REQUIRE(r.status == 201);
  CHECK(str(object_of(r), "task") == "regression");
  CHECK(str(object_of(put_csv(port, "/v1/datasets/classes/train", "a,label\n1,3\n2,5\n3,8\n")), "task") ==
        "classification");

  // A class loss on float targets is refused at submit, naming the loss.
  check_problem(post_json(port, "/v1/jobs", spec_with(R"("sparse_softmax_cross_entropy")")), 422,
                "needs class labels, but poly has float targets", "/loss");

  const std::string id = submit(cluster, spec_with(R"("mean_squared_error")"));
  const json::object done = wait_for_state(cluster, id, "SUCCEEDED", 240s);
  CHECK(done.at("test_accuracy").is_null());
  const double mae = num(done, "test_mae"), rmse = num(done, "test_rmse"), r2 = num(done, "test_r2");
  MESSAGE("test MAE " << mae << ", RMSE " << rmse << ", R^2 " << r2);
  CHECK(r2 > 0.99);  // least squares on a, b, c cannot fit c^2: its R^2 is about 0.98
  CHECK(rmse >= mae);

  // Every epoch record has the regression figures and no accuracy.
  const json::object metrics = object_of(get(port, "/v1/jobs/" + id + "/metrics"));
  const json::array epochs = arr(metrics, "epochs");
  REQUIRE(epochs.size() == 25);
  for (const auto& e : epochs) {
    CHECK(e.as_object().contains("test_r2"));
    CHECK(!e.as_object().contains("test_accuracy"));
  }
  CHECK(num(epochs.back().as_object(), "test_mae") == mae);

  // evaluate: the job's own last evaluation (the same model and examples; sums in another order).
  r = post_json(port, "/v1/jobs/" + id + "/evaluate", R"({"split": "test"})");
  REQUIRE(r.status == 200);
  const json::object e = object_of(r);
  CHECK(num(e, "examples") == 200);
  CHECK(num(e, "mae") == doctest::Approx(mae).epsilon(1e-6));
  CHECK(num(e, "rmse") == doctest::Approx(rmse).epsilon(1e-6));
  CHECK(num(e, "r2") == doctest::Approx(r2).epsilon(1e-6));
  CHECK(!e.contains("accuracy"));

  // :predict answers one value per instance, near the function it learned: a row of the table's
  // raw columns (a, b, c), preprocessed by the model as in training.
  r = post_json(port, "/v1/models/" + id + ":predict", R"({"instances": [[0.5, -0.5, 0.0], [-1, 1, 1], [0, 0, 0]]})");
  REQUIRE(r.status == 200);
  const json::array predictions = arr(object_of(r), "predictions");
  REQUIRE(predictions.size() == 3);
  const double expected[] = {target(0.5, -0.5, 0), target(-1, 1, 1), target(0, 0, 0)};
  for (size_t i = 0; i < 3; ++i) {
    CHECK(std::abs(num(predictions[i].as_object(), "value") - expected[i]) < 8 * rmse);
  }
}

TEST_CASE("binary classification: AUC in the job and its epochs equals evaluate's, and no chance-level warning") {
  testing::TempDir data;
  testing::ClusterOptions options;
  options.coordinator_flags = {"--data-dir", data.path()};
  testing::Cluster cluster(options);
  const int port = cluster.http_port();
  // label = 1 when a + b > c^2 (a curved boundary), with a, b, c uniform in [-1, 1].
  Rng rng(23);
  auto rows = [&](int n) {
    std::string csv = "a,b,c,label\n";
    for (int i = 0; i < n; ++i) {
      const double a = rng.uniform_float(-1, 1), b = rng.uniform_float(-1, 1), c = rng.uniform_float(-1, 1);
      char line[128];
      std::snprintf(line, sizeof line, "%.5f,%.5f,%.5f,%d\n", a, b, c, a + b > c * c ? 1 : 0);
      csv += line;
    }
    return csv;
  };
  REQUIRE(put_csv(port, "/v1/datasets/curve/train", rows(600)).status == 201);
  REQUIRE(put_csv(port, "/v1/datasets/curve/test", rows(300)).status == 201);
  const std::string id = submit(cluster, R"({"name": "curve", "dataset": {"name": "curve", "shuffle_seed": 5},
    "model": {"input_shape": [3], "seed": 5, "layers": [{"type": "dense", "units": 16, "activation": "relu"},
      {"type": "dense", "units": 1}]},
    "loss": "binary_cross_entropy", "optimizer": {"type": "adam", "learning_rate": 0.01},
    "training": {"mode": "sync", "global_batch_size": 30, "epochs": 8, "workers": 2, "servers": 1}})");
  const json::object done = wait_for_state(cluster, id, "SUCCEEDED", 240s);
  const double auc = num(done, "test_auc");
  MESSAGE("test accuracy " << num(done, "test_accuracy") << ", AUC " << auc);
  CHECK(auc > 0.9);
  CHECK(arr(done, "warnings").empty());  // 2 classes: chance is 0.5, not 1
  const json::array epochs = arr(object_of(get(port, "/v1/jobs/" + id + "/metrics")), "epochs");
  REQUIRE(epochs.size() == 8);
  CHECK(num(epochs.back().as_object(), "test_auc") == auc);
  // The workers' buckets add up to the one-process figure: evaluate gives the same AUC exactly.
  const Reply r = post_json(port, "/v1/jobs/" + id + "/evaluate", R"({"split": "test"})");
  REQUIRE(r.status == 200);
  CHECK(num(object_of(r), "auc") == auc);
}
