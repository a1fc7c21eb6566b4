#include "tests/synthetic_data.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace pstrain::testing {

Examples separable_features(Rng& rng, const std::vector<float>& w, int count) {
  Examples e;
  for (int i = 0; i < count; ++i) {
    const int classes = static_cast<int>(w.size() / 30);
    std::vector<float> score(static_cast<size_t>(classes), 0.0f);
    for (int f = 0; f < 30; ++f) {
      const float x = rng.uniform_float(-1.0f, 1.0f);
      e.inputs.push_back(x);
      for (int k = 0; k < classes; ++k) score[static_cast<size_t>(k)] += w[static_cast<size_t>(k * 30 + f)] * x;
    }
    e.labels.push_back(static_cast<int32_t>(std::max_element(score.begin(), score.end()) - score.begin()));
  }
  return e;
}

Examples quadrant_images(Rng& rng, int count) {
  Examples e;
  for (int i = 0; i < count; ++i) {
    const auto label = static_cast<int32_t>(rng.uniform_index(4));
    for (int y = 0; y < 8; ++y) {
      for (int x = 0; x < 8; ++x) {
        const bool bright = (y / 4) * 2 + (x / 4) == label;
        e.inputs.push_back(rng.uniform_float(0.0f, 0.5f) + (bright ? 0.5f : 0.0f));
      }
    }
    e.labels.push_back(label);
  }
  return e;
}

ParsedExamples as_parsed(const Examples& examples, std::vector<uint32_t> shape, Dtype dtype, uint32_t classes) {
  ParsedExamples p;
  p.shape = std::move(shape);
  p.dtype = dtype;
  p.labels = examples.labels;
  p.classes = classes;
  if (dtype == Dtype::kFloat32) {
    p.bytes.resize(examples.inputs.size() * sizeof(float));
    std::memcpy(p.bytes.data(), examples.inputs.data(), p.bytes.size());
  } else {
    for (float v : examples.inputs) p.bytes.push_back(static_cast<uint8_t>(std::lround(std::clamp(v, 0.0f, 1.0f) * 255)));
  }
  return p;
}

}  // namespace pstrain::testing
