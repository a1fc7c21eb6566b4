// Row-sparse exchange for a dense first layer on sparse inputs (docs/DESIGN-NOTES.md, "Sparse
// exchange").
//
// When the model's first layer with parameters is dense and reads the input as it is (only
// flatten or reshape before it), row j of its kernel ([in, out], row-major) meets input feature j
// only. In a batch where feature j is zero in every example, that row's gradient is exactly zero,
// so a push may leave it out, and the row's values cannot change the step's results (they are
// multiplied by zero), so the reply before the step may leave them out too. This is the
// parameter server's classic "pull only the keys the minibatch touches", applied to dense inputs:
// in MNIST batches of 64 about 37% of the pixels are zero in every example, and the first
// kernel is 61% of the MLP, so a worker's push and reply shrink by about a fifth each. Float
// inputs work the same way: a feature counts as zero when it is exactly 0 in every example.
//
// Thread rules: immutable after construction; safe to share.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "common/engine/chunk_plan.h"
#include "common/data/example_types.h"
#include "common/engine/model_spec.h"

namespace pstrain {

class InputSparsity {
 public:
  // Ranges of one chunk; nullopt means the whole chunk (dense).
  using Ranges = std::optional<std::vector<ChunkRange>>;

  // Not active (everything dense) unless the model starts with such a dense layer.
  InputSparsity(const ModelSpec& spec, const ParamLayout& layout, const std::vector<ChunkInfo>& chunks);

  bool active() const { return kernel_param_ >= 0; }
  size_t features() const { return features_; }

  // mask[j] = 1 if feature j is nonzero in some of `examples` examples of `example_size` values
  // of `dtype` (float32: 0 and -0 are zero; anything else, NaN included, is not).
  void mark_features(const uint8_t* data, Dtype dtype, size_t examples, size_t example_size,
                     std::vector<uint8_t>* mask) const;

  // For every chunk of the table: the ranges holding the kernel rows of the marked features. A
  // chunk outside the kernel, or one where ranges would not pay (they cover nearly all of it, or
  // there are too many), is dense. Ranges start and end on even elements (word-aligned, so they
  // can be sent without copying) except at a chunk's end.
  std::vector<Ranges> chunk_ranges(const std::vector<uint8_t>& mask) const;

 private:
  std::vector<ChunkInfo> chunks_;
  int64_t kernel_param_ = -1;  // index in the layout; -1: not active
  size_t features_ = 0, units_ = 0;
};

}  // namespace pstrain
