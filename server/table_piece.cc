#include "server/table_piece.h"

#include <algorithm>

#include "common/engine/nn/gradient_scaling.h"

namespace pstrain {

void init_table_piece(const ParamLayout& layout, uint64_t seed, ShardChunk& chunk) {
  const ChunkInfo& info = chunk.info;
  const ParamInfo& param = layout.params()[info.param];
  chunk.table_dim = static_cast<size_t>(param.shape[1]);
  const size_t rows = info.size / chunk.table_dim;
  chunk.values.resize(info.size);
  sparse_row_init(layout, seed, info.param, static_cast<int64_t>(info.offset), static_cast<int64_t>(rows),
                  chunk.values.data(), info.stride);
}

std::string table_push_error(const ShardChunk& chunk, std::span<const uint32_t> rows, size_t values) {
  const ChunkInfo& info = chunk.info;
  if (!info.is_table_piece()) return "chunk " + std::to_string(info.key) + " is not a sparse table's piece";
  if (values != rows.size() * chunk.table_dim) {
    return std::to_string(values) + " gradient values for " + std::to_string(rows.size()) + " rows of " +
           std::to_string(chunk.table_dim);
  }
  const size_t piece_rows = info.size / chunk.table_dim;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!in_piece(info, rows[i]) || piece_row(info, rows[i]) >= piece_rows) {
      return "row " + std::to_string(rows[i]) + " is not in chunk " + std::to_string(info.key);
    }
    if (i > 0 && rows[i] <= rows[i - 1]) return "rows are not ascending at " + std::to_string(i);
  }
  return {};
}

void reduce_table_step(const ShardChunk& chunk, std::span<const PushRequest* const> pushes, int64_t examples,
                       TableStep& out) {
  const size_t dim = chunk.table_dim;
  out.rows.clear();
  for (const PushRequest* push : pushes) {
    for (uint32_t row : push->rows) out.rows.push_back(static_cast<uint32_t>(piece_row(chunk.info, row)));
  }
  std::sort(out.rows.begin(), out.rows.end());
  out.rows.erase(std::unique(out.rows.begin(), out.rows.end()), out.rows.end());
  // Zeros first, then each push added row by row in order: for the first push, 0 + g == g bit
  // for bit, as the trainer's first replica writes its rows over zeros.
  out.grads.assign(out.rows.size() * dim, 0.0f);
  for (const PushRequest* push : pushes) {
    size_t at = 0;  // cursor into out.rows
    for (size_t i = 0; i < push->rows.size(); ++i) {
      const auto local = static_cast<uint32_t>(piece_row(chunk.info, push->rows[i]));
      while (out.rows[at] != local) ++at;
      float* o = out.grads.data() + at * dim;
      const float* g = push->gradient.data() + i * dim;
      for (size_t c = 0; c < dim; ++c) o[c] += g[c];
    }
  }
  nn::scale_and_regularize(out.grads.data(), out.grads.data(), out.grads.size(), examples, 0.0f);
}

void apply_table_step(optim::Optimizer& optimizer, bool lazy, ShardChunk& chunk, const TableStep& step,
                      float lr_scale, bool keep_rows) {
  const size_t dim = chunk.table_dim;
  if (lazy) {
    chunk.previous_version = UINT64_MAX;  // until the rows below are those before this update
    if (keep_rows) {
      chunk.previous_rows.assign(step.rows.begin(), step.rows.end());
      chunk.previous_row_values.resize(step.rows.size() * dim);
      for (size_t k = 0; k < step.rows.size(); ++k) {
        std::copy_n(chunk.values.data() + size_t{step.rows[k]} * dim, dim, chunk.previous_row_values.data() + k * dim);
      }
    }
    optimizer.apply_rows(chunk.values, dim, step.rows, step.grads, chunk.optimizer_state, lr_scale);
    if (keep_rows) chunk.previous_version = chunk.version;
    chunk.values_since = chunk.version + 1;
    return;
  }
  std::fill(chunk.scratch.begin(), chunk.scratch.end(), 0.0f);
  for (size_t k = 0; k < step.rows.size(); ++k) {
    std::copy_n(step.grads.data() + k * dim, dim, chunk.scratch.data() + size_t{step.rows[k]} * dim);
  }
  chunk.step(optimizer, std::span<const float>(chunk.scratch.data(), chunk.info.size), lr_scale);
}

const float* table_row_at(const ShardChunk& chunk, size_t local, uint64_t at) {
  const size_t dim = chunk.table_dim;
  if (at >= chunk.values_since && at <= chunk.version) return chunk.values.data() + local * dim;
  if (at != chunk.previous_version) return nullptr;
  if (chunk.previous.size() == chunk.info.size) return chunk.previous.data() + local * dim;  // "dense"
  const auto it = std::lower_bound(chunk.previous_rows.begin(), chunk.previous_rows.end(), local);
  if (it == chunk.previous_rows.end() || *it != local) return chunk.values.data() + local * dim;  // unchanged
  return chunk.previous_row_values.data() + static_cast<size_t>(it - chunk.previous_rows.begin()) * dim;
}

}  // namespace pstrain
