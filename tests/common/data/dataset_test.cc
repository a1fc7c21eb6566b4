#include <doctest/doctest.h>

#include <array>
#include <filesystem>
#include <fstream>

#include "common/data/dataset.h"
#include "common/data/dataset_formats.h"
#include "common/base/error.h"
#include "tests/test_support.h"

using namespace pstrain;

namespace {

// Writes a plain (uncompressed) IDX file of unsigned bytes.
void write_idx(const std::filesystem::path& path, const std::vector<uint32_t>& dims, const std::vector<uint8_t>& values) {
  std::vector<uint8_t> bytes = {0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<uint8_t>(d >> shift));
  }
  bytes.insert(bytes.end(), values.begin(), values.end());
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<long>(bytes.size()));
}

// A split of `n` 2x2 images with labels 0, 1, 0, 1, ... under `dir`/`prefix`-*.
void write_toy_split(const std::filesystem::path& dir, const std::string& prefix, uint32_t n) {
  std::vector<uint8_t> labels(n);
  for (uint32_t i = 0; i < n; ++i) labels[i] = static_cast<uint8_t>(i % 2);
  write_idx(dir / (prefix + "-images-idx3-ubyte"), {n, 2, 2}, std::vector<uint8_t>(n * 4, 7));
  write_idx(dir / (prefix + "-labels-idx1-ubyte"), {n}, labels);
}

// Loads a split of the official Fashion-MNIST, failing the test with what to do when it is absent.
Split load_fashion_mnist(SplitKind kind) {
  try {
    return load_split(testing::data_dir(), "fashion-mnist", kind);
  } catch (const DataError& e) {
    FAIL("Fashion-MNIST (Debian's dataset-fashion-mnist) is not installed: run deploy/setup.sh. " << e.what());
  }
  return {};
}

}  // namespace

TEST_CASE("mnist10k and fashion load with the sizes of the data README") {
  const auto dir = testing::data_dir();
  const Split train = load_split(dir, "mnist10k", SplitKind::kTrain);
  const Split test = load_split(dir, "mnist10k", SplitKind::kTest);
  CHECK(train.size == 5002);
  CHECK(test.size == 4998);
  CHECK(train.example_shape() == Shape{28, 28, 1});
  CHECK(train.dtype == Dtype::kUint8);
  // Round-robin over classes: the first ten training labels are 0..9.
  for (uint8_t k = 0; k < 10; ++k) CHECK(train.labels[k] == k);

  const Split fashion = load_split(dir, "fashion", SplitKind::kTest);
  CHECK(fashion.size == 10000);
}

TEST_CASE("gather converts bytes to unit-range columns with their labels") {
  const Split train = load_split(testing::data_dir(), "mnist10k", SplitKind::kTrain);
  std::vector<float> columns(2 * 784);
  std::vector<int32_t> labels(2);
  const uint32_t indices[] = {3, 0};
  train.gather(indices, columns.data(), labels.data());
  CHECK(labels[0] == 3);
  CHECK(labels[1] == 0);
  for (int i = 0; i < 784; ++i) {
    REQUIRE(columns[i] == doctest::Approx(train.examples[3 * 784 + i] / 255.0f));
    REQUIRE(columns[784 + i] == doctest::Approx(train.examples[i] / 255.0f));
  }
}

TEST_CASE("unknown datasets and missing files are named in the error") {
  testing::TempDir empty;
  CHECK_THROWS_WITH_AS(load_split(empty.path(), "cifar", SplitKind::kTrain), doctest::Contains("unknown dataset 'cifar'"),
                       DataError);
  CHECK_THROWS_WITH_AS(load_split(empty.path(), "mnist10k", SplitKind::kTrain),
                       doctest::Contains("mnist10k-train-images-idx3-ubyte.gz: missing"), DataError);
}

TEST_CASE("unknown datasets are rejected listing the known names") {
  testing::TempDir empty;
  CHECK_THROWS_WITH_AS(load_split(empty.path(), "fashion_mnist", SplitKind::kTrain),
                       "unknown dataset 'fashion_mnist' (known: mnist10k, fashion, fashion-mnist)", DataError);
  CHECK(known_dataset_names() == "mnist10k, fashion, fashion-mnist");
}

TEST_CASE("fashion-mnist falls back to Debian's package directory, and only it does") {
  for (const auto& d : known_datasets()) {
    CAPTURE(d.name);
    CHECK(d.system_dir == (d.name == "fashion-mnist" ? std::string(kDebianFashionMnistDir) : ""));
  }
}

TEST_CASE("a dataset with a system directory prefers the data directory's copy") {
  testing::TempDir data, system;
  const DatasetInfo toy{"toy", "toy", "train", "t10k", 2, system.path(), "install the toy package"};
  const std::filesystem::path local = std::filesystem::path(data.path()) / "toy";

  write_toy_split(system.path(), "train", 3);
  CHECK(load_split(data.path(), toy, SplitKind::kTrain).size == 3);  // the fallback

  write_toy_split(local, "train", 5);
  const Split train = load_split(data.path(), toy, SplitKind::kTrain);  // the copy wins
  CHECK(train.size == 5);
  CHECK(train.dataset == "toy");
  CHECK(train.example_shape() == Shape{2, 2, 1});

  // Missing everywhere: the message names both places and what to install.
  CHECK_THROWS_WITH_AS(load_split(data.path(), toy, SplitKind::kTest),
                       (local.string() + "/t10k-images-idx3-ubyte.gz: missing (neither it nor " + local.string() +
                        "/t10k-images-idx3-ubyte nor " + system.path() +
                        "/t10k-images-idx3-ubyte[.gz] exists; install the toy package)")
                           .c_str(),
                       DataError);

  // A copy missing its labels fails rather than taking the labels from the system directory.
  write_toy_split(system.path(), "t10k", 2);
  write_idx(local / "t10k-images-idx3-ubyte", {2, 2, 2}, std::vector<uint8_t>(8, 1));
  CHECK_THROWS_WITH_AS(load_split(data.path(), toy, SplitKind::kTest),
                       doctest::Contains("toy/t10k-labels-idx1-ubyte.gz: missing"), DataError);
}

TEST_CASE("fashion-mnist is the official split: 60,000 / 10,000 images, 6,000 / 1,000 per class") {
  const Split train = load_fashion_mnist(SplitKind::kTrain);
  const Split test = load_fashion_mnist(SplitKind::kTest);
  for (const Split* split : {&train, &test}) {
    CHECK(split->dataset == "fashion-mnist");
    CHECK(split->example_shape() == Shape{28, 28, 1});
    CHECK(split->num_classes == 10);
    CHECK(split->examples.size() == size_t{split->size} * 784);
  }
  REQUIRE(train.size == 60000);
  REQUIRE(test.size == 10000);

  std::array<int, 10> train_count{}, test_count{};
  for (int32_t l : train.labels) ++train_count.at(l);
  for (int32_t l : test.labels) ++test_count.at(l);
  for (int c = 0; c < 10; ++c) {
    CAPTURE(c);
    CHECK(train_count[c] == 6000);
    CHECK(test_count[c] == 1000);
  }

  // The official files' first labels (Ankle boot, T-shirt, T-shirt, Dress, ...), and pixel sums
  // of the first image and of each split, taken from the package's files: the order is the
  // official one, not a re-split like `fashion`'s.
  const std::vector<int32_t> train_head(train.labels.begin(), train.labels.begin() + 10);
  const std::vector<int32_t> test_head(test.labels.begin(), test.labels.begin() + 10);
  CHECK(train_head == std::vector<int32_t>{9, 0, 0, 3, 0, 2, 7, 2, 5, 5});
  CHECK(test_head == std::vector<int32_t>{9, 2, 1, 1, 6, 1, 4, 6, 5, 7});
  const auto sum = [](const std::vector<uint8_t>& v, size_t n) {
    uint64_t s = 0;
    for (size_t i = 0; i < n; ++i) s += v[i];
    return s;
  };
  CHECK(sum(train.examples, 784) == 76247);
  CHECK(sum(test.examples, 784) == 33456);
  CHECK(sum(train.examples, train.examples.size()) == 3431114169ULL);
  CHECK(sum(test.examples, test.examples.size()) == 573469082ULL);
}

// ---- Splits of any shape and dtype (make_split, gather) ----------------------------------------

namespace {

// 4 examples of 3 float32 features, values i * 3 + j - 5.5 (some negative, none zero), 3 classes.
ParsedExamples three_floats() {
  ParsedExamples p;
  p.shape = {3};
  p.dtype = Dtype::kFloat32;
  p.classes = 3;
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 3; ++j) {
      const float v = static_cast<float>(i * 3 + j) - 5.5f;
      const auto* b = reinterpret_cast<const uint8_t*>(&v);
      p.bytes.insert(p.bytes.end(), b, b + 4);
    }
    p.labels.push_back(i % 3);
  }
  return p;
}

}  // namespace

TEST_CASE("make_split takes a float32 upload's storage - gather copies its values as they are") {
  ParsedExamples parsed = three_floats();
  const uint8_t* storage = parsed.bytes.data();
  const Split split = make_split("upload", SplitKind::kTest, std::move(parsed));
  CHECK(split.dataset == "upload");
  CHECK(split.kind == SplitKind::kTest);
  CHECK(split.size == 4);
  CHECK(split.example_shape() == Shape{3});
  CHECK(split.example_size() == 3);
  CHECK(split.example_bytes() == 12);
  CHECK(split.dtype == Dtype::kFloat32);
  CHECK(split.num_classes == 3);
  CHECK(split.examples.data() == storage);  // moved, not copied
  std::array<float, 6> columns{};
  std::array<int32_t, 2> labels{};
  const std::array<uint32_t, 2> indices = {3, 1};
  split.gather(indices, columns.data(), labels.data());
  CHECK(columns == std::array<float, 6>{3.5f, 4.5f, 5.5f, -2.5f, -1.5f, -0.5f});
  CHECK(labels == std::array<int32_t, 2>{0, 1});
}

TEST_CASE("make_split of uint8 images: gather scales by 1/255 exactly as for IDX files - labels past 255 kept") {
  ParsedExamples p;
  p.shape = {2, 2, 1};
  p.dtype = Dtype::kUint8;
  p.bytes = {0, 1, 128, 255, 7, 0, 0, 9};
  p.labels = {300, 1999};
  p.classes = 2000;
  const Split split = make_split("images", SplitKind::kTrain, std::move(p));
  CHECK(split.example_shape() == Shape{2, 2, 1});
  std::array<float, 8> columns{};
  std::array<int32_t, 2> labels{};
  const std::array<uint32_t, 2> indices = {0, 1};
  split.gather(indices, columns.data(), labels.data());
  for (size_t i = 0; i < columns.size(); ++i) CHECK(columns[i] == static_cast<float>(split.examples[i]) * (1.0f / 255.0f));
  CHECK(labels == std::array<int32_t, 2>{300, 1999});
}

TEST_CASE("make_split rejects inconsistent examples, naming the dataset") {
  const auto error_of = [](ParsedExamples p) {
    try {
      make_split("bad-set", SplitKind::kTrain, std::move(p));
    } catch (const DataError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  ParsedExamples p = three_floats();
  p.labels[2] = 3;
  CHECK(error_of(p) == "dataset 'bad-set' (train split): label 3 at index 2 is outside [0, 3)");
  p = three_floats();
  p.labels[0] = -1;
  CHECK(error_of(p).find("label -1 at index 0") != std::string::npos);
  p = three_floats();
  p.bytes.pop_back();
  CHECK(error_of(p) == "dataset 'bad-set' (train split): 47 bytes do not hold 4 examples of 3 float32 values");
  p = three_floats();
  p.shape = {3, 1};
  CHECK(error_of(p).find("2 dimensions") != std::string::npos);
  p = three_floats();
  p.classes = kMaxClasses + 1;
  CHECK(error_of(p).find("10001 classes") != std::string::npos);
}
