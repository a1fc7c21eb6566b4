#include <doctest/doctest.h>

#include <filesystem>

#include "common/dataset.h"
#include "common/error.h"
#include "tests/test_support.h"

using namespace pstrain;

TEST_CASE("mnist10k and fashion load with the sizes of the data README") {
  const auto dir = testing::data_dir();
  const Split train = load_split(dir, "mnist10k", SplitKind::kTrain);
  const Split test = load_split(dir, "mnist10k", SplitKind::kTest);
  CHECK(train.size == 5002);
  CHECK(test.size == 4998);
  CHECK(train.height == 28);
  CHECK(train.width == 28);
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
    REQUIRE(columns[i] == doctest::Approx(train.pixels[3 * 784 + i] / 255.0f));
    REQUIRE(columns[784 + i] == doctest::Approx(train.pixels[i] / 255.0f));
  }
}

TEST_CASE("unknown datasets and missing files are named in the error") {
  testing::TempDir empty;
  CHECK_THROWS_WITH_AS(load_split(empty.path(), "cifar", SplitKind::kTrain), doctest::Contains("unknown dataset 'cifar'"),
                       DataError);
  CHECK_THROWS_WITH_AS(load_split(empty.path(), "mnist10k", SplitKind::kTrain),
                       doctest::Contains("mnist10k-train-images-idx3-ubyte.gz: missing"), DataError);
}
