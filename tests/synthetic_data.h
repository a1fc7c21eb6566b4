// Generated datasets of other shapes and class counts than the built-in 28x28x1, 10-class ones,
// shared by the engine's tests (other_shapes_training_test) and the data path's (data_path_test).
#pragma once

#include <cstdint>
#include <vector>

#include "common/data/dataset_formats.h"
#include "common/data/example_types.h"
#include "common/base/rng.h"

namespace pstrain::testing {

struct Examples {
  std::vector<float> inputs;  // column-major: one column of values per example
  std::vector<int32_t> labels;
};

// 30 features uniform in [-1, 1), labelled by the largest of the fixed linear scores `w`
// (classes x 30, class-major; 3 x 30 in most tests): linearly separable into w.size() / 30 classes.
Examples separable_features(Rng& rng, const std::vector<float>& w, int count);

// 8x8x1 images of noise in [0, 0.5) with a bright 4x4 quadrant: the class (4 classes).
Examples quadrant_images(Rng& rng, int count);

// `examples` as an upload parser would give them: `shape` per example, `classes` classes, stored
// as float32, or as uint8 (each value v in [0, 1] as round(v * 255)).
ParsedExamples as_parsed(const Examples& examples, std::vector<uint32_t> shape, Dtype dtype, uint32_t classes);

}  // namespace pstrain::testing
