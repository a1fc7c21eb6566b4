// Checkpoints end to end over HTTP on a real cluster: a job's checkpoints are listed and
// downloaded (with and without the optimizer's state), evaluate at a checkpoint gives the job's
// own figures at that epoch, a job resumed from a checkpoint ends exactly where an uninterrupted
// run ends, a fine-tuned job starts from another job's parameters, and init_from mistakes are
// 422s naming the field or the tensor.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/data/dataset.h"
#include "common/data/job_spec.h"
#include "common/engine/model_spec.h"
#include "common/engine/safetensors.h"
#include "tests/integration/cluster.h"
#include "tests/integration/http_test_client.h"
#include "tests/test_support.h"

using namespace pstrain;
using namespace pstrain::testing::http_test;
using namespace std::chrono_literals;

namespace {

// An MLP on `dataset`, sync, 2 workers on 2 servers, Adam, a backup every epoch; `extra` adds
// fields (",\"checkpoint\": {...}").
std::string mlp(const std::string& dataset, int epochs, const std::string& extra = "", int units = 32) {
  return R"({"name": "ck", "dataset": {"name": ")" + dataset + R"(", "shuffle_seed": 5},
    "model": {"input_shape": [28, 28, 1], "seed": 7, "layers": [{"type": "flatten"},
      {"type": "dense", "units": )" + std::to_string(units) + R"(, "activation": "relu"}, {"type": "dense", "units": 10}]},
    "optimizer": {"type": "adam", "learning_rate": 0.002},
    "training": {"mode": "sync", "global_batch_size": 100, "epochs": )" +
         std::to_string(epochs) + R"(, "workers": 2, "servers": 2},
    "backup": {"save_freq": "epoch"})" + extra + "}";
}

Reply post(int port, const std::string& target, const std::string& body) {
  Reply r = call(port, http::verb::post, target, body, "application/json");
  INFO("POST " << target << " -> " << r.describe());
  return r;
}

json::object header_of(const std::string& file) {
  uint64_t n = 0;
  REQUIRE(file.size() >= 8);
  std::memcpy(&n, file.data(), 8);
  REQUIRE(n <= file.size() - 8);
  return json::parse(file.substr(8, n)).as_object();
}

std::vector<float> params_of(const std::string& spec_json, const std::string& file) {
  const ParamLayout layout = make_param_layout(parse_job_spec(spec_json).model);
  return decode_model_state(layout, file).params;
}

// IDX bytes (images and labels) of examples [first, first + n) of a split.
std::pair<std::string, std::string> idx_of(const Split& split, size_t first, size_t n) {
  auto be32 = [](std::string& s, uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) s.push_back(static_cast<char>((v >> shift) & 0xff));
  };
  std::string images("\0\0\x08\x03", 4), labels("\0\0\x08\x01", 4);
  be32(images, static_cast<uint32_t>(n));
  be32(images, 28);
  be32(images, 28);
  be32(labels, static_cast<uint32_t>(n));
  images.append(reinterpret_cast<const char*>(split.examples.data()) + first * 784, n * 784);
  for (size_t i = first; i < first + n; ++i) labels.push_back(static_cast<char>(split.labels[i]));
  return {images, labels};
}

}  // namespace

TEST_CASE("checkpoints: listed, downloaded, evaluated - a resumed job equals an uninterrupted one") {
  testing::Cluster cluster({});
  const int port = cluster.http_port();

  // B: 2 epochs, keeping every checkpoint; A: the same job for 3 epochs, uninterrupted.
  const std::string b_spec = mlp("mnist10k", 2, R"(, "checkpoint": {"keep": 5})");
  const std::string b = submit(cluster, b_spec);
  const json::object b_done = wait_for_state(cluster, b, "SUCCEEDED", 240s);
  const auto per_epoch = static_cast<int64_t>(num(b_done, "steps_per_epoch"));
  REQUIRE(per_epoch > 0);

  // The list: the backup after epoch 1 and the final state after epoch 2.
  Reply r = get(port, "/v1/jobs/" + b + "/checkpoints");
  REQUIRE(r.status == 200);
  const json::array list = arr(object_of(r), "checkpoints");
  REQUIRE(list.size() == 2);
  CHECK(num(obj(list[0]), "step") == per_epoch);
  CHECK(num(obj(list[0]), "epoch") == 1);
  CHECK(obj(list[0]).at("final") == false);
  CHECK(num(obj(list[1]), "step") == 2 * per_epoch);
  CHECK(num(obj(list[1]), "epoch") == 2);
  CHECK(obj(list[1]).at("final") == true);
  if (obj(list[1]).at("final") != true) MESSAGE(cluster.coordinator().log_text());
  CHECK(num(obj(list[1]), "bytes") > 0);
  CHECK(str(obj(list[1]), "href") == "/v1/jobs/" + b + "/checkpoints/" + std::to_string(2 * per_epoch));

  // Downloads: parameters only (the final model's values), and with the optimizer (Adam's m and
  // v, and its update count).
  const Reply model = get(port, "/v1/jobs/" + b + "/model");
  REQUIRE(model.status == 200);
  const Reply plain = get(port, "/v1/jobs/" + b + "/checkpoints/latest");
  REQUIRE(plain.status == 200);
  CHECK(params_of(b_spec, plain.body) == params_of(b_spec, model.body));
  CHECK(header_of(plain.body).if_contains("optimizer.m.layers.1.kernel") == nullptr);
  const Reply full = get(port, "/v1/jobs/" + b + "/checkpoints/" + std::to_string(2 * per_epoch) + "?optimizer=true");
  REQUIRE(full.status == 200);
  CHECK(static_cast<double>(full.body.size()) == num(obj(list[1]), "bytes"));
  const json::object full_header = header_of(full.body);
  CHECK(full_header.if_contains("optimizer.m.layers.1.kernel") != nullptr);
  CHECK(full_header.if_contains("optimizer.v.layers.2.bias") != nullptr);
  const json::object meta = obj(full_header.at("__metadata__"));
  CHECK(str(meta, "optimizer_iterations") == std::to_string(2 * per_epoch));
  CHECK(str(meta, "step") == std::to_string(2 * per_epoch));
  CHECK(str(meta, "epoch") == "2");
  CHECK(str(meta, "dataset") == "mnist10k");
  check_problem(get(port, "/v1/jobs/" + b + "/checkpoints/3"), 404, "no checkpoint at step 3");
  check_problem(get(port, "/v1/jobs/" + b + "/checkpoints/x"), 422, "must be a step");
  check_problem(get(port, "/v1/jobs/" + b + "/checkpoints/latest?optimizer=maybe"), 400, "true or false");
  check_problem(get(port, "/v1/jobs/nope/checkpoints/latest"), 404, "no job");

  // Evaluate at the epoch-1 checkpoint: the job's own epoch-1 test figures.
  r = get(port, "/v1/jobs/" + b + "/metrics");
  const json::array epochs = arr(object_of(r), "epochs");
  REQUIRE(epochs.size() == 2);
  r = post(port, "/v1/jobs/" + b + "/evaluate", R"({"checkpoint": )" + std::to_string(per_epoch) + "}");
  REQUIRE(r.status == 200);
  const json::object e = object_of(r);
  CHECK(num(e, "accuracy") == num(obj(epochs[0]), "test_accuracy"));
  CHECK(num(e, "loss") == doctest::Approx(num(obj(epochs[0]), "test_loss")).epsilon(1e-6));
  CHECK(num(e, "checkpoint") == per_epoch);

  // C resumes B (parameters, optimizer state and step) to 3 epochs in all; A runs 3 at once.
  const std::string a = submit(cluster, mlp("mnist10k", 3));
  const std::string c_spec =
      mlp("mnist10k", 3, R"(, "init_from": {"job": ")" + b + R"(", "checkpoint": "latest", "optimizer_state": true})");
  const std::string c = submit(cluster, c_spec);
  wait_for_state(cluster, a, "SUCCEEDED", 240s);
  const json::object c_done = wait_for_state(cluster, c, "SUCCEEDED", 240s);
  const std::vector<float> pa = params_of(c_spec, get(port, "/v1/jobs/" + a + "/model").body);
  const std::vector<float> pc = params_of(c_spec, get(port, "/v1/jobs/" + c + "/model").body);
  REQUIRE(pa.size() == pc.size());
  double worst = 0;
  for (size_t i = 0; i < pa.size(); ++i) worst = std::max(worst, static_cast<double>(std::abs(pa[i] - pc[i])));
  CHECK(worst <= 1e-6);
  CHECK(pa == pc);  // sync is deterministic: bit for bit
  bool noted = false;
  for (const auto& n : arr(c_done, "notes")) noted = noted || std::string(n.as_string()).find("started from") != std::string::npos;
  CHECK(noted);

  // init_from mistakes, at submit.
  auto rejected = [&](const std::string& spec, const std::string& field, const std::string& what) {
    const Reply bad = post(port, "/v1/jobs", spec);
    check_problem(bad, 422, what, field);
  };
  rejected(mlp("mnist10k", 3, R"(, "init_from": {"job": "nope"})"), "/init_from/job", "no job 'nope'");
  rejected(mlp("mnist10k", 3, R"(, "init_from": {"job": ")" + b + R"(", "checkpoint": 7})"), "/init_from/checkpoint",
           "no checkpoint at step 7");
  rejected(mlp("mnist10k", 3, R"(, "init_from": {"model": ")" + b + R"("})", 48), "/init_from",
           "tensor 'layers.1.kernel' has shape [784, 32]");
  rejected(mlp("mnist10k", 3, R"(, "init_from": {"model": ")" + b + R"(", "optimizer_state": true})"),
           "/init_from/optimizer_state", "parameters only");
  rejected(mlp("mnist10k", 3, R"(, "init_from": {"job": ")" + b + R"(", "model": "x"})"), "/init_from", "either");
}

TEST_CASE("checkpoints: a model fine-tuned on another dataset beats the same job from scratch") {
  testing::TempDir uploads;
  testing::Cluster cluster({.coordinator_flags = {"--datasets-dir", uploads.path()}});
  const int port = cluster.http_port();
  // "fashion-b": 1,000 Fashion-MNIST images the pre-training never saw (the head of the test
  // split) to train on, the next 2,000 to test on.
  const Split test = load_split(testing::data_dir(), "fashion", SplitKind::kTest);
  const auto [train_images, train_labels] = idx_of(test, 0, 1000);
  const auto [test_images, test_labels] = idx_of(test, 1000, 2000);
  CHECK(call(port, http::verb::put, "/v1/datasets/fashion-b/train/images", train_images, "application/octet-stream").status == 202);
  CHECK(call(port, http::verb::put, "/v1/datasets/fashion-b/train/labels", train_labels, "application/octet-stream").status == 201);
  CHECK(call(port, http::verb::put, "/v1/datasets/fashion-b/test/images", test_images, "application/octet-stream").status == 202);
  CHECK(call(port, http::verb::put, "/v1/datasets/fashion-b/test/labels", test_labels, "application/octet-stream").status == 201);

  // Pre-trained on the Fashion-MNIST training set (one epoch), then one epoch on fashion-b with a
  // fresh optimizer; against one epoch on fashion-b from scratch.
  const std::string pre = submit(cluster, mlp("fashion", 1));
  wait_for_state(cluster, pre, "SUCCEEDED", 240s);
  const std::string tuned = submit(cluster, mlp("fashion-b", 1, R"(, "init_from": {"model": ")" + pre + R"("})"));
  const std::string scratch = submit(cluster, mlp("fashion-b", 1));
  const double tuned_accuracy = num(wait_for_state(cluster, tuned, "SUCCEEDED", 240s), "test_accuracy");
  const double scratch_accuracy = num(wait_for_state(cluster, scratch, "SUCCEEDED", 240s), "test_accuracy");
  MESSAGE("fine-tuned: " << tuned_accuracy << ", from scratch: " << scratch_accuracy);
  CHECK(tuned_accuracy > scratch_accuracy + 0.05);
}
