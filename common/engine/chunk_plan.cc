#include "common/engine/chunk_plan.h"

#include <algorithm>
#include <numeric>

namespace pstrain {

std::vector<ChunkInfo> plan_chunks(const ParamLayout& layout, uint32_t servers, size_t max_chunk_floats,
                                   size_t min_chunk_floats) {
  // Every large tensor is striped over all servers: cut into S * m near-equal pieces, piece i on
  // server i % S. So each server holds about 1/S of every large tensor, and when a tensor's
  // gradient is final (the first layer's comes last, and is the biggest) all servers update
  // their part at once: with ps-lite's contiguous key ranges, one server held most of the first
  // layer and did most of the work at the end of every step while the others waited (measured
  // 5-10% slower in sync 2 x 2). Pieces are about a quarter of a server's share (at most
  // max_chunk_floats), so a worker has several transfers per server in flight, but never under
  // min_chunk_floats (kMinChunkFloats): below that a piece costs more as a message than as data.
  // (With a floor of 1,024 floats, the tabular MLP's 85K parameters on 2 servers made 15 pushes
  // per worker per step; with 16,384, 9.) Small tensors (biases, small kernels) go whole to the
  // least loaded server.
  const size_t total = layout.dense_size();
  const size_t share = (total + servers - 1) / servers;
  const size_t smallest = std::max<size_t>(1, std::min(min_chunk_floats, max_chunk_floats));
  const size_t target = std::clamp<size_t>((share + 3) / 4, smallest, std::max(smallest, max_chunk_floats));
  // Boundaries fall on multiples of the layout's alignment so every chunk is word-aligned.
  const auto aligned = [](size_t x) { return x / ParamLayout::kAlignment * ParamLayout::kAlignment; };
  std::vector<ChunkInfo> chunks;
  std::vector<size_t> load(servers, 0);
  for (size_t p = 0; p < layout.dense_count(); ++p) {
    const size_t n = layout.params()[p].size;
    if (n < size_t{servers} * smallest) {
      const auto least = static_cast<uint32_t>(std::min_element(load.begin(), load.end()) - load.begin());
      chunks.push_back({0, static_cast<uint32_t>(p), 0, n, least});
      load[least] += n;
      continue;
    }
    const size_t per_server = (n / servers + target - 1) / target;
    const size_t pieces = per_server * servers;
    // A matrix ([rows, columns]: a dense kernel) is cut between rows where it has rows enough,
    // so a chunk is whole kernel rows: a worker can then push its gradient as factors (one
    // input row per kernel row; see ParameterServer.pushFactors).
    const Shape& shape = layout.params()[p].shape;
    size_t unit = ParamLayout::kAlignment;
    if (shape.size() == 2) {
      const size_t row_unit = std::lcm(static_cast<size_t>(shape[1]), ParamLayout::kAlignment);
      if (n / row_unit >= pieces) unit = row_unit;
    }
    const auto cut = [&](size_t i) { return i == 0 ? 0 : i == pieces ? n : n * i / pieces / unit * unit; };
    for (size_t i = 0; i < pieces; ++i) {
      const size_t a = cut(i), b = cut(i + 1);
      const auto server = static_cast<uint32_t>(i % servers);
      chunks.push_back({0, static_cast<uint32_t>(p), a, b - a, server});
      load[server] += b - a;
    }
  }
  // Sparse tables (after the dense tensors): S * k pieces of a table, row r in piece r mod S * k,
  // piece p on server p mod S (so row r on server r mod S), k the fewest that keep a piece at most
  // kMaxTablePieceFloats.
  for (size_t p = layout.dense_count(); p < layout.params().size(); ++p) {
    const ParamInfo& info = layout.params()[p];
    const auto rows = static_cast<size_t>(info.shape[0]), dim = static_cast<size_t>(info.shape[1]);
    const size_t per_server = (rows + servers - 1) / servers;
    const size_t k = std::max<size_t>(1, (per_server * dim + kMaxTablePieceFloats - 1) / kMaxTablePieceFloats);
    const auto stride = static_cast<uint32_t>(servers * k);
    for (uint32_t first = 0; first < stride; ++first) {
      ChunkInfo piece{0, static_cast<uint32_t>(p), first, 0, first % servers, stride};
      piece.size = piece_rows(piece, rows) * dim;
      if (piece.size == 0) continue;  // a table of fewer rows than pieces
      chunks.push_back(piece);
      load[piece.server] += piece.size;
    }
  }
  // A model without a tensor worth striping (none of 1024 S floats) can leave servers empty, say
  // one 784 x 10 layer on 8 servers. An empty server would never complete a backup: give each the
  // second half of the largest chunk that can still be split on the alignment. Only a model too
  // small for that (under about 16 S floats) still leaves a server empty.
  for (uint32_t server = 0; server < servers; ++server) {
    if (load[server] != 0) continue;
    auto largest = std::max_element(chunks.begin(), chunks.end(), [](const ChunkInfo& x, const ChunkInfo& y) {
      return (x.is_table_piece() ? 0 : x.size) < (y.is_table_piece() ? 0 : y.size);
    });
    if (largest != chunks.end() && largest->is_table_piece()) break;
    if (largest == chunks.end() || largest->size < 2 * ParamLayout::kAlignment) break;
    const size_t half = aligned(largest->size / 2);
    ChunkInfo second = *largest;
    second.offset += half;
    second.size -= half;
    second.server = server;
    load[largest->server] -= second.size;
    largest->size = half;
    load[server] += second.size;
    chunks.push_back(second);
  }
  // Keys by server, then by position: a server's chunks are one run of keys.
  std::stable_sort(chunks.begin(), chunks.end(),
                   [](const ChunkInfo& x, const ChunkInfo& y) { return x.server < y.server; });
  for (size_t k = 0; k < chunks.size(); ++k) chunks[k].key = static_cast<uint32_t>(k);
  return chunks;
}

void gather_piece(const ChunkInfo& chunk, size_t dim, const float* table, float* piece) {
  for (size_t j = 0; j * dim < chunk.size; ++j) {
    std::copy_n(table + (chunk.offset + j * chunk.stride) * dim, dim, piece + j * dim);
  }
}

void scatter_piece(const ChunkInfo& chunk, size_t dim, const float* piece, float* table) {
  for (size_t j = 0; j * dim < chunk.size; ++j) {
    std::copy_n(piece + j * dim, dim, table + (chunk.offset + j * chunk.stride) * dim);
  }
}

bool fits_layout(const ChunkInfo& c, const ParamLayout& layout) {
  if (c.param >= layout.params().size()) return false;
  const ParamInfo& p = layout.params()[c.param];
  if (!c.is_table_piece()) return !p.sparse && c.offset + c.size <= p.size && c.size <= p.size;
  if (!p.sparse || p.shape.size() != 2 || c.offset >= c.stride) return false;
  const auto rows = static_cast<size_t>(p.shape[0]), dim = static_cast<size_t>(p.shape[1]);
  return c.size != 0 && c.size == piece_rows(c, rows) * dim;
}

std::vector<size_t> server_loads(const std::vector<ChunkInfo>& chunks, uint32_t servers) {
  std::vector<size_t> load(servers, 0);
  for (const auto& c : chunks) load[c.server] += c.size;
  return load;
}

std::vector<uint32_t> row_servers(const std::vector<ChunkInfo>& chunks, uint32_t param, size_t rows, size_t columns) {
  std::vector<uint32_t> servers(rows, 0);
  size_t covered = 0;
  for (const ChunkInfo& c : chunks) {
    if (c.param != param) continue;
    if (c.is_table_piece() || columns == 0 || c.offset % columns != 0 || c.size % columns != 0 || c.offset + c.size > rows * columns) {
      return {};
    }
    std::fill_n(servers.begin() + static_cast<std::ptrdiff_t>(c.offset / columns), c.size / columns, c.server);
    covered += c.size;
  }
  if (covered != rows * columns) return {};
  return servers;
}

}  // namespace pstrain
