// The validation hold-out of a training split (spec `training.validation_fraction`): a fixed,
// seeded, stratified part of the training examples, kept out of training and evaluated after
// every epoch as the job's `val_*` figures (what Keras' fit(validation_split=...) gives, but
// drawn at random per class rather than cut from the end).
//
// Per class (labels) or over all examples (regression targets), in example order: the examples
// are shuffled by a seed from (shuffle_seed, class), the first round(fraction * count) go to
// validation, keeping at least one of every class in training; both parts keep the examples'
// original order. A pure function of the split and the seed, so the coordinator and pstrain-train
// cut the same examples, and every epoch order, data plan and dropout key is then over the
// remaining training part exactly as it would be over a dataset holding only those examples.
//
// Thread rules: pure functions.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "common/data/dataset.h"

namespace pstrain {

struct HeldOut {
  Split train;       // the examples left for training (kind kTrain)
  Split validation;  // the held-out examples (kind kTrain: they come from the training files)
};

// Throws DataError naming the dataset if the validation part would be empty, or training would
// keep no example. A stored split's parts keep its shards (Split::store) with the hold-out that
// cuts them, so that workers read them from the store too.
HeldOut hold_out_validation(const Split& train, double fraction, uint64_t seed);

// The ids (ascending) of the two parts: what hold_out_validation cuts, from the split's labels or
// targets alone (its examples are not read).
struct HeldOutIds {
  std::vector<uint32_t> train, validation;
};
HeldOutIds held_out_ids(const Split& train, double fraction, uint64_t seed);

// The examples `indices` (ascending) of `split`, as a split of their own (same dataset, kind,
// shape, classes).
Split subset_of(const Split& split, const std::vector<uint32_t>& indices);

}  // namespace pstrain
