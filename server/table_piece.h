// A sparse embedding table's piece on a server (chunk_plan.h: rows server, server + S, ... of
// the table), and the row-wise arithmetic of its steps (docs/DESIGN-NOTES.md "Sparse models").
//
// A push to a piece carries the rows of it that the pushing slice's batch touched (table row
// numbers, ascending) and their gradients, compact. A sync step sums them per row in slice order
// (a slice without a row adds its zeros, as the standalone trainer's replicas do), scales by the
// step's examples and applies them:
//  - optimizer.sparse_updates "lazy": to the listed rows only (Optimizer::apply_rows), the
//    optimizer's step count advancing once even when no row is listed;
//  - "dense": scattered into a zero gradient of the whole piece (Keras' semantics; pieces of
//    tables up to 2^24 parameters, which the spec checks).
// Either way the bits are those of the trainer's whole-table update, element by element (an
// optimizer's element does not depend on where its range starts). A sync takeover reads rows of
// the step before the piece's last update (table_row_at): "dense" keeps the whole piece as it was
// (ShardChunk::previous), "lazy" only the rows the update changed (ShardChunk::previous_rows), a
// copy bounded by a step's rows.
//
// Thread rules: plain functions; everything they touch belongs to the caller (the shard's
// event-loop thread).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/base/aligned.h"
#include "common/engine/optim/optimizer.h"
#include "common/engine/param_layout.h"
#include "server/shard_chunk.h"
#include "server/shard_push.h"

namespace pstrain {

// Gives a table piece its initial values (sparse_row_init's rows: those of the whole table's
// init), and its width in table_dim. Precondition: chunk.info.is_table_piece().
void init_table_piece(const ParamLayout& layout, uint64_t seed, ShardChunk& chunk);

// Empty when `rows` (with `values` gradient floats) is a valid push to the piece: ascending,
// each a row of the piece, one row of table_dim values each; else what is wrong, for the
// caller's error.
std::string table_push_error(const ShardChunk& chunk, std::span<const uint32_t> rows, size_t values);

// A step's rows of one piece: piece-local row numbers (ascending) and their summed, scaled
// gradients (rows.size() x table_dim). Reused from step to step.
struct TableStep {
  std::vector<uint32_t> rows;
  AlignedFloats grads;
};

// The union of the pushes' rows and, per row, the pushes' gradients summed in `pushes`' order
// (slice order), then scaled by 1 / examples.
void reduce_table_step(const ShardChunk& chunk, std::span<const PushRequest* const> pushes, int64_t examples,
                       TableStep& out);

// Applies a reduced step to the piece (lazy: the listed rows; else the whole piece, through
// chunk.scratch and chunk.step). `lr_scale` as Optimizer::apply. `keep_rows` (sync): a lazy piece
// keeps the listed rows as they were, for a takeover's table_row_at; async never reads them.
void apply_table_step(optim::Optimizer& optimizer, bool lazy, ShardChunk& chunk, const TableStep& step,
                      float lr_scale, bool keep_rows);

// Piece-local row `local` as it was at version `at`: the current values, or those from before the
// last update (at == chunk.previous_version); nullptr when the piece no longer has that version.
const float* table_row_at(const ShardChunk& chunk, size_t local, uint64_t at);

}  // namespace pstrain
