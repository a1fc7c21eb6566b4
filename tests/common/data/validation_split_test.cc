// The validation hold-out (common/data/validation_split.h): per class round(fraction * count)
// examples, every class keeping one for training, disjoint parts that cover the split, the
// examples' order and bytes kept, the same cut for the same seed and another for another seed;
// regression targets cut as one stratum; a hold-out of nothing refused.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <cstring>
#include <functional>
#include <set>

#include "common/base/error.h"
#include "common/data/validation_split.h"

using namespace pstrain;

namespace {

// n examples of 2 uint8 features: (index % 251, index / 251), labels from `label_of`.
Split labelled(uint32_t n, const std::function<int32_t(uint32_t)>& label_of, uint32_t classes) {
  Split s;
  s.dataset = "toy";
  s.size = n;
  s.shape = {2};
  s.num_classes = classes;
  for (uint32_t i = 0; i < n; ++i) {
    s.examples.push_back(static_cast<uint8_t>(i % 251));
    s.examples.push_back(static_cast<uint8_t>(i / 251));
    s.labels.push_back(label_of(i));
  }
  return s;
}

uint32_t index_of(const Split& s, uint32_t i) { return s.examples[2 * i] + 251u * s.examples[2 * i + 1]; }

}  // namespace

TEST_CASE("validation hold-out: stratified, disjoint, covering, ordered, seeded") {
  // Imbalanced: class 0 has 700 examples, class 1 250, class 2 50, class 3 just 1.
  const auto label = [](uint32_t i) { return i < 700 ? 0 : i < 950 ? 1 : i < 1000 ? 2 : 3; };
  const Split all = labelled(1001, label, 4);
  const HeldOut h = hold_out_validation(all, 0.2, 42);
  std::map<int32_t, uint32_t> val_count, train_count;
  for (int32_t l : h.validation.labels) ++val_count[l];
  for (int32_t l : h.train.labels) ++train_count[l];
  CHECK(val_count[0] == 140);
  CHECK(val_count[1] == 50);
  CHECK(val_count[2] == 10);
  CHECK(val_count[3] == 0);  // a class of one stays in training
  CHECK(train_count[3] == 1);
  CHECK(h.train.size + h.validation.size == all.size);
  std::set<uint32_t> seen;
  for (const Split* part : {&h.train, &h.validation}) {
    uint32_t previous = 0;
    for (uint32_t i = 0; i < part->size; ++i) {
      const uint32_t original = index_of(*part, i);
      CHECK(part->labels[i] == all.labels[original]);  // bytes and labels travel together
      if (i > 0) CHECK(original > previous);            // in the split's order
      previous = original;
      CHECK(seen.insert(original).second);               // disjoint
    }
  }
  CHECK(seen.size() == all.size);  // covering

  const HeldOut again = hold_out_validation(all, 0.2, 42);
  CHECK(again.validation.examples == h.validation.examples);
  const HeldOut other = hold_out_validation(all, 0.2, 43);
  CHECK(other.validation.examples != h.validation.examples);
  CHECK(other.validation.size == h.validation.size);
}

TEST_CASE("validation hold-out: regression targets as one stratum, none held out is an error") {
  Split r;
  r.dataset = "reg";
  r.size = 10;
  r.shape = {1};
  r.dtype = Dtype::kFloat32;
  r.target_width = 2;
  for (uint32_t i = 0; i < 10; ++i) {
    const float x = static_cast<float>(i);
    const auto* b = reinterpret_cast<const uint8_t*>(&x);
    r.examples.insert(r.examples.end(), b, b + 4);
    r.targets.push_back(x * 10);
    r.targets.push_back(x * 100);
  }
  const HeldOut h = hold_out_validation(r, 0.3, 1);
  REQUIRE(h.validation.size == 3);
  CHECK(h.train.size == 7);
  for (uint32_t i = 0; i < h.validation.size; ++i) {
    float x = 0;
    std::memcpy(&x, h.validation.examples.data() + 4 * i, 4);
    CHECK(h.validation.targets[2 * i] == x * 10);
    CHECK(h.validation.targets[2 * i + 1] == x * 100);
  }
  CHECK_THROWS_WITH_AS(hold_out_validation(r, 0.01, 1), doctest::Contains("holds out none"), DataError);
}
