#include "common/chunk_plan.h"

#include <algorithm>
#include <numeric>

namespace pstrain {

std::vector<ChunkInfo> plan_chunks(const ParamLayout& layout, uint32_t servers, size_t max_chunk_floats) {
  std::vector<ChunkInfo> chunks;
  for (size_t p = 0; p < layout.params().size(); ++p) {
    const size_t size = layout.params()[p].size;
    const size_t pieces = std::max<size_t>(1, (size + max_chunk_floats - 1) / max_chunk_floats);
    for (size_t i = 0; i < pieces; ++i) {
      const size_t begin = size * i / pieces, end = size * (i + 1) / pieces;
      chunks.push_back({static_cast<uint32_t>(chunks.size()), static_cast<uint32_t>(p), begin, end - begin, 0});
    }
  }
  std::vector<size_t> order(chunks.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return chunks[a].size > chunks[b].size; });
  std::vector<size_t> load(servers, 0);
  for (size_t k : order) {
    const auto lightest = static_cast<uint32_t>(std::min_element(load.begin(), load.end()) - load.begin());
    chunks[k].server = lightest;
    load[lightest] += chunks[k].size;
  }
  return chunks;
}

std::vector<size_t> server_loads(const std::vector<ChunkInfo>& chunks, uint32_t servers) {
  std::vector<size_t> load(servers, 0);
  for (const auto& c : chunks) load[c.server] += c.size;
  return load;
}

}  // namespace pstrain
