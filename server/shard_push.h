// A push to a parameter shard as the update rules see it (parameter_shard.h, sync_barrier.h,
// async_rule.h): its request, outcome and counters.
//
// Thread rules: plain values; the spans are views the RPC layer keeps valid while the push is
// held (parameter_shard.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "common/base/aligned.h"

namespace pstrain {

// Elements [offset, offset + values.size()) of a chunk's gradient.
struct GradientPart {
  size_t offset = 0;
  std::span<const float> values;
};

// A dense kernel's gradient as two factors (ParameterServer.pushFactors): for kernel row r (a
// chunk holds whole rows), sum over examples b of inputs[r, b] * deltas[b]. Shared by the
// requests of every chunk a factored push covers.
struct GradientFactors {
  size_t columns = 0;   // the kernel's second dimension (out)
  size_t examples = 0;
  std::span<const float> deltas;  // examples x columns, example after example
  std::vector<uint32_t> rows;     // kernel rows with inputs, ascending; the others' inputs are zero
  std::span<const float> inputs;  // examples x rows.size(), example after example
  bool bf16 = false;  // multiplied out by simd::product_bf16 (PushFactorsParams.bf16), else simd::product
  // deltas * inputs^T over every listed row (columns x rows.size()): multiplied out once, by the
  // first chunk that needs it, for all the chunks of the push (one product rather than one per
  // chunk). Event-loop thread only, like the shard.
  mutable ScratchFloats product;
  mutable bool multiplied = false;
};

struct PushRequest {
  uint32_t key = 0;
  uint64_t step = 0;         // sync: global step; async: the worker's own step count
  uint32_t slice = 0;        // sync: slice index within the step
  uint32_t slice_count = 1;  // sync: slices (workers) in the step
  uint32_t worker = 0;
  uint32_t examples = 0;
  uint64_t base_version = 0;  // async: the version the gradient was computed on
  uint64_t generation = 0;    // of the worker's plan (see abort_waiting_and_release_hold)
  std::span<const float> gradient;  // the whole chunk, unless `sparse`, or a table piece's `rows`
  // A sparse table's piece (table_piece.h): the table rows the gradient holds (ascending, each
  // in the piece), `gradient` holding rows.size() rows back to back.
  std::span<const uint32_t> rows;
  // Row-sparse push: the gradient is `parts` (sorted, disjoint, inside the chunk) and exactly zero
  // elsewhere. The sum is the same as for the dense gradient, bit for bit.
  bool sparse = false;
  std::vector<GradientPart> parts;
  // Factored push (the chunk must hold whole rows of a kernel with factors->columns columns).
  std::shared_ptr<const GradientFactors> factors;
  // Sync: the pushing worker's compression state after this push (PushParams.workerState), kept
  // as the slice's state of the version the step makes (worker_state()); empty: none.
  std::span<const float> worker_state;
  // Sync: the learning rate's multiplier in the step's epoch (spec reduce_on_plateau), the same in
  // every push of a step; the step applies its first counted push's.
  float lr_scale = 1.0f;
};

struct PushOutcome {
  uint64_t version = 0;  // the chunk's version when the reply is released
  bool applied = true;   // false: a late sync push that was dropped
  bool aborted = false;  // the shard was rolled back (recovery) before the push could apply
  // Clipping (sync): the step is summed and held until a pull brings its clip factor; the summed
  // gradient's sum of squares (nn/gradient_clipping.h).
  bool held = false;
  double sum_squares = 0;
};

struct ShardStats {
  uint64_t pushes_applied = 0, pushes_dropped = 0;
  uint64_t max_staleness = 0;
  double staleness_sum = 0;
  uint64_t async_pushes = 0;
};

using PushDone = std::function<void(PushOutcome)>;

}  // namespace pstrain
