#include "common/data/validation_split.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "common/base/error.h"
#include "common/base/rng.h"
#include "common/data/stored_examples.h"

namespace pstrain {

Split subset_of(const Split& split, const std::vector<uint32_t>& indices) {
  Split out;
  out.dataset = split.dataset;
  out.kind = split.kind;
  out.size = static_cast<uint32_t>(indices.size());
  out.shape = split.shape;
  out.dtype = split.dtype;
  out.num_classes = split.num_classes;
  out.target_width = split.target_width;
  out.sha256 = split.sha256;
  out.table = split.table;
  out.documents = split.documents;
  out.class_names = split.class_names;
  if (split.stored) {  // left on disk: the subset maps its ids onto the same shards
    out.stored = std::make_shared<const StoredExamples>(*split.stored, indices);
    for (const Split::TextCells& t : split.text_cells) {
      out.text_cells.push_back({t.column, std::make_shared<const StoredExamples>(*t.cells, indices)});
    }
  } else {
    out.examples.resize(indices.size() * split.example_bytes());
    split.read_examples(indices, out.examples.data());
  }
  if (!split.labels.empty()) {
    out.labels.reserve(indices.size());
    for (uint32_t i : indices) out.labels.push_back(split.labels[i]);
  }
  if (!split.targets.empty()) {
    out.targets.reserve(indices.size() * split.target_width);
    for (uint32_t i : indices) {
      const float* t = split.targets.data() + size_t{i} * split.target_width;
      out.targets.insert(out.targets.end(), t, t + split.target_width);
    }
  }
  return out;
}

HeldOutIds held_out_ids(const Split& train, double fraction, uint64_t seed) {
  // The strata: each class's examples in order (one stratum for regression targets).
  std::map<int32_t, std::vector<uint32_t>> strata;
  for (uint32_t i = 0; i < train.size; ++i) strata[train.regression() ? 0 : train.labels[i]].push_back(i);
  HeldOutIds ids;
  for (auto& [label, members] : strata) {
    Rng rng(mix_seed(mix_seed(seed, 0x76616c6964ULL), static_cast<uint64_t>(static_cast<uint32_t>(label))));
    for (size_t i = members.size(); i > 1; --i) std::swap(members[i - 1], members[rng.uniform_index(i)]);
    size_t n = static_cast<size_t>(std::llround(fraction * static_cast<double>(members.size())));
    n = std::min(n, members.size() - 1);  // every class keeps one example for training
    ids.validation.insert(ids.validation.end(), members.begin(), members.begin() + static_cast<std::ptrdiff_t>(n));
    ids.train.insert(ids.train.end(), members.begin() + static_cast<std::ptrdiff_t>(n), members.end());
  }
  if (ids.validation.empty()) {
    throw DataError(train.dataset + ": validation_fraction " + std::to_string(fraction) + " of " +
                                       std::to_string(train.size) + " training examples holds out none");
  }
  std::sort(ids.validation.begin(), ids.validation.end());
  std::sort(ids.train.begin(), ids.train.end());
  return ids;
}

HeldOut hold_out_validation(const Split& train, double fraction, uint64_t seed) {
  const HeldOutIds ids = held_out_ids(train, fraction, seed);
  HeldOut held{subset_of(train, ids.train), subset_of(train, ids.validation)};
  if (train.store && train.store->hold_out.fraction == 0) {  // the parts, as the workers cut them
    for (Split* part : {&held.train, &held.validation}) {
      auto store = std::make_shared<Split::StoredShards>(*train.store);
      store->hold_out = {fraction, seed, part == &held.validation, train.size};
      part->store = std::move(store);
    }
  }
  return held;
}

}  // namespace pstrain
