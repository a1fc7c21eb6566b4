#include "worker/local_compression.h"

#include <algorithm>
#include <span>

#include "common/base/error.h"
#include "common/engine/chunk_plan.h"
#include "common/engine/compression.h"

namespace pstrain {

LocalCompression::LocalCompression(const CompressionSpec& compression, uint64_t seed, const ParamLayout& layout,
                                   uint32_t servers, int slices)
    : spec_(compression) {
  if (!active()) return;
  if (slices < 1) throw Error("compression needs at least one slice");
  // The worker's table: the plan's dense chunks, each at its tensor's offset (ServerChunks).
  std::vector<ChunkInfo> dense;
  std::vector<size_t> offsets;
  for (const ChunkInfo& c : plan_chunks(layout, std::max<uint32_t>(servers, 1))) {
    if (c.is_table_piece()) continue;
    dense.push_back(c);
    offsets.push_back(layout.params()[c.param].offset + c.offset);
  }
  std::vector<CompressionChunk> table = compression_chunks(dense, offsets, layout);
  plan_compression(table, spec_, seed);
  chunks_.assign(static_cast<size_t>(slices), table);
  if (spec_.keeps_worker_state()) residual_.assign(static_cast<size_t>(slices), AlignedFloats(layout.dense_size(), 0.0f));
}

void LocalCompression::decode_as_pushed(int slice, float* gradient) {
  if (!active()) return;
  for (CompressionChunk& c : chunks_.at(static_cast<size_t>(slice))) {
    const std::span<float> g(gradient + c.offset, c.size);
    switch (spec_.kind) {
      case CompressionKind::kFp16:
      case CompressionKind::kBf16: {  // 2 bytes a value on the wire
        if (c.moving) break;
        const bool half = spec_.kind == CompressionKind::kFp16;
        encoded_.resize((c.size * 2 + sizeof(float) - 1) / sizeof(float));
        auto* bytes = reinterpret_cast<unsigned char*>(encoded_.data());
        half ? encode_half(g, bytes) : encode_bfloat16(g, bytes);
        half ? decode_half(bytes, g) : decode_bfloat16(bytes, g);
        break;
      }
      case CompressionKind::kTopk: {
        if (c.moving) break;
        const size_t count = topk_count(c.size, spec_.fraction);
        indices_.resize(count);
        values_.resize(count);
        topk_with_feedback(g, {residual_[static_cast<size_t>(slice)].data() + c.offset, c.size}, indices_, values_,
                           scratch_);
        std::fill(g.begin(), g.end(), 0.0f);
        for (size_t i = 0; i < count; ++i) g[indices_[i]] = values_[i];
        break;
      }
      case CompressionKind::kPowerSgd: {
        if (c.rank == 0) break;
        const size_t rows = c.size / c.columns;
        p_.resize(rows * c.rank);
        q_.resize(c.columns * c.rank);
        powersgd_with_feedback(g, {residual_[static_cast<size_t>(slice)].data() + c.offset, c.size}, rows, c.columns,
                               c.rank, c.warm_q, p_, q_, scratch_);
        low_rank_product(p_, q_, rows, c.columns, c.rank, g);
        break;
      }
      case CompressionKind::kNone:
        break;
    }
  }
}

const float* LocalCompression::values_for_step(const float* params, size_t dense, size_t total) {
  if (spec_.kind != CompressionKind::kFp16) return params;
  rounded_.resize(total);
  for (size_t i = 0; i < dense; ++i) rounded_[i] = half_to_float(float_to_half(params[i]));
  std::copy(params + dense, params + total, rounded_.begin() + static_cast<std::ptrdiff_t>(dense));
  return rounded_.data();
}

}  // namespace pstrain
