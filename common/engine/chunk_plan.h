// How a job's parameters are cut into chunks and placed on servers.
//
// A chunk never spans two tensors (so it has one L2 factor and one name). Every large dense tensor is
// striped over all servers in near-equal chunks of about a quarter of a server's share (at least
// kMinChunkFloats, at most max_chunk_floats), so each server holds about 1/S of it and all
// servers share the update when its gradient arrives; small tensors (under kMinChunkFloats per
// server) go whole to the least loaded server. S servers carry about equal bytes. The plan
// depends only on its inputs: the coordinator computes it and hands the same table to servers
// and workers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/engine/param_layout.h"

namespace pstrain {

// About 1 MB of float32: small enough to pipeline several transfers per server (measured faster
// than one large message), large enough that per-message overhead stays small.
inline constexpr size_t kDefaultMaxChunkFloats = 256 * 1024;
// 64 KB of float32: the smallest piece a tensor is cut into. A push and its reply cost about
// 50 us of CPU beyond their bytes (wake-ups, reads, KJ's promises, malloc: docs/BENCHMARKS.md,
// "Where the cluster's CPU goes"), as much as copying some 70 KB through loopback TCP, so a
// smaller piece spends more on being a message than on its data. A tensor is striped over the
// servers only when each server's piece would hold at least this much.
inline constexpr size_t kMinChunkFloats = 16 * 1024;

struct ChunkInfo {
  uint32_t key = 0;     // position in the table
  uint32_t param = 0;   // tensor index in the layout
  size_t offset = 0;    // first element inside the tensor
  size_t size = 0;      // elements
  uint32_t server = 0;
  // 0: elements [offset, offset + size) of the tensor. > 0: a sparse table's piece, rows
  // `offset`, `offset + stride`, ... of it (offset < stride: the piece's first row; size those
  // rows' elements; piece_rows()).
  uint32_t stride = 0;

  bool is_table_piece() const { return stride != 0; }
};

// A table piece's rows (ascending table row numbers, each offset + k * stride), for a table of
// `rows` rows: how many, and where a row sits in the piece.
inline size_t piece_rows(const ChunkInfo& piece, size_t rows) {
  return rows > piece.offset ? (rows - piece.offset + piece.stride - 1) / piece.stride : 0;
}
// Whether table row `row` is in the piece.
inline bool in_piece(const ChunkInfo& piece, uint32_t row) { return row % piece.stride == piece.offset; }

// The most floats a table piece holds: its backup snapshot (values and the optimizer's slots) and
// replica part stay a few MB, far under a message's limit, however large the table.
inline constexpr size_t kMaxTablePieceFloats = size_t{1} << 20;
inline size_t piece_row(const ChunkInfo& piece, uint32_t row) { return row / piece.stride; }

// Copies a table piece's rows (each `dim` floats) out of the whole table (`table`: its rows back
// to back) into `piece` (the piece's rows back to back, chunk.size floats), and back.
void gather_piece(const ChunkInfo& chunk, size_t dim, const float* table, float* piece);
void scatter_piece(const ChunkInfo& chunk, size_t dim, const float* piece, float* table);

// True when `chunk` is a piece of `layout` as plan_chunks() cuts it: inside a dense tensor, or a
// sparse table's row piece (offset < stride, the piece's rows whole). A server checks
// the table it is handed with this.
bool fits_layout(const ChunkInfo& chunk, const ParamLayout& layout);

// Elements [offset, offset + size) of one chunk (a row-sparse push or reply covers a few).
struct ChunkRange {
  size_t offset = 0;
  size_t size = 0;
  bool operator==(const ChunkRange&) const = default;
};

// The service always plans with the defaults (the coordinator, and the standalone trainer's
// emulation of a cluster's summation order, must agree); tests pass smaller pieces to cut a
// small model into many chunks.
std::vector<ChunkInfo> plan_chunks(const ParamLayout& layout, uint32_t servers,
                                   size_t max_chunk_floats = kDefaultMaxChunkFloats,
                                   size_t min_chunk_floats = kMinChunkFloats);

// For the kernel `param` of `rows` x `columns` floats: the server holding each row, or empty
// when a chunk of it starts or ends inside a row (then no row belongs to one server).
std::vector<uint32_t> row_servers(const std::vector<ChunkInfo>& chunks, uint32_t param, size_t rows, size_t columns);

// Floats held by each server under a plan.
std::vector<size_t> server_loads(const std::vector<ChunkInfo>& chunks, uint32_t servers);

}  // namespace pstrain
