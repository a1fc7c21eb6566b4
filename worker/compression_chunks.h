// The chunks a compressed push is cut into (training.compression), as a worker's pushes and the
// standalone trainer's stand-in for them (local_compression.h) both see them: each chunk's size,
// its place in the flat dense buffer, the row length of the kernel it is whole rows of (what
// powersgd factors), whether it is a batch_norm moving statistic (always pushed exact), and
// powersgd's rank and warm-start factors for it. One table per worker (or slice): the warm-start
// factors are that worker's state.
//
// Thread rules: plain data and functions; a table belongs to its caller.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/data/training_spec.h"
#include "common/engine/chunk_plan.h"
#include "common/engine/param_layout.h"

namespace pstrain {

struct CompressionChunk {
  size_t size = 0, offset = 0;  // elements; the first one's place in the flat dense buffer
  size_t columns = 0;           // the kernel's row length when the chunk is whole kernel rows, else 0
  bool moving = false;          // a batch_norm moving statistic
  uint32_t param = 0;           // its tensor, and its first element inside it (powersgd's seed)
  uint64_t param_offset = 0;
  size_t rank = 0;              // powersgd: 0 when the chunk goes dense
  std::vector<float> warm_q;    // powersgd: rank x columns (Q kept transposed), the previous step's Q
};

// The table of `chunks` (dense chunks, no table pieces), chunk k at `offsets[k]` of the flat
// buffer of `layout`; no powersgd factors until plan_compression().
std::vector<CompressionChunk> compression_chunks(const std::vector<ChunkInfo>& chunks, const std::vector<size_t>& offsets,
                                                 const ParamLayout& layout);

// Sets the table for `compression`: with powersgd, each kernel chunk's rank and its first Q,
// drawn from `seed` (the model's), the tensor and the chunk's start, so every run of a job (and
// the standalone trainer's slices) start from the same factors; otherwise no factors.
void plan_compression(std::vector<CompressionChunk>& chunks, const CompressionSpec& compression, uint64_t seed);

}  // namespace pstrain
