// The dataset catalog end to end: a real coordinator (and, for training, servers and workers) as
// processes, driven over HTTP only. Each format is uploaded, listed with its statistics and
// checksums, and trained on to an accuracy threshold; data of other shapes (30 float features,
// 8x8x1 images) and class counts (2, 3); every defect answered with its status and a message
// naming it while the server keeps serving; a dropped upload leaves no file; the catalog survives
// a hard restart.
#include <doctest/doctest.h>

#include <zip.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/base/sha256.h"
#include "tests/integration/cluster.h"
#include "tests/integration/http_test_client.h"
#include "tests/integration/test_encodings.h"
#include "tests/test_support.h"

using namespace pstrain;
using namespace pstrain::testing::http_test;
using pstrain::testing::npy;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

// ---- Data made here, so that every byte is known.

// n examples of d float features in k classes: Gaussian blobs around well-separated centres.
struct Tabular {
  std::vector<float> x;  // n * d
  std::vector<int32_t> y;
  int d = 0;
};

Tabular make_tabular(int n, int d, int k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::mt19937 centre_rng(7);  // the same centres for every split
  std::vector<float> centres(static_cast<size_t>(k * d));
  for (auto& c : centres) c = 2.5f * normal(centre_rng);
  Tabular t;
  t.d = d;
  for (int i = 0; i < n; ++i) {
    const int label = static_cast<int>(rng() % static_cast<uint32_t>(k));
    t.y.push_back(label);
    for (int j = 0; j < d; ++j) t.x.push_back(centres[static_cast<size_t>(label * d + j)] + normal(rng));
  }
  return t;
}

std::string to_csv(const Tabular& t, const std::string& label_name = "label") {
  std::ostringstream out;
  for (int j = 0; j < t.d; ++j) out << "f" << j << ",";
  out << label_name << "\n";
  out.precision(9);
  for (size_t i = 0; i < t.y.size(); ++i) {
    for (int j = 0; j < t.d; ++j) out << t.x[i * static_cast<size_t>(t.d) + static_cast<size_t>(j)] << ",";
    out << t.y[i] << "\n";
  }
  return out.str();
}

// An .npz (zip) holding the given entries, as bytes.
std::string npz(const std::vector<std::pair<std::string, std::string>>& entries) {
  const testing::TempDir dir;
  const std::string path = dir.file("a.npz");
  int error = 0;
  zip_t* archive = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &error);
  REQUIRE(archive != nullptr);
  for (const auto& [name, bytes] : entries) {
    zip_source_t* source = zip_source_buffer(archive, bytes.data(), bytes.size(), 0);
    REQUIRE(zip_file_add(archive, name.c_str(), source, ZIP_FL_OVERWRITE) >= 0);
  }
  REQUIRE(zip_close(archive) == 0);
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string tabular_npz(const Tabular& t) {
  return npz({{"x.npy", npy("<f4", {t.y.size(), static_cast<size_t>(t.d)}, t.x.data(), t.x.size() * 4)},
              {"y.npy", npy("<i4", {t.y.size()}, t.y.data(), t.y.size() * 4)}});
}

// 8x8 single-channel images in 2 classes: a bright top half or a bright bottom half, with noise.
struct Images {
  std::string images_idx, labels_idx;  // plain IDX files
};

Images make_images(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  Images out;
  auto be32 = [](std::string& s, uint32_t v) {
    for (int shift : {24, 16, 8, 0}) s += static_cast<char>((v >> shift) & 0xff);
  };
  out.images_idx = std::string("\0\0\x08\x03", 4);
  be32(out.images_idx, static_cast<uint32_t>(n));
  be32(out.images_idx, 8);
  be32(out.images_idx, 8);
  out.labels_idx = std::string("\0\0\x08\x01", 4);
  be32(out.labels_idx, static_cast<uint32_t>(n));
  for (int i = 0; i < n; ++i) {
    const int label = static_cast<int>(rng() % 2);
    out.labels_idx += static_cast<char>(label);
    for (int r = 0; r < 8; ++r) {
      for (int c = 0; c < 8; ++c) {
        const bool bright = (r < 4) == (label == 0);
        out.images_idx += static_cast<char>((bright ? 150 : 0) + static_cast<int>(rng() % 100));
      }
    }
  }
  return out;
}

std::string sha256_of(const std::string& bytes) {
  Sha256 h;
  h.update(bytes.data(), bytes.size());
  return h.hex();
}

// ---- REST.

Reply put(int port, const std::string& target, const std::string& body, const std::string& type) {
  return call(port, http::verb::put, target, body, type);
}

json::object dataset(int port, const std::string& name) {
  const Reply r = get(port, "/v1/datasets/" + name);
  INFO("GET /v1/datasets/" << name << " -> " << r.describe());
  REQUIRE(r.status == 200);
  return object_of(r);
}

// The job spec: `layers` (JSON array text) on `name` with input `shape`, sync on 2 workers.
std::string job_json(const std::string& name, const std::string& shape, const std::string& layers, int epochs,
                     double lr = 0.01) {
  return R"({"name": "on-)" + name + R"(", "dataset": {"name": ")" + name + R"(", "shuffle_seed": 1},
    "model": {"input_shape": )" + shape + R"(, "seed": 1, "layers": )" + layers + R"(},
    "optimizer": {"type": "adam", "learning_rate": )" + std::to_string(lr) + R"(},
    "training": {"global_batch_size": 64, "epochs": )" + std::to_string(epochs) + R"(, "workers": 2, "servers": 2}})";
}

double final_test_accuracy(testing::Cluster& cluster, const std::string& id) {
  const json::object done = wait_for_state(cluster, id, "SUCCEEDED", 180s);
  return num(done, "test_accuracy");
}

}  // namespace

TEST_CASE("datasets: CSV, NPZ and IDX uploads are listed with their statistics, trained on, and survive a restart") {
  testing::TempDir data;
  testing::ClusterOptions options;
  options.coordinator_flags = {"--data-dir", data.path()};
  testing::Cluster cluster(options);
  const int port = cluster.http_port();

  // Tabular: 30 float features, 3 classes; train as CSV (label column named "class"), test as NPZ.
  const Tabular train = make_tabular(3000, 30, 3, 1);
  const Tabular test = make_tabular(600, 30, 3, 2);
  const std::string csv = to_csv(train, "class");
  Reply r = put(port, "/v1/datasets/blobs/train?label=class", csv, "text/csv");
  INFO("PUT blobs/train -> " << r.describe());
  REQUIRE(r.status == 201);
  CHECK(r.header("location") == "/v1/datasets/blobs");
  CHECK(str(obj(object_of(r)["upload"]), "sha256") == sha256_of(csv));
  r = put(port, "/v1/datasets/blobs/test", tabular_npz(test), "application/x-npz");
  INFO("PUT blobs/test -> " << r.describe());
  REQUIRE(r.status == 201);

  json::object blobs = dataset(port, "blobs");
  CHECK(str(blobs, "source") == "upload");
  CHECK(json::serialize(blobs["input_shape"]) == "[30]");
  CHECK(str(blobs, "dtype") == "float32");
  CHECK(num(blobs, "num_classes") == 3);
  const json::object splits = obj(blobs["splits"]);
  CHECK(num(obj(splits.at("train")), "examples") == 3000);
  CHECK(num(obj(splits.at("test")), "examples") == 600);
  std::vector<double> counts(3, 0);
  for (int32_t y : train.y) counts[static_cast<size_t>(y)] += 1;
  const json::array listed = arr(obj(splits.at("train")), "class_counts");
  REQUIRE(listed.size() == 3);
  for (size_t c = 0; c < 3; ++c) CHECK(listed[c].to_number<double>() == counts[c]);
  // Each stored file's sha256 is the one of its bytes on disk.
  for (const auto& f : arr(obj(splits.at("test")), "files")) {
    std::ifstream in(data.file("blobs/" + str(obj(f), "name")), std::ios::binary);
    const std::string bytes(std::istreambuf_iterator<char>(in), {});
    CHECK(str(obj(f), "sha256") == sha256_of(bytes));
    CHECK(num(obj(f), "bytes") == static_cast<double>(bytes.size()));
  }

  // Images of another size and class count: 8x8x1, 2 classes, as an IDX pair (plain).
  const Images images = make_images(2000, 3);
  const Images images_test = make_images(400, 4);
  r = put(port, "/v1/datasets/halves/train/images", images.images_idx, "application/octet-stream");
  INFO("PUT halves/train/images -> " << r.describe());
  CHECK(r.status == 202);
  CHECK(str(object_of(r), "waiting_for") == "labels");
  CHECK(get(port, "/v1/datasets/halves").status == 404);  // half a pair is not a dataset
  CHECK(put(port, "/v1/datasets/halves/train/labels", images.labels_idx, "application/octet-stream").status == 201);
  CHECK(put(port, "/v1/datasets/halves/test/labels", images_test.labels_idx, "application/octet-stream").status == 202);
  CHECK(put(port, "/v1/datasets/halves/test/images", images_test.images_idx, "application/octet-stream").status == 201);
  json::object halves = dataset(port, "halves");
  CHECK(json::serialize(halves["input_shape"]) == "[8,8,1]");
  CHECK(str(halves, "dtype") == "uint8");
  CHECK(num(halves, "num_classes") == 2);

  // Both in the list, beside the built-in datasets.
  std::set<std::string> names;
  for (const auto& d : arr(object_of(get(port, "/v1/datasets")), "datasets")) names.insert(str(obj(d), "name"));
  CHECK(names.count("blobs") == 1);
  CHECK(names.count("halves") == 1);
  CHECK(names.count("fashion-mnist") == 1);

  // A job on each reaches an accuracy a broken data path could not.
  const std::string tab_job = submit(cluster, job_json("blobs", "[30]", R"([{"type": "dense", "units": 32, "activation": "relu"},
      {"type": "dense", "units": 3}])", 2));
  CHECK(final_test_accuracy(cluster, tab_job) >= 0.95);
  const std::string img_job = submit(cluster, job_json("halves", "[8, 8, 1]", R"([
      {"type": "conv2d", "filters": 4, "kernel_size": 3, "padding": "same", "activation": "relu"},
      {"type": "maxpool2d"}, {"type": "flatten"}, {"type": "dense", "units": 2}])", 2));
  CHECK(final_test_accuracy(cluster, img_job) >= 0.95);
  CHECK(arr(dataset(port, "blobs"), "used_by").empty());  // finished jobs do not hold it

  // The catalog survives a hard restart: same records, same checksums.
  const std::string before = json::serialize(dataset(port, "blobs")["splits"]);
  cluster.restart_coordinator(true);
  CHECK(json::serialize(dataset(port, "blobs")["splits"]) == before);
  CHECK(dataset(port, "halves").size() > 0);
}

TEST_CASE("datasets: every defect gets its status and a message naming it, and nothing is left behind") {
  testing::TempDir data;
  testing::ClusterOptions options;
  options.servers = 1;
  options.workers = 1;
  options.coordinator_flags = {"--data-dir", data.path(), "--max-upload-bytes", std::to_string(4 << 20)};
  testing::Cluster cluster(options);
  const int port = cluster.http_port();

  auto expect = [&](const Reply& reply, unsigned status, const std::string& type, const std::string& needle) {
    check_problem(reply, status, type);
    const json::object o = object_of(reply);
    INFO(reply.describe());
    CHECK(str(o, "type") == "urn:pstrain:problem:" + type);
    CHECK(str(o, "detail").find(needle) != std::string::npos);
    return o;
  };
  const std::string csv_type = "text/csv";
  // CSV defects, with line and column.
  json::object o = expect(put(port, "/v1/datasets/bad/train", "a,b,label\n1,2,0\n3,4\n", csv_type), 422,
                          "dataset-ragged-row", "line 3 has 2 fields");
  CHECK(num(o, "line") == 3);
  o = expect(put(port, "/v1/datasets/bad/train?types=b:numeric", "a,b,label\n1,2,0\n3,x,1\n", csv_type), 422,
             "dataset-not-numeric", "'x' is not a number");
  CHECK(num(o, "line") == 3);
  CHECK(str(o, "column") == "b");
  expect(put(port, "/v1/datasets/bad/train", "a,b,label\n1,2,0\n3,4,NA\n", csv_type), 422, "dataset-bad-label",
         "the label is missing");
  o = expect(put(port, "/v1/datasets/bad/train", "a,b,label\n1,2,0\n\"3\"x,4,1\n", csv_type), 422, "dataset-quoted-field",
             "after a closing quote");
  CHECK(num(o, "line") == 3);
  expect(put(port, "/v1/datasets/bad/train?sep=pipe", "a,label\n1,0\n", csv_type), 400, "invalid-parameter", "sep must be");
  expect(put(port, "/v1/datasets/bad/train?types=a:words", "a,label\n1,0\n", csv_type), 400, "invalid-parameter",
         "column:type");
  expect(put(port, "/v1/datasets/bad/train?types=zz:numeric", "a,label\n1,0\n2,1\n", csv_type), 422, "dataset-bad-header",
         "'zz'");
  expect(put(port, "/v1/datasets/bad/train?task=guess", "a,b,label\n1,2,0\n3,4,1\n", csv_type), 400,
         "invalid-parameter", "task must be regression or classification");
  expect(put(port, "/v1/datasets/bad/train", "a,b,label\n1,2,0\n3,4,-1\n", csv_type), 422, "dataset-bad-label", "-1");
  expect(put(port, "/v1/datasets/bad/train", "a,b,label\n1,inf,0\n3,4,1\n", csv_type), 422, "dataset-non-finite",
         "not a finite float32");
  expect(put(port, "/v1/datasets/bad/train", "a,b,label\n1,2,0\n3,4,0\n", csv_type), 422, "dataset-too-few-classes",
         "at least 2 classes");
  expect(put(port, "/v1/datasets/bad/train", "a,b\n1,2\n", csv_type), 422, "dataset-missing-label-column", "'label'");
  // NPZ defects.
  const float xs[4] = {1, 2, 3, 4};
  const float nan_xs[4] = {1, std::nanf(""), 3, 4};
  const int32_t ys[2] = {0, 1};
  const int32_t ys3[3] = {0, 1, 1};
  const std::string x_ok = npy("<f4", {2, 2}, xs, sizeof xs);
  expect(put(port, "/v1/datasets/bad/train", npz({{"x.npy", x_ok}, {"y.npy", npy("<i4", {3}, ys3, sizeof ys3)}}),
             "application/x-npz"),
         422, "dataset-length-mismatch", "x holds 2 examples, y holds 3 labels");
  expect(put(port, "/v1/datasets/bad/train", npz({{"x.npy", npy("<f4", {2, 2}, nan_xs, sizeof nan_xs)}, {"y.npy", npy("<i4", {2}, ys, sizeof ys)}}),
             "application/x-npz"),
         422, "dataset-non-finite", "NaN");
  expect(put(port, "/v1/datasets/bad/train", npz({{"x.npy", npy("<i4", {2, 2}, xs, sizeof xs)}, {"y.npy", npy("<i4", {2}, ys, sizeof ys)}}),
             "application/x-npz"),
         422, "dataset-bad-dtype", "|u1 or <f4");
  expect(put(port, "/v1/datasets/bad/train", npz({{"x.npy", x_ok}, {"y.npy", npy("<i4", {1, 2}, ys, sizeof ys)}}),
             "application/x-npz"),
         422, "dataset-bad-rank", "rank 1");
  expect(put(port, "/v1/datasets/bad/train", npz({{"x.npy", x_ok}}), "application/x-npz"), 422, "dataset-missing-array",
         "y.npy");
  expect(put(port, "/v1/datasets/bad/train", "not a zip", "application/x-npz"), 422, "dataset-unreadable", "zip");
  // Media type, size, name, split.
  expect(put(port, "/v1/datasets/bad/train", "a,label\n1,0\n", "text/plain"), 415, "unsupported-media-type", "text/csv");
  expect(put(port, "/v1/datasets/bad/train", std::string(5 << 20, '1'), csv_type), 413, "body-too-large", "limit");
  expect(put(port, "/v1/datasets/Bad_Name/train", "a,label\n1,0\n2,1\n", csv_type), 400, "invalid-dataset-name", "Bad_Name");
  expect(put(port, "/v1/datasets/ok/validation", "a,label\n1,0\n2,1\n", csv_type), 400, "invalid-split", "'validation'");
  expect(put(port, "/v1/datasets/fashion-mnist/train", "a,label\n1,0\n2,1\n", csv_type), 409, "dataset-builtin", "built-in");
  // Nothing of the above was stored.
  CHECK(get(port, "/v1/datasets/bad").status == 404);

  // An existing split: 409 unless ?replace=true; a test split must match the train split's shape.
  const Tabular t = make_tabular(400, 4, 2, 5);
  REQUIRE(put(port, "/v1/datasets/ok/train", to_csv(t), csv_type).status == 201);
  expect(put(port, "/v1/datasets/ok/train", to_csv(t), csv_type), 409, "dataset-exists", "replace=true");
  CHECK(put(port, "/v1/datasets/ok/train?replace=true", to_csv(t), csv_type).status == 200);
  expect(put(port, "/v1/datasets/ok/test", to_csv(make_tabular(50, 5, 2, 6)), csv_type), 422, "dataset-bad-header",
         "feature column 5 is 'f4' but the dataset's other split has no column there");

  // A job spec that does not fit the dataset, or names none.
  o = expect(post_json(port, "/v1/jobs", job_json("ok", "[5]", R"([{"type": "dense", "units": 2}])", 1)), 422,
             "invalid-spec", "[4] features");
  CHECK(str(o, "field") == "/model/input_shape");
  o = expect(post_json(port, "/v1/jobs", job_json("ok", "[4]", R"([{"type": "dense", "units": 3}])", 1)), 422,
             "invalid-spec", "must output 2 logits");
  CHECK(str(o, "field") == "/model/layers/0");
  o = expect(post_json(port, "/v1/jobs", job_json("nothere", "[4]", R"([{"type": "dense", "units": 2}])", 1)), 422,
             "invalid-spec", "not a dataset of this cluster");
  CHECK(str(o, "field") == "/dataset/name");

  // A stratified split: each class gives its share to the test split.
  const Reply split = call(port, http::verb::post, "/v1/datasets/ok/split", R"({"test_fraction": 0.25, "seed": 3})",
                           "application/json");
  INFO(split.describe());
  REQUIRE(split.status == 200);
  const json::object splits = obj(object_of(split)["splits"]);
  const json::array train_counts = arr(obj(splits.at("train")), "class_counts");
  const json::array test_counts = arr(obj(splits.at("test")), "class_counts");
  for (size_t c = 0; c < 2; ++c) {
    const double all = train_counts[c].to_number<double>() + test_counts[c].to_number<double>();
    CHECK(std::abs(test_counts[c].to_number<double>() - 0.25 * all) <= 1.0);
  }
  expect(call(port, http::verb::post, "/v1/datasets/ok/split", R"({"test_fraction": 0.25})", "application/json"), 409,
         "dataset-has-test-split", "already has a test split");
  expect(call(port, http::verb::post, "/v1/datasets/ok/split", R"({"test_fraction": 1.5})", "application/json"), 422,
         "invalid-split", "/test_fraction");

  // A dataset in use cannot be deleted or replaced; once the job ends it can.
  const std::string id = submit(cluster, job_json("ok", "[4]", R"([{"type": "dense", "units": 2}])", 1000));
  CHECK(arr(dataset(port, "ok"), "used_by").size() == 1);
  expect(call(port, http::verb::delete_, "/v1/datasets/ok"), 409, "dataset-in-use", id);
  REQUIRE(call(port, http::verb::post, "/v1/jobs/" + id + "/cancel").status == 200);
  wait_for_state(cluster, id, "CANCELLED");
  CHECK(call(port, http::verb::delete_, "/v1/datasets/ok").status == 204);
  CHECK(get(port, "/v1/datasets/ok").status == 404);
  CHECK(!fs::exists(data.file("ok")));
  expect(call(port, http::verb::delete_, "/v1/datasets/ok"), 404, "dataset-not-found", "'ok'");

  // A client that disconnects mid-upload leaves no file behind, and the server goes on.
  {
    RawConnection raw(port);
    REQUIRE(raw.send_all("PUT /v1/datasets/dropped/train HTTP/1.1\r\nHost: x\r\nContent-Type: text/csv\r\n"
                         "Content-Length: 3000000\r\n\r\n"));
    REQUIRE(raw.send_all("a,label\n" + std::string(1 << 20, '1')));
    std::this_thread::sleep_for(300ms);
  }
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  auto leftovers = [&] {
    size_t n = 0;
    for (const auto& e : fs::directory_iterator(data.path() + "/.uploads")) n += e.is_regular_file() ? 1 : 0;
    return n;
  };
  while (leftovers() != 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(50ms);
  CHECK(leftovers() == 0);
  CHECK(get(port, "/v1/datasets/dropped").status == 404);
  CHECK(get(port, "/healthz").status == 200);
}
