// Images as users have them, end to end over HTTP with a real cluster: a .zip (train) and a .tar
// (test) of class folders of PNG files upload and train bit for bit like the same pixels sent as
// NPZ in the same order (PNG is lossless); `:predict` takes the PNG itself, and a JPEG of another
// size (decoded and resized as the upload was); colour JPEGs of varied sizes upload with
// image_size and color_mode; every defect of an archive is a 422 naming the file or folder, and
// stores nothing.
#include <doctest/doctest.h>
#include <png.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "tests/image_files.h"
#include "tests/integration/cluster.h"
#include "tests/integration/http_test_client.h"
#include "tests/integration/test_encodings.h"
#include "tests/test_support.h"

using namespace pstrain;
using namespace pstrain::testing::http_test;
using pstrain::testing::base64;
using pstrain::testing::npy;
using namespace std::chrono_literals;

namespace {

constexpr uint32_t kSide = 8;

// One 8x8 grayscale image of class 0 ("bottom": the bottom half bright) or 1 ("top").
std::vector<uint8_t> half_image(int label, std::mt19937& rng) {
  std::vector<uint8_t> px;
  for (uint32_t r = 0; r < kSide; ++r) {
    for (uint32_t c = 0; c < kSide; ++c) {
      const bool bright = (r < kSide / 2) == (label == 1);
      px.push_back(static_cast<uint8_t>((bright ? 150 : 0) + static_cast<int>(rng() % 100)));
    }
  }
  return px;
}

// A split as class folders of PNGs, and the same pixels in the order the folders are read
// (class by class, files sorted: zero-padded names keep the written order).
struct FolderSplit {
  testing::ArchiveFiles files;
  std::vector<uint8_t> pixels;  // in stored order
  std::vector<int32_t> labels;
};

FolderSplit make_split(int per_class, uint32_t seed) {
  std::mt19937 rng(seed);
  FolderSplit s;
  const char* names[2] = {"bottom", "top"};
  s.files.push_back({"halves/", {}});
  for (int label = 0; label < 2; ++label) {
    for (int i = 0; i < per_class; ++i) {
      const std::vector<uint8_t> px = half_image(label, rng);
      char name[64];
      std::snprintf(name, sizeof name, "halves/%s/img-%05d.png", names[label], i);
      s.files.push_back({name, testing::write_png(px, kSide, kSide, PNG_FORMAT_GRAY)});
      s.pixels.insert(s.pixels.end(), px.begin(), px.end());
      s.labels.push_back(label);
    }
  }
  return s;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string zip_of(const testing::ArchiveFiles& files) {
  const testing::TempDir dir;
  testing::write_zip(dir.file("a.zip"), files);
  return file_bytes(dir.file("a.zip"));
}

std::string tar_of(const testing::ArchiveFiles& files) {
  const testing::TempDir dir;
  testing::write_tar(dir.file("a.tar"), files);
  return file_bytes(dir.file("a.tar"));
}

// An .npz of x and y (zip, stored).
std::string npz_of(const FolderSplit& s) {
  const std::string x = npy("|u1", {s.labels.size(), kSide, kSide}, s.pixels.data(), s.pixels.size());
  const std::string y = npy("<i4", {s.labels.size()}, s.labels.data(), s.labels.size() * 4);
  return zip_of({{"x.npy", std::vector<uint8_t>(x.begin(), x.end())}, {"y.npy", std::vector<uint8_t>(y.begin(), y.end())}});
}

Reply put(int port, const std::string& target, const std::string& body, const std::string& type) {
  return call(port, http::verb::put, target, body, type);
}

std::string job_on(const std::string& dataset) {
  return R"({"name": "on-)" + dataset + R"(", "dataset": {"name": ")" + dataset + R"(", "shuffle_seed": 4},
    "model": {"input_shape": [8, 8, 1], "seed": 2, "layers": [
      {"type": "conv2d", "filters": 4, "kernel_size": 3, "padding": "same", "activation": "relu"},
      {"type": "maxpool2d"}, {"type": "flatten"}, {"type": "dense", "units": 2}]},
    "optimizer": {"type": "adam", "learning_rate": 0.01},
    "training": {"global_batch_size": 50, "epochs": 2, "workers": 2, "servers": 2}})";
}

// A safetensors file's tensor bytes (after its header, which names the job).
std::string tensor_bytes(const std::string& file) {
  REQUIRE(file.size() >= 8);
  uint64_t header = 0;
  std::memcpy(&header, file.data(), 8);
  REQUIRE(file.size() >= 8 + header);
  return file.substr(8 + header);
}

// A prediction's probabilities, by class name ({"bottom": p, "top": q}: the model's file names
// its dataset's class folders) in the classes' order.
std::vector<double> probabilities(const Reply& r, size_t i) {
  std::vector<double> out;
  const json::object prediction = obj(arr(object_of(r), "predictions")[i]);
  const json::object& by_name = prediction.at("probabilities").as_object();
  CHECK(by_name.size() == 2);
  for (const char* name : {"bottom", "top"}) out.push_back(by_name.at(name).to_number<double>());
  return out;
}

}  // namespace

TEST_CASE("image datasets - class folders of PNGs (zip and tar) train bit for bit like their pixels as NPZ, and predict takes a PNG") {
  testing::TempDir data;
  testing::Cluster cluster({.coordinator_flags = {"--data-dir", data.path()}});
  const int port = cluster.http_port();
  const FolderSplit train = make_split(500, 1), test = make_split(100, 2);

  Reply r = put(port, "/v1/datasets/halves-png/train?color_mode=grayscale", zip_of(train.files), "application/zip");
  INFO("PUT halves-png/train -> " << r.describe());
  REQUIRE(r.status == 201);
  r = put(port, "/v1/datasets/halves-png/test?color_mode=grayscale", tar_of(test.files), "application/x-tar");
  INFO("PUT halves-png/test -> " << r.describe());
  REQUIRE(r.status == 201);
  const json::object record = object_of(get(port, "/v1/datasets/halves-png"));
  CHECK(json::serialize(record.at("input_shape")) == "[8,8,1]");
  CHECK(str(record, "dtype") == "uint8");
  CHECK(json::serialize(record.at("class_names")) == R"(["bottom","top"])");
  CHECK(json::serialize(obj(obj(record.at("splits")).at("train")).at("class_counts")) == "[500,500]");
  CHECK(put(port, "/v1/datasets/halves-npz/train", npz_of(train), "application/x-npz").status == 201);
  CHECK(put(port, "/v1/datasets/halves-npz/test", npz_of(test), "application/zip").status == 201);  // an .npz as a zip

  const std::string png_job = submit(cluster, job_on("halves-png"));
  const json::object png_done = wait_for_state(cluster, png_job, "SUCCEEDED", 180s);
  const std::string npz_job = submit(cluster, job_on("halves-npz"));
  const json::object npz_done = wait_for_state(cluster, npz_job, "SUCCEEDED", 180s);
  CHECK(num(png_done, "test_accuracy") >= 0.95);
  CHECK(num(png_done, "test_accuracy") == num(npz_done, "test_accuracy"));
  const Reply png_model = get(port, "/v1/models/" + png_job + "/file");
  const Reply npz_model = get(port, "/v1/models/" + npz_job + "/file");
  REQUIRE(png_model.status == 200);
  REQUIRE(npz_model.status == 200);
  CHECK(tensor_bytes(png_model.body) == tensor_bytes(npz_model.body));  // the same parameters, bit for bit

  // :predict: the PNG file itself, its raw pixels, and a 16x16 colour JPEG (decoded to grayscale
  // and resized to 8x8).
  const std::vector<uint8_t>& png = test.files[1].second;
  const std::vector<uint8_t> jpeg = testing::write_jpeg(testing::gradient(16, 16), 16, 16);
  const std::string body = R"({"instances": [{"b64": ")" + base64(png.data(), png.size()) + R"("}, {"b64": ")" +
                           base64(test.pixels.data(), kSide * kSide) + R"("}, {"b64": ")" +
                           base64(jpeg.data(), jpeg.size()) + R"("}]})";
  r = call(port, http::verb::post, "/v1/models/" + png_job + ":predict", body, "application/json");
  INFO(":predict -> " << r.describe());
  REQUIRE(r.status == 200);
  CHECK(probabilities(r, 0) == probabilities(r, 1));
  const std::string named = str(obj(arr(object_of(r), "predictions")[0]), "class");  // a class folder's name
  CHECK((named == "bottom" || named == "top"));
  CHECK(probabilities(r, 2).size() == 2);
  // Bytes that look like a PNG and do not decode: a 422 that says so.
  std::vector<uint8_t> broken(png.begin(), png.begin() + 40);
  r = call(port, http::verb::post, "/v1/models/" + png_job + ":predict",
           R"({"instances": [{"b64": ")" + base64(broken.data(), broken.size()) + R"("}]})", "application/json");
  check_problem(r, 422, "a truncated PNG", "/instances/0");
  CHECK(r.body.find("does not decode") != std::string::npos);
}

TEST_CASE("image datasets - colour JPEGs of varied sizes with image_size and color_mode, and each defect a 422 naming it") {
  testing::TempDir data;
  testing::Cluster cluster({.coordinator_flags = {"--data-dir", data.path()}});
  const int port = cluster.http_port();

  // JPEGs of 10 to 29 pixels a side in 3 classes, resized to 12x12 rgb.
  testing::ArchiveFiles jpegs;
  std::mt19937 rng(9);
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < 6; ++i) {
      const uint32_t h = 10 + rng() % 20, w = 10 + rng() % 20;
      jpegs.push_back({"class-" + std::to_string(c) + "/" + std::to_string(i) + ".jpg", testing::write_jpeg(testing::gradient(h, w), h, w)});
    }
  }
  Reply r = put(port, "/v1/datasets/colour/train?image_size=12,12&color_mode=rgb", zip_of(jpegs), "application/zip");
  INFO("PUT colour/train -> " << r.describe());
  REQUIRE(r.status == 201);
  CHECK(json::serialize(object_of(r).at("input_shape")) == "[12,12,3]");
  CHECK(json::serialize(object_of(r).at("class_names")) == R"(["class-0","class-1","class-2"])");
  // A job with a validation hold-out: its model still names the classes (the hold-out's split
  // keeps them), and :predict takes one of the JPEG files as it is.
  r = put(port, "/v1/datasets/colour/test?image_size=12,12&color_mode=rgb", zip_of(jpegs), "application/zip");
  REQUIRE(r.status == 201);
  const std::string job = submit(cluster, R"({"name": "colour", "dataset": {"name": "colour", "shuffle_seed": 1},
    "model": {"input_shape": [12, 12, 3], "seed": 1, "layers": [{"type": "flatten"}, {"type": "dense", "units": 3}]},
    "optimizer": {"type": "sgd", "learning_rate": 0.05},
    "training": {"global_batch_size": 6, "epochs": 1, "workers": 2, "servers": 2, "validation_fraction": 0.2}})");
  wait_for_state(cluster, job, "SUCCEEDED", 180s);
  const std::vector<uint8_t>& jpeg = jpegs[4].second;
  r = call(port, http::verb::post, "/v1/models/" + job + ":predict",
           R"({"instances": [{"b64": ")" + base64(jpeg.data(), jpeg.size()) + R"("}]})", "application/json");
  INFO(":predict -> " << r.describe());
  REQUIRE(r.status == 200);
  const std::string named = str(obj(arr(object_of(r), "predictions")[0]), "class");
  CHECK(named.rfind("class-", 0) == 0);
  CHECK(obj(arr(object_of(r), "predictions")[0]).at("probabilities").as_object().size() == 3);
  // Without image_size, the sizes differ: a 422 naming the file.
  r = put(port, "/v1/datasets/unsized/train", zip_of(jpegs), "application/zip");
  check_problem(r, 422, "images of several sizes");
  CHECK(r.body.find("give image_size") != std::string::npos);

  const std::vector<uint8_t> good = testing::write_png(std::vector<uint8_t>(16, 9), 4, 4, PNG_FORMAT_GRAY);
  std::vector<uint8_t> corrupt = good;
  corrupt.resize(corrupt.size() - 20);
  struct Case {
    const char* what;
    testing::ArchiveFiles files;
    std::string named;
  };
  const std::vector<Case> cases = {
      {"a corrupt PNG", {{"a/1.png", good}, {"b/broken.png", corrupt}}, "train.zip:b/broken.png"},
      {"a non-image", {{"a/1.png", good}, {"b/notes.txt", {'h', 'i'}}}, "train.zip:b/notes.txt: not a PNG or JPEG image"},
      {"an empty class folder", {{"a/1.png", good}, {"b/2.png", good}, {"c/", {}}}, "train.zip:c/: the class folder holds no file"},
      {"one class", {{"a/1.png", good}, {"a/2.png", good}}, "at least 2 classes"},
  };
  for (const Case& c : cases) {
    r = put(port, "/v1/datasets/broken/train", zip_of(c.files), "application/zip");
    check_problem(r, 422, c.what);
    INFO(c.what << " -> " << r.describe());
    CHECK(r.body.find(c.named) != std::string::npos);
    CHECK(get(port, "/v1/datasets/broken").status == 404);  // nothing half-stored
  }
  r = put(port, "/v1/datasets/broken/train?image_size=0,5", zip_of(jpegs), "application/zip");
  check_problem(r, 400, "a bad image_size", "image_size");
  r = put(port, "/v1/datasets/broken/train?color_mode=cmyk", zip_of(jpegs), "application/zip");
  check_problem(r, 400, "a bad color_mode", "color_mode");
  r = put(port, "/v1/datasets/broken/train", std::string(600, 'x'), "application/x-tar");
  check_problem(r, 422, "not a tar archive");
  CHECK(r.body.find("not a tar archive") != std::string::npos);
  // The test split's folders must be the train split's classes.
  r = put(port, "/v1/datasets/colour/test?image_size=12,12&replace=true", zip_of({{"class-0/1.jpg", jpegs[0].second}, {"class-9/1.jpg", jpegs[1].second}}),
          "application/zip");
  check_problem(r, 422, "a class the train split lacks");
  CHECK(r.body.find("class-9/: not a class of the dataset's other split") != std::string::npos);
  // The staging directory is empty again.
  std::vector<std::string> left;
  for (const auto& e : std::filesystem::recursive_directory_iterator(data.path())) {
    if (e.is_regular_file() && e.path().string().find("/.uploads/") != std::string::npos) left.push_back(e.path().string());
  }
  CHECK(left.empty());
}
