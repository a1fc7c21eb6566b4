#include "common/chunk_plan.h"

#include <algorithm>

namespace pstrain {

std::vector<ChunkInfo> plan_chunks(const ParamLayout& layout, uint32_t servers, size_t max_chunk_floats) {
  // Server s owns the flat range [total * s / S, total * (s + 1) / S) of the concatenated tensors
  // (ps-lite's key ranges): loads differ by at most one float. Each tensor's piece inside a range
  // is cut into near-equal chunks of at most `target` floats: about four per server, so a worker
  // has several transfers per server in flight, and never above max_chunk_floats.
  const size_t total = layout.total_size();  // includes the alignment padding
  const size_t share = (total + servers - 1) / servers;
  const size_t target = std::clamp<size_t>((share + 3) / 4, 1024, std::max<size_t>(1024, max_chunk_floats));
  std::vector<ChunkInfo> chunks;
  // Boundaries fall on multiples of the layout's alignment so every chunk is word-aligned.
  const auto aligned = [](size_t x) { return x / ParamLayout::kAlignment * ParamLayout::kAlignment; };
  for (uint32_t s = 0; s < servers; ++s) {
    const size_t begin = aligned(total * s / servers);
    const size_t end = s + 1 == servers ? total : aligned(total * (s + 1) / servers);
    for (size_t p = 0; p < layout.params().size(); ++p) {
      const ParamInfo& param = layout.params()[p];
      const size_t lo = std::max(begin, param.offset), hi = std::min(end, param.offset + param.size);
      if (lo >= hi) continue;
      const size_t len = hi - lo;
      const size_t pieces = (len + target - 1) / target;
      for (size_t i = 0; i < pieces; ++i) {
        const size_t a = i == 0 ? lo : param.offset + aligned(lo - param.offset + len * i / pieces);
        const size_t b = i + 1 == pieces ? hi : param.offset + aligned(lo - param.offset + len * (i + 1) / pieces);
        chunks.push_back({static_cast<uint32_t>(chunks.size()), static_cast<uint32_t>(p), a - param.offset, b - a, s});
      }
    }
  }
  return chunks;
}

std::vector<size_t> server_loads(const std::vector<ChunkInfo>& chunks, uint32_t servers) {
  std::vector<size_t> load(servers, 0);
  for (const auto& c : chunks) load[c.server] += c.size;
  return load;
}

}  // namespace pstrain
