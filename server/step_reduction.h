// The arithmetic of a sync step on one chunk (docs/DESIGN-NOTES.md "Deterministic reduction"):
// the step's pushes summed in slice order, divided by the step's examples, regularised once.
// Dense, sparse and factored pushes give the same bits as their dense forms would.
//
// Thread rules: plain functions; everything they touch belongs to the caller.
#pragma once

#include <cstddef>
#include <cstdint>

#include "server/shard_chunk.h"
#include "server/shard_push.h"
#include "server/sync_barrier.h"

namespace pstrain {

// The part of a factored push's product that falls in rows [first_row, first_row + rows) of its
// kernel: `listed` rows (ascending, kernel row numbers in `rows`), each `columns` values in
// `values`. The product (deltas * inputs^T over every listed row of the push, as the worker's
// engine would have computed it) is multiplied out once, by the first chunk that asks.
struct FactorRows {
  const uint32_t* rows;
  size_t listed;
  const float* values;
};
FactorRows factor_rows(const GradientFactors& factors, size_t first_row, size_t rows);

// Writes (first) or adds one push's gradient (dense, sparse or factored) into `out` (the chunk's
// size).
void accumulate_push(const PushRequest& push, const ShardChunk& chunk, bool first, float* out);

// The step's gradient, summed in slice order, scaled and regularised, into chunk.scratch.
void reduce_step(ShardChunk& chunk, const SyncBarrier::Step& step);

}  // namespace pstrain
