// The one input convention (common/data/model_inputs.h): raw values scaled exactly as training
// scales them, the old (scaled) form refused unless asked for, float32 models taking values as
// they are.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/data/dataset.h"
#include "common/data/model_inputs.h"

namespace pstrain {

TEST_CASE("model inputs - a raw uint8 value becomes the float Split::gather makes of it, for every byte") {
  Split split;
  split.dtype = Dtype::kUint8;
  split.shape = {256};
  split.num_classes = 1;
  split.size = 1;
  split.examples.resize(256);
  for (int v = 0; v < 256; ++v) split.examples[static_cast<size_t>(v)] = static_cast<uint8_t>(v);
  split.labels = {0};
  std::vector<float> gathered(256);
  float target = 0;
  const uint32_t index = 0;
  split.gather({&index, 1}, gathered.data(), &target);
  for (int v = 0; v < 256; ++v) {
    float seen = -1;
    REQUIRE(engine_value(Dtype::kUint8, InputForm::kRaw, v, &seen).empty());
    CHECK(seen == gathered[static_cast<size_t>(v)]);  // bit for bit
  }
}

TEST_CASE("model inputs - the old form is refused for a uint8 model, saying what to send, and taken by name") {
  float seen = 0;
  for (double bad : {0.5, 0.0039215689, -1.0, 256.0, 1e9}) {
    const std::string why = engine_value(Dtype::kUint8, InputForm::kRaw, bad, &seen);
    CHECK_MESSAGE(why.find("is not a raw pixel value") != std::string::npos, why);
    CHECK(why.find("\"input_form\": \"scaled\"") != std::string::npos);
  }
  CHECK(engine_value(Dtype::kUint8, InputForm::kScaled, 0.5, &seen).empty());
  CHECK(seen == 0.5f);
  CHECK(engine_value(Dtype::kFloat32, InputForm::kRaw, -3.25, &seen).empty());  // float32: as they are
  CHECK(seen == -3.25f);
  for (double inf : {std::numeric_limits<double>::infinity(), std::nan(""), 1e39}) {
    CHECK(engine_value(Dtype::kFloat32, InputForm::kRaw, inf, &seen) == "a value is not a finite float32");
  }
}

TEST_CASE("model inputs - dtype names read back") {
  CHECK(dtype_from_name("uint8") == Dtype::kUint8);
  CHECK(dtype_from_name("float32") == Dtype::kFloat32);
  CHECK(!dtype_from_name("float64"));
  CHECK(input_scale(Dtype::kUint8) == 1.0f / 255.0f);
  CHECK(input_scale(Dtype::kFloat32) == 1.0f);
}

}  // namespace pstrain
