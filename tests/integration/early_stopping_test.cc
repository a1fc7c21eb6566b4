// Early stopping end to end on a real cluster over HTTP: a job stops after the epoch Keras' rule
// names, records no epoch after it, says why, and its model is exactly the chosen epoch's
// checkpoint (the best one with restore_best); a run that loses a worker stops at the same epoch
// with the same model bit for bit; restore_best without a stop still ends with the best
// epoch; a stop at the last epoch ends like any job. A validation hold-out: its figures every
// epoch are those of the held-out examples, and early stopping watches val_loss by default.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/base/aligned.h"
#include "common/data/dataset.h"
#include "common/data/job_spec.h"
#include "common/data/validation_split.h"
#include "common/engine/nn/model.h"
#include "common/engine/safetensors.h"
#include "tests/integration/cluster.h"
#include "tests/integration/http_test_client.h"
#include "tests/test_support.h"

using namespace pstrain;
using namespace pstrain::testing::http_test;
using namespace std::chrono_literals;

namespace {

// An MLP on mnist10k, sync, `workers` workers on 2 servers, Adam; `early` the early_stopping.
std::string mlp(int epochs, int workers, const std::string& early, const std::string& training = "") {
  return R"({"name": "es", "dataset": {"name": "mnist10k", "shuffle_seed": 3},
    "model": {"input_shape": [28, 28, 1], "seed": 11, "layers": [{"type": "flatten"},
      {"type": "dense", "units": 24, "activation": "relu"}, {"type": "dense", "units": 10}]},
    "optimizer": {"type": "adam", "learning_rate": 0.002},
    "training": {"mode": "sync", "global_batch_size": 200, "epochs": )" +
         std::to_string(epochs) + R"(, "workers": )" + std::to_string(workers) + R"(, "servers": 2)" + training + R"(},
    "early_stopping": )" + early + "}";
}

std::vector<float> params_of(const std::string& spec_json, const std::string& file) {
  const ParamLayout layout = make_param_layout(parse_job_spec(spec_json).model);
  return decode_model_state(layout, file).params;
}

struct Ended {
  json::object status;
  json::array epochs;
  std::vector<float> model;
  std::string model_file;
};

Ended run(testing::Cluster& cluster, const std::string& spec) {
  const int port = cluster.http_port();
  const std::string id = submit(cluster, spec);
  Ended e;
  e.status = wait_for_state(cluster, id, "SUCCEEDED", 240s);
  e.epochs = arr(object_of(get(port, "/v1/jobs/" + id + "/metrics")), "epochs");
  const Reply model = get(port, "/v1/jobs/" + id + "/model");
  REQUIRE(model.status == 200);
  e.model_file = model.body;
  e.model = params_of(spec, model.body);
  return e;
}

bool noted(const json::object& status, const std::string& what) {
  for (const auto& n : arr(status, "notes")) {
    if (std::string(n.as_string()).find(what) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("early stopping: stops after the rule's epoch with the best epoch's model") {
  testing::Cluster cluster({});
  const int port = cluster.http_port();
  // min_delta 0.5 in accuracy: nothing after the first epoch improves. Patience 1: the rule stops
  // after epoch 2 (the first epoch that does not improve, with wait 1); restore_best: the model is
  // epoch 1's.
  const std::string early = R"({"monitor": "test_accuracy", "min_delta": 0.5, "patience": 1, "restore_best": true})";
  const std::string two_spec = mlp(6, 2, early);
  const Ended two = run(cluster, two_spec);
  const json::object& es = obj(two.status.at("early_stopping"));
  CHECK(num(es, "stopped_epoch") == 2);
  CHECK(num(es, "best_epoch") == 1);
  CHECK(num(es, "model_epoch") == 1);
  const auto per_epoch = static_cast<int64_t>(num(two.status, "steps_per_epoch"));
  CHECK(num(es, "model_step") == per_epoch);
  CHECK(two.epochs.size() == 2);  // no epoch recorded after the stop
  CHECK(num(two.status, "step") == 2 * per_epoch);
  CHECK(noted(two.status, "early stopping: test_accuracy did not improve by more than 0.5 for 1 epoch(s) after epoch 1"));
  CHECK(num(es, "best") == num(obj(two.epochs[0]), "test_accuracy"));
  // The status has the model's figures (epoch 1's), not the last epoch's.
  CHECK(num(two.status, "test_accuracy") == num(obj(two.epochs[0]), "test_accuracy"));
  CHECK(num(two.status, "test_loss") == num(obj(two.epochs[0]), "test_loss"));

  // The model is the epoch-1 checkpoint's parameters, and says so.
  const std::string id = str(two.status, "id");
  const Reply ck = get(port, "/v1/jobs/" + id + "/checkpoints/" + std::to_string(per_epoch));
  REQUIRE(ck.status == 200);
  CHECK(params_of(two_spec, ck.body) == two.model);
  // Epoch 2's checkpoint, when it was stored before the job ended (the job does not wait for it),
  // holds other parameters.
  const Reply later = get(port, "/v1/jobs/" + id + "/checkpoints/" + std::to_string(2 * per_epoch));
  if (later.status == 200) CHECK(params_of(two_spec, later.body) != two.model);
  uint64_t n = 0;
  std::memcpy(&n, two.model_file.data(), 8);
  const json::object meta = obj(json::parse(two.model_file.substr(8, n)).as_object().at("__metadata__"));
  CHECK(str(meta, "epoch") == "1");
  CHECK(str(meta, "step") == std::to_string(per_epoch));
  // Evaluate answers with the model: epoch 1's test accuracy.
  const Reply ev = post_json(port, "/v1/jobs/" + id + "/evaluate", "{}");
  REQUIRE(ev.status == 200);
  CHECK(num(object_of(ev), "accuracy") == num(obj(two.epochs[0]), "test_accuracy"));

}

TEST_CASE("early stopping: a worker killed mid-run - the same stop, the same model, bit for bit") {
  testing::Cluster cluster({.coordinator_flags = {"--dead-after-ms", "1500"}});
  // Stops after epoch 3 (patience 2), the model epoch 1's.
  const std::string spec =
      mlp(8, 2, R"({"monitor": "test_accuracy", "min_delta": 0.5, "patience": 2, "restore_best": true})");
  const Ended calm = run(cluster, spec);
  CHECK(num(obj(calm.status.at("early_stopping")), "stopped_epoch") == 3);
  const auto per_epoch = static_cast<int64_t>(num(calm.status, "steps_per_epoch"));

  const std::string id = submit(cluster, spec);
  cluster.coordinator().wait_for_line("backup at step " + std::to_string(per_epoch) + " complete", 60s);
  cluster.workers()[1]->kill_hard();
  const json::object status = wait_for_state(cluster, id, "SUCCEEDED", 240s);
  const std::string log = cluster.coordinator().log_text();
  const bool lost = log.find("takes over worker") != std::string::npos || log.find("RECOVERING") != std::string::npos;
  CHECK_MESSAGE(lost, "the worker was not lost before the job ended");
  const json::object& es = obj(status.at("early_stopping"));
  CHECK(num(es, "stopped_epoch") == 3);
  CHECK(num(es, "model_epoch") == 1);
  const json::array epochs = arr(object_of(get(cluster.http_port(), "/v1/jobs/" + id + "/metrics")), "epochs");
  REQUIRE(epochs.size() == 3);
  for (size_t e = 0; e < 3; ++e) CHECK(num(obj(epochs[e]), "test_loss") == num(obj(calm.epochs[e]), "test_loss"));
  CHECK(params_of(spec, get(cluster.http_port(), "/v1/jobs/" + id + "/model").body) == calm.model);
}

TEST_CASE("early stopping: restore_best without a stop ends with the best epoch, a stop at the last epoch ends there") {
  testing::Cluster cluster({});
  // Patience 5 over 3 epochs never stops; min_delta 0.5 keeps epoch 1 the best: the model is its.
  const std::string best_spec =
      mlp(3, 2, R"({"monitor": "test_accuracy", "min_delta": 0.5, "patience": 5, "restore_best": true})");
  const Ended best = run(cluster, best_spec);
  const json::object& es = obj(best.status.at("early_stopping"));
  CHECK(num(es, "stopped_epoch") == 3);
  CHECK(num(es, "model_epoch") == 1);
  CHECK(best.epochs.size() == 3);
  CHECK(noted(best.status, "ran all 3 epochs; restore_best: the model is epoch 1's"));
  const auto per_epoch = static_cast<int64_t>(num(best.status, "steps_per_epoch"));
  const Reply ck = get(cluster.http_port(), "/v1/jobs/" + str(best.status, "id") + "/checkpoints/" + std::to_string(per_epoch));
  REQUIRE(ck.status == 200);
  CHECK(params_of(best_spec, ck.body) == best.model);

  // Patience 2 over 3 epochs, train_loss in max mode (it falls: epoch 1 stays the best): the rule
  // stops after epoch 3, the last; without restore_best the model is epoch 3's.
  const std::string last_spec = mlp(3, 2, R"({"monitor": "train_loss", "mode": "max", "patience": 2})");
  const Ended last = run(cluster, last_spec);
  CHECK(num(obj(last.status.at("early_stopping")), "stopped_epoch") == 3);
  CHECK(num(obj(last.status.at("early_stopping")), "model_epoch") == 3);
  CHECK(last.epochs.size() == 3);
  const Reply final_ck =
      get(cluster.http_port(), "/v1/jobs/" + str(last.status, "id") + "/checkpoints/" + std::to_string(3 * per_epoch));
  REQUIRE(final_ck.status == 200);
  CHECK(params_of(last_spec, final_ck.body) == last.model);
}

TEST_CASE("validation_fraction: the held-out examples' figures every epoch, early stopping on val_loss by default") {
  testing::Cluster cluster({});
  // min_delta 10 in loss: only epoch 1 improves; patience 0 stops after epoch 2, the model epoch 1's.
  const std::string spec = mlp(5, 2, R"({"min_delta": 10, "restore_best": true})", R"(, "validation_fraction": 0.2)");
  const Ended run_ = run(cluster, spec);
  const json::object& es = obj(run_.status.at("early_stopping"));
  CHECK(str(es, "monitor") == "val_loss");
  CHECK(num(es, "stopped_epoch") == 2);
  CHECK(num(es, "model_epoch") == 1);
  REQUIRE(run_.epochs.size() == 2);

  // The hold-out as the service cuts it: the job trains on the rest.
  const Split train = load_split(testing::data_dir(), "mnist10k", SplitKind::kTrain);
  const HeldOut held = hold_out_validation(train, 0.2, 3);
  CHECK(num(run_.status, "steps_per_epoch") == (held.train.size + 199) / 200);
  const json::object& first = obj(run_.epochs[0]);
  REQUIRE(first.if_contains("val_loss") != nullptr);
  // Examples like the training ones: about as well predicted as the test split.
  MESSAGE("epoch 1: val accuracy " << num(first, "val_accuracy") << ", test accuracy " << num(first, "test_accuracy"));
  CHECK(std::abs(num(first, "val_accuracy") - num(first, "test_accuracy")) < 0.1);
  CHECK(num(run_.status, "val_loss") == num(obj(run_.epochs[0]), "val_loss"));  // the model's epoch

  // Epoch 1's figures are the model's (epoch 1's parameters) on exactly those held-out examples.
  const JobSpec parsed = parse_job_spec(spec);
  nn::Model<float> model(parsed.model, 256, parsed.loss);
  AlignedFloats inputs(static_cast<size_t>(784 * 256));
  std::vector<int32_t> labels(256);
  std::vector<uint32_t> indices;
  double loss = 0;
  int64_t correct = 0;
  for (uint32_t start = 0; start < held.validation.size; start += 256) {
    const uint32_t n = std::min<uint32_t>(256, held.validation.size - start);
    indices.resize(n);
    for (uint32_t i = 0; i < n; ++i) indices[i] = start + i;
    held.validation.gather(indices, inputs.data(), labels.data());
    const nn::LossResult r = model.evaluate(run_.model.data(), inputs.data(), labels.data(), n);
    loss += r.loss_sum;
    correct += r.correct;
  }
  CHECK(num(first, "val_loss") == doctest::Approx(loss / held.validation.size).epsilon(1e-6));
  CHECK(num(first, "val_accuracy") == static_cast<double>(correct) / held.validation.size);
}
