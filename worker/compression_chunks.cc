#include "worker/compression_chunks.h"

#include "common/base/error.h"
#include "common/base/rng.h"
#include "common/engine/compression.h"
#include "common/engine/nn/moving_statistics.h"

namespace pstrain {

std::vector<CompressionChunk> compression_chunks(const std::vector<ChunkInfo>& chunks, const std::vector<size_t>& offsets,
                                                 const ParamLayout& layout) {
  if (chunks.size() != offsets.size()) throw Error("compression_chunks: one offset per chunk");
  std::vector<CompressionChunk> table;
  table.reserve(chunks.size());
  for (size_t k = 0; k < chunks.size(); ++k) {
    const ChunkInfo& c = chunks[k];
    const ParamInfo& param = layout.params()[c.param];
    const size_t columns = param.shape.size() >= 2 ? static_cast<size_t>(param.shape.back()) : 0;
    const bool whole_rows = columns > 0 && c.offset % columns == 0 && c.size % columns == 0;
    CompressionChunk chunk;
    chunk.size = c.size;
    chunk.offset = offsets[k];
    chunk.columns = whole_rows && param.role == ParamRole::kKernel ? columns : 0;
    chunk.moving = nn::is_moving_statistic(param.role);
    chunk.param = c.param;
    chunk.param_offset = c.offset;
    table.push_back(std::move(chunk));
  }
  return table;
}

void plan_compression(std::vector<CompressionChunk>& chunks, const CompressionSpec& compression, uint64_t seed) {
  for (CompressionChunk& c : chunks) {
    c.rank = 0;
    c.warm_q.clear();
  }
  if (compression.kind != CompressionKind::kPowerSgd) return;
  for (CompressionChunk& c : chunks) {
    if (c.columns == 0) continue;
    c.rank = powersgd_rank(c.size / c.columns, c.columns, compression.rank);
    if (c.rank == 0) continue;
    c.warm_q.resize(c.columns * c.rank);
    // The chunk's identity that outlives a re-plan with the same tensors: its tensor and start.
    powersgd_initial_q(mix_seed(mix_seed(seed, c.param), c.param_offset), c.warm_q);
  }
}

}  // namespace pstrain
