// Augmentation layers: the transforms by hand, draws keyed by the example (not its place in the
// batch), the identity in inference, gradients through the shifts, and the spec's checks.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "common/base/error.h"
#include "common/data/job_spec.h"
#include "common/engine/nn/augmentation.h"
#include "common/engine/nn/model.h"
#include "tests/common/engine/gradient_check.h"

using namespace pstrain;
using namespace pstrain::testing;
using nn::Model;

namespace {

LayerSpec augment(LayerType type) {
  LayerSpec l = simple(type);
  if (type == LayerType::kRandomCrop) l.crop_padding = 1;
  if (type == LayerType::kRandomTranslation) l.height_factor = l.width_factor = 0.4f;
  if (type == LayerType::kRandomFlip) l.flip_vertical = true;
  return l;
}

}  // namespace

TEST_CASE("random_flip, random_crop and random_translation before a conv2d: gradients in training") {
  ModelSpec spec;
  spec.input_shape = {5, 4, 2};
  for (LayerType type : {LayerType::kRandomFlip, LayerType::kRandomCrop, LayerType::kRandomTranslation}) {
    // In the middle of the model, so the input gradient they pass back is checked too.
    spec.layers = {conv(3, 1, 1, false), augment(type), conv(2, 2, 2, true), simple(LayerType::kFlatten),
                   dense(3, false)};
    check_gradients(spec, 6, 501);
  }
}

TEST_CASE("augmentation by hand: a flip mirrors, a shift moves and fills with zeros, inference passes all") {
  // 3x3x1 image 1..9; out(i, j) = in(i - shift_rows, j - shift_cols), then mirrored columns.
  nn::Augmentation<double> layer(3, 3, 1, {true, false, 1, 1}, 0, 1);
  const std::vector<double> x = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<double> y(9);
  // Find an example id whose draw is a flip with a shift of (1, 0).
  uint32_t id = 0;
  nn::Augmentation<double>::Transform t;
  for (;; ++id) {
    t = nn::Augmentation<double>::draw({true, false, 1, 1}, 0, 0, id);
    if (t.flip_h && t.shift_rows == 1 && t.shift_cols == 0) break;
  }
  layer.set_keys({0, &id});
  layer.forward(nullptr, nn::ConstMatMap<double>(x.data(), 9, 1), nn::MatMap<double>(y.data(), 9, 1));
  // Row 0 is uncovered; row i shows input row i - 1, mirrored.
  CHECK(y == std::vector<double>{0, 0, 0, 3, 2, 1, 6, 5, 4});
  layer.set_keys({});
  layer.forward(nullptr, nn::ConstMatMap<double>(x.data(), 9, 1), nn::MatMap<double>(y.data(), 9, 1));
  CHECK(y == x);
}

TEST_CASE("augmentation draws: every shift in range is drawn, and they follow the example and the epoch") {
  const nn::Augmentation<float>::Draws draws{true, false, 2, 3};
  std::vector<int> rows(5), cols(7);
  int flips = 0, epoch_changes = 0;
  for (uint32_t id = 0; id < 2000; ++id) {
    const auto t = nn::Augmentation<float>::draw(draws, 9, 4, id);
    REQUIRE(t.shift_rows >= -2);
    REQUIRE(t.shift_rows <= 2);
    REQUIRE(t.shift_cols >= -3);
    REQUIRE(t.shift_cols <= 3);
    ++rows[static_cast<size_t>(t.shift_rows + 2)];
    ++cols[static_cast<size_t>(t.shift_cols + 3)];
    flips += t.flip_h;
    CHECK(!t.flip_v);
    const auto again = nn::Augmentation<float>::draw(draws, 9, 4, id);
    CHECK(again.shift_rows == t.shift_rows);
    const auto next_epoch = nn::Augmentation<float>::draw(draws, 9, 5, id);
    epoch_changes += next_epoch.shift_rows != t.shift_rows || next_epoch.shift_cols != t.shift_cols;
  }
  for (int n : rows) CHECK(n > 300);
  for (int n : cols) CHECK(n > 200);
  CHECK(flips > 900);
  CHECK(flips < 1100);
  CHECK(epoch_changes > 1500);
}

TEST_CASE("augmentation in JSON: fields, defaults, and what is refused") {
  auto error = [](const std::string& layer) {
    try {
      parse_model_spec(R"({"input_shape": [8, 8, 1], "layers": [)" + layer +
                       R"(, {"type": "flatten"}, {"type": "dense", "units": 2}]})");
    } catch (const SpecError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  CHECK(error(R"({"type": "random_flip"})") == "(accepted)");
  CHECK(error(R"({"type": "random_flip", "mode": "sideways"})").find("/model/layers/0/mode must be one of") == 0);
  CHECK(error(R"({"type": "random_crop"})") == "/model/layers/0/padding is required");
  CHECK(error(R"({"type": "random_crop", "padding": 8})") ==
        "/model/layers/0/padding must be smaller than the image's height and width [8, 8, 1]");
  CHECK(error(R"({"type": "random_translation", "height_factor": 1})") == "/model/layers/0/height_factor must be below 1");
  const ModelSpec spec = parse_model_spec(R"({"input_shape": [8, 8, 1], "layers": [
      {"type": "random_flip", "mode": "horizontal_and_vertical"}, {"type": "random_crop", "padding": 2},
      {"type": "random_translation", "height_factor": 0.1, "width_factor": 0.2},
      {"type": "flatten"}, {"type": "dense", "units": 2}]})");
  const ModelSpec again = parse_model_spec(model_spec_to_json(spec));
  CHECK(again.layers[0].flip_vertical);
  CHECK(again.layers[1].crop_padding == 2);
  CHECK(again.layers[2].width_factor == 0.2f);
  ModelSpec flat;
  flat.input_shape = {6};
  flat.layers = {simple(LayerType::kRandomFlip), dense(2, false)};
  CHECK_THROWS_WITH_AS(infer_shapes(flat), "/model/layers/0/type random_flip needs a [height, width, channels] input but gets [6]",
                       SpecError);
}
