// Trained models put to use, end to end over HTTP on a real cluster: evaluation of a finished
// job's model equals the job's own last evaluation, predictions equal a NumPy forward pass of the
// downloaded file (tests/integration/numpy_forward.py, Debian's python3-numpy) for an MLP and a
// CNN, and every bad request is answered with its status, naming the instance at fault.
#include <doctest/doctest.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "common/data/dataset.h"
#include "common/data/dataset_formats.h"
#include "common/data/job_spec.h"
#include "tests/integration/cluster.h"
#include "tests/integration/http_test_client.h"
#include "tests/integration/test_encodings.h"
#include "tests/test_support.h"

using namespace pstrain;
using namespace pstrain::testing::http_test;
using pstrain::testing::base64;
using namespace std::chrono_literals;

namespace {

std::string post(int port, const std::string& target, const std::string& body, Reply* reply = nullptr) {
  Reply r = call(port, http::verb::post, target, body, "application/json");
  if (reply != nullptr) *reply = r;
  INFO("POST " << target << " -> " << r.describe());
  return r.body;
}

// The first n test images of mnist10k as the model sees them (pixel / 255), example-major.
std::vector<float> test_images(size_t n, std::vector<uint8_t>* raw) {
  const Split split = load_split(testing::data_dir(), "mnist10k", SplitKind::kTest);
  std::vector<uint32_t> indices(n);
  for (size_t i = 0; i < n; ++i) indices[i] = static_cast<uint32_t>(i);
  std::vector<float> x(n * 784);
  std::vector<int32_t> labels(n);
  split.gather(indices, x.data(), labels.data());
  raw->assign(split.examples.begin(), split.examples.begin() + static_cast<ptrdiff_t>(n * 784));
  return x;
}

// The raw pixel values (the form `:predict` takes: common/data/model_inputs.h) as floats.
std::vector<float> as_floats(const std::vector<uint8_t>& raw) { return {raw.begin(), raw.end()}; }

// {"instances": [...]} of n 28x28x1 images, every value written exactly; `tail` is added to the
// object (e.g. `, "input_form": "scaled"`).
std::string instances_json(const std::vector<float>& x, size_t n, const std::string& tail = "") {
  std::string out = "{\"instances\": [";
  for (size_t i = 0; i < n; ++i) {
    out += i ? ",[" : "[";
    for (size_t r = 0; r < 28; ++r) {
      out += r ? ",[" : "[";
      for (size_t c = 0; c < 28; ++c) {
        char text[32];
        const auto end = std::to_chars(text, text + sizeof text, x[i * 784 + r * 28 + c]).ptr;  // exact
        out += (c ? ",[" : "[") + std::string(text, end) + "]";
      }
      out += "]";
    }
    out += "]";
  }
  return out + "]" + tail + "}";
}

// Trains `spec` on the cluster, then checks evaluate and predict against the job and NumPy.
void check_model(testing::Cluster& cluster, const std::string& spec) {
  const int port = cluster.http_port();
  const std::string id = submit(cluster, spec);
  const json::object done = wait_for_state(cluster, id, "SUCCEEDED", 240s);

  // Evaluate the final model: the job's own last test evaluation, the same examples and model.
  Reply r;
  json::object e = json::parse(post(port, "/v1/jobs/" + id + "/evaluate", R"({"split": "test", "checkpoint": "latest"})", &r)).as_object();
  REQUIRE(r.status == 200);
  CHECK(num(e, "accuracy") == num(done, "test_accuracy"));
  CHECK(num(e, "loss") == doctest::Approx(num(done, "test_loss")).epsilon(1e-6));
  CHECK(num(e, "examples") == 4998);
  const json::array matrix = arr(e, "confusion_matrix");
  REQUIRE(matrix.size() == 10);
  double diagonal = 0, total = 0;
  for (size_t t = 0; t < 10; ++t) {
    for (size_t p = 0; p < 10; ++p) {
      total += matrix[t].as_array()[p].to_number<double>();
      if (p == t) diagonal += matrix[t].as_array()[p].to_number<double>();
    }
  }
  CHECK(total == 4998);
  CHECK(diagonal / total == num(e, "accuracy"));

  // Predict 300 test images (nested arrays of raw pixel values) and two more as raw bytes (b64).
  constexpr size_t kN = 300;
  std::vector<uint8_t> raw;
  const std::vector<float> x = test_images(kN, &raw);  // as the model sees them (pixel / 255)
  const json::object predicted =
      json::parse(post(port, "/v1/models/" + id + ":predict", instances_json(as_floats(raw), kN), &r)).as_object();
  REQUIRE(r.status == 200);
  const json::array predictions = arr(predicted, "predictions");
  REQUIRE(predictions.size() == kN);
  const std::string b64 = R"({"instances": [{"b64": ")" + base64(raw.data(), 784) + R"("}, {"b64": ")" +
                          base64(raw.data() + 784, 784) + R"("}]})";
  const json::object by_bytes = json::parse(post(port, "/v1/models/" + id + ":predict", b64, &r)).as_object();
  REQUIRE(r.status == 200);
  for (size_t i = 0; i < 2; ++i) {  // the same inputs (a batch of 2 rather than 256)
    const json::array a = arr(obj(arr(by_bytes, "predictions")[i]), "probabilities");
    const json::array b = arr(obj(predictions[i]), "probabilities");
    REQUIRE(a.size() == b.size());
    for (size_t k = 0; k < a.size(); ++k) CHECK(a[k].to_number<double>() == doctest::Approx(b[k].to_number<double>()).epsilon(1e-5));
  }
  // The old form (values as the model sees them) is refused, naming the instance and what to
  // send; asked for by name, it gives the same answers (the same floats reach the model).
  post(port, "/v1/models/" + id + ":predict", instances_json(x, 2), &r);
  check_problem(r, 422, "invalid-instance", "/instances/0");
  CHECK(str(object_of(r), "detail").find("\"input_form\": \"scaled\"") != std::string::npos);
  const json::object scaled =
      json::parse(post(port, "/v1/models/" + id + ":predict", instances_json(x, kN, R"(, "input_form": "scaled")"), &r))
          .as_object();
  REQUIRE(r.status == 200);
  CHECK(json::serialize(scaled.at("predictions")) == json::serialize(predicted.at("predictions")));

  // NumPy's forward pass of the downloaded file.
  testing::TempDir dir;
  const Reply model = get(port, "/v1/jobs/" + id + "/model");
  REQUIRE(model.status == 200);
  std::ofstream(dir.file("model.safetensors"), std::ios::binary) << model.body;
  {  // The file describes itself: the job's spec, its dataset, where training stopped.
    uint64_t n = 0;
    std::memcpy(&n, model.body.data(), 8);
    const json::object header = json::parse(model.body.substr(8, n)).as_object();
    const json::object meta = obj(header.at("__metadata__"));
    CHECK(str(meta, "format") == "pstrain");
    CHECK(str(meta, "dataset") == "mnist10k");
    CHECK(str(meta, "input_dtype") == "uint8");
    CHECK(str(meta, "step") == std::to_string(static_cast<int64_t>(num(done, "total_steps"))));
    CHECK(job_spec_to_json(parse_accepted_job_spec(str(meta, "spec"))) ==
          job_spec_to_json(parse_accepted_job_spec(json::serialize(done.at("spec")))));
  }
  std::ofstream(dir.file("spec.json")) << json::serialize(obj(done.at("spec")));
  {
    NpyFileWriter inputs(dir.file("x.npy"), dir.file("unused.npy"));
    inputs.begin({28, 28, 1}, Dtype::kFloat32);
    inputs.examples(reinterpret_cast<const uint8_t*>(x.data()), x.size() * sizeof(float));
    const std::vector<int32_t> labels(kN, 0);
    inputs.labels(labels.data(), kN);
    inputs.finish();
    NpyFileWriter raw_inputs(dir.file("raw.npy"), dir.file("unused.npy"));
    raw_inputs.begin({28, 28, 1}, Dtype::kUint8);
    raw_inputs.examples(raw.data(), raw.size());
    raw_inputs.labels(labels.data(), kN);
    raw_inputs.finish();
  }
  const std::string command = "/usr/bin/python3 " + std::string(PSTRAIN_SOURCE_DIR) + "/tests/integration/numpy_forward.py " +
                              dir.file("model.safetensors") + " " + dir.file("spec.json") + " " + dir.file("x.npy") + " " +
                              dir.file("p.npy");
  REQUIRE_MESSAGE(std::system(command.c_str()) == 0, command);

  // The standalone trainer evaluates the downloaded file alone (its spec is in it) to the same figures.
  {
    const std::string trainer = testing::binary("worker/pstrain-train") + " --evaluate " + dir.file("model.safetensors") +
                                " --data-dir " + testing::data_dir() + " --threads 1 2>/dev/null";
    FILE* out = ::popen(trainer.c_str(), "r");
    REQUIRE(out != nullptr);
    std::string text;
    char buffer[4096];
    while (size_t n = std::fread(buffer, 1, sizeof buffer, out)) text.append(buffer, n);
    CHECK(::pclose(out) == 0);
    const size_t at = text.find("EVALUATION ");
    REQUIRE_MESSAGE(at != std::string::npos, text);
    const json::object offline = json::parse(text.substr(at + 11)).as_object();
    CHECK(num(offline, "accuracy") == num(e, "accuracy"));
    CHECK(num(offline, "loss") == doctest::Approx(num(e, "loss")).epsilon(1e-6));  // (float sums in another order)
    CHECK(json::serialize(offline.at("confusion_matrix")) == json::serialize(e.at("confusion_matrix")));
  }
  // ... and predicts the same instances to the same answers: raw pixels (uint8), and the values
  // as the model sees them (float32) asked for by name; without it those are refused.
  for (const std::string inputs : {" --inputs " + dir.file("raw.npy"), " --inputs " + dir.file("x.npy") + " --input-form scaled"}) {
    const std::string trainer = testing::binary("worker/pstrain-train") + " --predict " + dir.file("model.safetensors") +
                                inputs + " --threads 1 2>/dev/null";
    FILE* out = ::popen(trainer.c_str(), "r");
    REQUIRE(out != nullptr);
    std::string text;
    char buffer[1 << 16];
    while (size_t n = std::fread(buffer, 1, sizeof buffer, out)) text.append(buffer, n);
    CHECK(::pclose(out) == 0);
    const size_t at = text.find("PREDICTIONS ");
    REQUIRE_MESSAGE(at != std::string::npos, text.substr(0, 400));
    const json::array offline = arr(json::parse(text.substr(at + 12)).as_object(), "predictions");
    REQUIRE(offline.size() == kN);
    for (size_t i = 0; i < kN; ++i) {
      CHECK(num(obj(offline[i]), "class") == num(obj(predictions[i]), "class"));
      const json::array a = arr(obj(offline[i]), "probabilities"), b = arr(obj(predictions[i]), "probabilities");
      for (size_t k = 0; k < a.size(); ++k) CHECK(a[k].to_number<double>() == doctest::Approx(b[k].to_number<double>()).epsilon(1e-5));
    }
  }
  {
    const std::string refused = testing::binary("worker/pstrain-train") + " --predict " + dir.file("model.safetensors") +
                                " --inputs " + dir.file("x.npy") + " --threads 1 2>&1";
    FILE* out = ::popen(refused.c_str(), "r");
    REQUIRE(out != nullptr);
    std::string text;
    char buffer[4096];
    while (size_t n = std::fread(buffer, 1, sizeof buffer, out)) text.append(buffer, n);
    CHECK(::pclose(out) != 0);
    CHECK_MESSAGE(text.find("not a raw pixel value") != std::string::npos, text);
    CHECK_MESSAGE(text.find("--input-form scaled") != std::string::npos, text);
  }
  std::ifstream in(dir.file("p.npy"), std::ios::binary);
  const std::string bytes(std::istreambuf_iterator<char>(in), {});
  const size_t header = 10 + (static_cast<uint8_t>(bytes[8]) | (static_cast<uint8_t>(bytes[9]) << 8));
  REQUIRE(bytes.size() == header + kN * 10 * sizeof(float));
  double worst = 0;
  size_t same_class = 0;
  for (size_t i = 0; i < kN; ++i) {
    const json::array probabilities = arr(obj(predictions[i]), "probabilities");
    REQUIRE(probabilities.size() == 10);
    size_t best = 0;
    float best_p = -1;
    for (size_t k = 0; k < 10; ++k) {
      float reference;
      std::memcpy(&reference, bytes.data() + header + (i * 10 + k) * sizeof(float), sizeof reference);
      worst = std::max(worst, std::abs(probabilities[k].to_number<double>() - reference));
      if (reference > best_p) {
        best_p = reference;
        best = k;
      }
    }
    same_class += num(obj(predictions[i]), "class") == static_cast<double>(best) ? 1 : 0;
  }
  INFO("largest probability difference against NumPy: " << worst);
  CHECK(worst < 1e-5);
  CHECK(same_class == kN);
}

std::string job(const std::string& layers, int epochs = 1) {
  return R"({"name": "m", "dataset": {"name": "mnist10k", "shuffle_seed": 2},
    "model": {"input_shape": [28, 28, 1], "seed": 2, "layers": )" + layers + R"(},
    "optimizer": {"type": "adam"},
    "training": {"global_batch_size": 128, "epochs": )" + std::to_string(epochs) + R"(, "workers": 2, "servers": 2}})";
}

}  // namespace

TEST_CASE("models: evaluate equals the job's evaluation and predict equals NumPy, for an MLP and a CNN") {
  testing::Cluster cluster({});
  check_model(cluster, job(R"([{"type": "flatten"}, {"type": "dense", "units": 64, "activation": "relu"},
      {"type": "dense", "units": 10}])"));
  check_model(cluster, job(R"([{"type": "conv2d", "filters": 6, "kernel_size": 3, "strides": 2, "padding": "same",
      "activation": "relu"}, {"type": "maxpool2d"}, {"type": "flatten"}, {"type": "dense", "units": 10}])"));
}

TEST_CASE("models: bad requests get their status and name the instance at fault") {
  testing::Cluster cluster({});
  const int port = cluster.http_port();
  const std::string id = submit(cluster, job(R"([{"type": "flatten"}, {"type": "dense", "units": 10}])"));
  wait_for_state(cluster, id, "SUCCEEDED");
  const std::string target = "/v1/models/" + id + ":predict";
  auto expect = [&](const Reply& reply, unsigned status, const std::string& type, const std::string& needle,
                    const std::string& field = "") {
    check_problem(reply, status, type, field);
    INFO(reply.describe());
    CHECK(str(object_of(reply), "type") == "urn:pstrain:problem:" + type);
    CHECK(str(object_of(reply), "detail").find(needle) != std::string::npos);
  };
  const std::string one(784, '0');
  std::string flat = "[";
  for (int i = 0; i < 784; ++i) flat += i ? ",0" : "0";
  flat += "]";
  Reply r;
  post(port, target, R"({"instances": [)" + flat + "]}", &r);
  CHECK(r.status == 200);  // the flat form of the input
  post(port, target, R"({"instances": [)" + flat + "," + flat + ",[[1,2]]]}", &r);
  expect(r, 422, "invalid-instance", "dimension 0 has 1 entries", "/instances/2");
  post(port, target, R"({"instances": [)" + flat + ",[" + flat.substr(1, flat.size() - 3) + "1e39]]}", &r);
  expect(r, 422, "invalid-instance", "not a finite float32", "/instances/1");
  // Raw pixel values are integers 0-255; anything else names the value and the way to send it.
  std::string half = flat;
  half.replace(half.rfind(",0]"), 3, ",0.5]");
  post(port, target, R"({"instances": [)" + flat + "," + half + "]}", &r);
  expect(r, 422, "invalid-instance", "value 783: the value 0.5 is not a raw pixel value", "/instances/1");
  post(port, target, R"({"instances": [)" + flat + "," + half.substr(0, half.size() - 4) + "256]]}", &r);
  expect(r, 422, "invalid-instance", "value 783: the value 256 is not a raw pixel value", "/instances/1");
  post(port, target, R"({"instances": [)" + half + R"(], "input_form": "scaled"})", &r);
  CHECK(r.status == 200);
  post(port, target, R"({"instances": [)" + flat + R"(], "input_form": "pixels"})", &r);
  expect(r, 422, "invalid-instances", "/input_form must be", "/input_form");
  post(port, target, R"({"instances": [{"b64": "AAAA"}]})", &r);
  expect(r, 422, "invalid-instance", "holds 3 bytes", "/instances/0");
  post(port, target, R"({"instances": [{"b64": "not base64!"}]})", &r);
  expect(r, 422, "invalid-instance", "not valid base64", "/instances/0");
  post(port, target, R"({"instances": []})", &r);
  expect(r, 422, "invalid-instances", "non-empty", "/instances");
  post(port, target, R"({"instances": [1], "signature": "x"})", &r);
  expect(r, 422, "invalid-instances", "/signature", "/signature");
  std::string many = R"({"instances": [)";
  for (int i = 0; i < 4097; ++i) many += i ? ",[0]" : "[0]";
  post(port, target, many + "]}", &r);
  expect(r, 413, "too-many-instances", "at most 4096");
  post(port, target, "{not json", &r);
  expect(r, 400, "malformed-json", "JSON");
  r = call(port, http::verb::post, target, R"({"instances": [1]})", "text/plain");
  expect(r, 415, "unsupported-media-type", "application/json");
  post(port, "/v1/models/job-99:predict", R"({"instances": [1]})", &r);
  expect(r, 404, "model-not-found", "job-99");
  post(port, "/v1/jobs/" + id + "/evaluate", R"({"checkpoint": 3})", &r);
  expect(r, 404, "checkpoint-not-found", "no checkpoint at step 3", "/checkpoint");
  post(port, "/v1/jobs/" + id + "/evaluate", R"({"dataset": "nothere"})", &r);
  expect(r, 422, "invalid-evaluation", "not a dataset", "/dataset");
  // A job still running has no model yet.
  const std::string running = submit(cluster, job(R"([{"type": "flatten"}, {"type": "dense", "units": 10}])", 500));
  wait_for_state(cluster, running, "RUNNING");
  post(port, "/v1/models/" + running + ":predict", R"({"instances": [1]})", &r);
  expect(r, 409, "model-not-ready", "RUNNING");
  CHECK(call(port, http::verb::post, "/v1/jobs/" + running + "/cancel").status == 200);
  // The models list holds the finished job only.
  const json::array models = arr(object_of(get(port, "/v1/models")), "models");
  REQUIRE(models.size() == 1);
  CHECK(str(obj(models[0]), "id") == id);
  CHECK(get(port, "/healthz").status == 200);
}

namespace {

// The "predictions" of `instances` by model `id`.
std::string predictions_of(int port, const std::string& id, const std::string& instances) {
  Reply r;
  const std::string body = post(port, "/v1/models/" + id + ":predict", instances, &r);
  REQUIRE_MESSAGE(r.status == 200, r.describe());
  return json::serialize(json::parse(body).as_object().at("predictions"));
}

Reply upload(int port, const std::string& file, const std::string& query = "",
             const std::string& type = "application/octet-stream") {
  Reply r = call(port, http::verb::post, "/v1/models" + query, file, type);
  INFO("POST /v1/models" << query << " -> " << r.describe());
  return r;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_CASE("models: uploaded files (ours and NumPy's) predict, evaluate and start jobs - bad uploads are refused") {
  testing::TempDir datasets;  // uploads stream to its staging directory
  testing::Cluster cluster({.coordinator_flags = {"--datasets-dir", datasets.path()}});
  const int port = cluster.http_port();
  testing::TempDir dir;
  const std::string mlp64 = R"([{"type": "flatten"}, {"type": "dense", "units": 64, "activation": "relu"},
      {"type": "dense", "units": 10}])";
  const std::string trained = submit(cluster, job(mlp64));
  const json::object done = wait_for_state(cluster, trained, "SUCCEEDED", 240s);
  const Reply file = get(port, "/v1/models/" + trained + "/file");
  REQUIRE(file.status == 200);
  CHECK(file.body == get(port, "/v1/jobs/" + trained + "/model").body);
  std::ofstream(dir.file("ours.safetensors"), std::ios::binary) << file.body;
  std::ofstream(dir.file("model.json")) << json::serialize(obj(done.at("spec")).at("model"));
  std::vector<uint8_t> raw;
  const std::vector<float> seen = test_images(50, &raw);
  const std::string instances = instances_json(as_floats(raw), 50);
  const std::string expected = predictions_of(port, trained, instances);
  auto refused = [](const Reply& reply, unsigned status, const std::string& needle, const std::string& field = "") {
    check_problem(reply, status, needle, field);
    INFO(reply.describe());
    CHECK(str(object_of(reply), "detail").find(needle) != std::string::npos);
  };

  // Our own file: its architecture from its metadata; the same predictions and evaluation.
  Reply r = upload(port, file.body, "?name=mine");
  REQUIRE(r.status == 201);
  const json::object ours = object_of(r);
  const std::string ours_id = str(ours, "id");
  CHECK(ours_id.rfind("model-", 0) == 0);
  CHECK(r.header("location") == "/v1/models/" + ours_id);
  CHECK(str(ours, "name") == "mine");
  CHECK(str(ours, "source") == "upload");
  CHECK(num(ours, "bytes") == static_cast<double>(file.body.size()));
  CHECK(str(ours, "sha256").size() == 64);
  CHECK(num(ours, "classes") == 10);
  CHECK(arr(ours, "tensors").size() == 4);
  CHECK(predictions_of(port, ours_id, instances) == expected);
  CHECK(get(port, "/v1/models/" + ours_id + "/file").body == file.body);
  json::object e = json::parse(post(port, "/v1/models/" + ours_id + ":evaluate", R"({"dataset": "mnist10k"})", &r)).as_object();
  REQUIRE(r.status == 200);
  CHECK(num(e, "accuracy") == num(done, "test_accuracy"));

  // NumPy's file: float64, other tensor order, the architecture as metadata "model".
  const std::string script = "/usr/bin/python3 " + std::string(PSTRAIN_SOURCE_DIR) + "/tests/integration/rewrite_safetensors.py ";
  const std::string with_model = script + dir.file("ours.safetensors") + " " + dir.file("f64.safetensors") +
                                 " F64 --model " + dir.file("model.json") + " --input-dtype uint8";
  REQUIRE_MESSAGE(std::system(with_model.c_str()) == 0, with_model);
  r = upload(port, read_file(dir.file("f64.safetensors")));
  REQUIRE(r.status == 201);
  const std::string f64_id = str(object_of(r), "id");
  CHECK(str(obj(arr(object_of(r), "tensors")[0]), "dtype") == "F64");
  CHECK(predictions_of(port, f64_id, instances) == expected);  // float32 values through float64: exact
  std::string unsaid_id;
  {  // Without "input_dtype" nothing says how its dataset stored inputs: numbers as the model sees them.
    const std::string unsaid = script + dir.file("ours.safetensors") + " " + dir.file("unsaid.safetensors") +
                               " F32 --model " + dir.file("model.json");
    REQUIRE_MESSAGE(std::system(unsaid.c_str()) == 0, unsaid);
    r = upload(port, read_file(dir.file("unsaid.safetensors")));
    REQUIRE(r.status == 201);
    unsaid_id = str(object_of(r), "id");
    CHECK(predictions_of(port, unsaid_id, instances_json(seen, 50)) == expected);
    post(port, "/v1/models/" + unsaid_id + ":predict",
         R"({"instances": [{"b64": ")" + base64(raw.data(), 784) + R"("}]})", &r);
    refused(r, 422, "stores float32", "/instances/0");
  }

  // NumPy's file without an architecture: jobs can start from it, it cannot predict alone.
  const std::string bare = script + dir.file("ours.safetensors") + " " + dir.file("bare.safetensors") + " F32";
  REQUIRE_MESSAGE(std::system(bare.c_str()) == 0, bare);
  r = upload(port, read_file(dir.file("bare.safetensors")));
  REQUIRE(r.status == 201);
  const std::string bare_id = str(object_of(r), "id");
  CHECK(object_of(r).at("model").is_null());
  post(port, "/v1/models/" + bare_id + ":predict", instances, &r);
  refused(r, 409, "no architecture");
  // A job from it with a learning rate too small to move anything starts where the model is: its
  // accuracy after one epoch is the trained model's (from scratch it would be near chance).
  std::string tuned_spec = job(mlp64);
  tuned_spec.replace(tuned_spec.find(R"({"type": "adam"})"), 16, R"({"type": "sgd", "learning_rate": 1e-9})");
  tuned_spec.insert(tuned_spec.rfind('}'), R"(, "init_from": {"model": ")" + bare_id + R"("})");
  const std::string tuned = submit(cluster, tuned_spec);
  const json::object tuned_done = wait_for_state(cluster, tuned, "SUCCEEDED", 240s);
  MESSAGE("trained " << num(done, "test_accuracy") << ", started from its upload " << num(tuned_done, "test_accuracy"));
  CHECK(num(done, "test_accuracy") > 0.8);
  CHECK(std::abs(num(tuned_done, "test_accuracy") - num(done, "test_accuracy")) < 0.01);
  bool noted = false;
  for (const auto& n : arr(tuned_done, "notes")) noted = noted || std::string(n.as_string()).find("uploaded model " + bare_id) != std::string::npos;
  CHECK(noted);

  // The list: the trained model, then the uploads in order.
  const json::array models = arr(object_of(get(port, "/v1/models")), "models");
  std::vector<std::string> ids;
  for (const auto& m : models) ids.push_back(str(obj(m), "id"));
  CHECK(ids == std::vector<std::string>{trained, tuned, ours_id, f64_id, unsaid_id, bare_id});

  // Bad uploads and uses, each with its status, naming the tensor or field.
  refused(upload(port, "not a model at all"), 422, "not a safetensors file");
  const std::string nan = script + dir.file("ours.safetensors") + " " + dir.file("nan.safetensors") +
                          " F32 --model " + dir.file("model.json") + " --nan layers.2.bias";
  REQUIRE_MESSAGE(std::system(nan.c_str()) == 0, nan);
  refused(upload(port, read_file(dir.file("nan.safetensors"))), 422, "not a finite float32", "layers.2.bias");
  std::ofstream(dir.file("model32.json")) << R"({"input_shape": [28, 28, 1], "layers": [{"type": "flatten"},
      {"type": "dense", "units": 32, "activation": "relu"}, {"type": "dense", "units": 10}]})";
  const std::string wrong = script + dir.file("ours.safetensors") + " " + dir.file("wrong.safetensors") +
                            " F16 --model " + dir.file("model32.json");
  REQUIRE_MESSAGE(std::system(wrong.c_str()) == 0, wrong);
  r = upload(port, read_file(dir.file("wrong.safetensors")));
  refused(r, 422, "has shape [784, 64]; the model's is [784, 32]", "layers.1.kernel");
  CHECK(str(object_of(r), "type") == "urn:pstrain:problem:model-mismatch");
  refused(upload(port, file.body, "", "application/json"), 415, "application/octet-stream");
  refused(upload(port, file.body, "?colour=red"), 400, "'colour'", "colour");
  std::string other = job(R"([{"type": "flatten"}, {"type": "dense", "units": 32, "activation": "relu"},
      {"type": "dense", "units": 10}])");
  other.insert(other.rfind('}'), R"(, "init_from": {"model": ")" + bare_id + R"("})");
  refused(post_json(port, "/v1/jobs", other), 422, "tensor 'layers.1.kernel' has shape [784, 64] in uploaded model", "/init_from");
  std::string resume = job(mlp64);
  resume.insert(resume.rfind('}'), R"(, "init_from": {"model": ")" + bare_id + R"(", "optimizer_state": true})");
  refused(post_json(port, "/v1/jobs", resume), 422, "parameters only", "/init_from/optimizer_state");
  post(port, "/v1/models/" + ours_id + ":evaluate", "{}", &r);
  refused(r, 422, "/dataset is required", "/dataset");
  post(port, "/v1/models/" + ours_id + ":evaluate", R"({"checkpoint": 1})", &r);
  refused(r, 422, "/checkpoint is not a known field", "/checkpoint");
  refused(call(port, http::verb::delete_, "/v1/models/" + trained), 409, "goes with its job");
  CHECK(call(port, http::verb::delete_, "/v1/models/" + bare_id).status == 204);
  refused(get(port, "/v1/models/" + bare_id), 404, "no model");
  refused(call(port, http::verb::delete_, "/v1/models/" + bare_id), 404, "no model");
  refused(post_json(port, "/v1/jobs", resume), 422, "no model '" + bare_id + "'", "/init_from/model");

  // A restarted coordinator still has the uploads (and numbers new ones after them).
  cluster.restart_coordinator(false);
  CHECK(predictions_of(port, f64_id, instances) == expected);
  r = upload(port, file.body);
  REQUIRE(r.status == 201);
  CHECK(str(object_of(r), "id") == "model-5");
  CHECK(get(port, "/healthz").status == 200);
}
