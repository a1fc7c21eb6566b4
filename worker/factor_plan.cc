#include "worker/factor_plan.h"

#include <algorithm>
#include <set>

#include "common/rpc/message_limits.h"

namespace pstrain {

FactorPlan::FactorPlan(const ParamLayout& layout, const std::vector<ChunkInfo>& chunks, int64_t batch, bool enabled,
                       const std::function<bool(size_t)>& per_example)
    : chunks_(chunks), factored_(layout.params().size(), false), factored_chunk_(chunks.size(), false) {
  if (!enabled || batch <= 0) return;
  for (size_t p = 0; p < layout.params().size(); ++p) {
    const ParamInfo& info = layout.params()[p];
    // Dense kernels are the 2-D ones (conv kernels have four dimensions).
    if (info.role != ParamRole::kKernel || info.shape.size() != 2) continue;
    if (per_example && !per_example(p)) continue;  // a dense over a sequence: its rows are steps
    const auto rows = static_cast<size_t>(info.shape[0]), columns = static_cast<size_t>(info.shape[1]);
    std::vector<size_t> mine;
    std::set<uint32_t> servers;
    bool whole_rows = true;
    for (size_t k = 0; k < chunks.size(); ++k) {
      if (chunks[k].param != p) continue;
      mine.push_back(k);
      servers.insert(chunks[k].server);
      whole_rows = whole_rows && chunks[k].offset % columns == 0 && chunks[k].size % columns == 0;
    }
    if (mine.empty() || !whole_rows) continue;
    const size_t factor_floats = static_cast<size_t>(batch) * (rows + servers.size() * columns);
    if (3 * factor_floats > rows * columns) continue;  // not worth it: push the gradient
    factored_[p] = true;
    std::sort(mine.begin(), mine.end(), [&](size_t a, size_t b) { return chunks[a].offset < chunks[b].offset; });
    // One group per server, cut where its values would pass rpc::kMaxPartBytes: the reply
    // carries them (a wide kernel on one server is hundreds of MB).
    for (uint32_t server : servers) {
      Group g{p, info.offset, server, rows, columns, {}};
      size_t floats = 0;
      for (size_t k : mine) {
        if (chunks[k].server != server) continue;
        if (!g.chunks.empty() && (floats + chunks[k].size) * sizeof(float) > rpc::kMaxPartBytes) {
          groups_.push_back(g);
          g.chunks.clear();
          floats = 0;
        }
        g.chunks.push_back(k);
        floats += chunks[k].size;
      }
      groups_.push_back(std::move(g));
    }
    for (size_t k : mine) factored_chunk_[k] = true;
  }
}

void FactorPlan::gather_inputs(const Group& group, const float* inputs, size_t examples, std::vector<uint32_t>& rows,
                               AlignedFloats& values) const {
  // The rows the group's chunks hold, flagged where some example's input is nonzero.
  std::vector<uint8_t> nonzero(group.rows, 0);
  for (size_t k : group.chunks) {
    const size_t first = chunks_[k].offset / group.columns, last = first + chunks_[k].size / group.columns;
    for (size_t b = 0; b < examples; ++b) {
      const float* x = inputs + b * group.rows;
      for (size_t r = first; r < last; ++r) nonzero[r] |= x[r] != 0.0f;
    }
  }
  rows.clear();
  for (size_t r = 0; r < group.rows; ++r) {
    if (nonzero[r]) rows.push_back(static_cast<uint32_t>(r));
  }
  // (Rounded up to whole 8-byte words, zero-padded: the message refers to it without copying.)
  values.assign((rows.size() * examples + 1) / 2 * 2, 0.0f);
  for (size_t b = 0; b < examples; ++b) {
    const float* x = inputs + b * group.rows;
    float* out = values.data() + b * rows.size();
    for (size_t i = 0; i < rows.size(); ++i) out[i] = x[rows[i]];
  }
}

}  // namespace pstrain
