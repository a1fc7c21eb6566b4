#include "common/engine/simd/segmented_product.h"

#include <algorithm>
#include <vector>

#include "common/base/aligned.h"
#include "common/base/error.h"
#include "common/engine/simd/bf16_product.h"

namespace pstrain::simd {
namespace {

// Blocks of C up to about 256 KiB (a core's L2 holds one with its scratch twin), rows a multiple of
// every level's panel (8, 16 or 32) and columns of its tile (kernels().nr), so blocks keep tiles
// whole.
constexpr int64_t kBlockFloats = 64 * 1024;
constexpr int64_t kMaxBlockRows = 384;

void segment_product(int64_t m, int64_t n, const ProductSegment& s, int64_t row, int64_t column, float* c,
                     int64_t ldc, bool bf16) {
  const Operand a{s.a.data + row * s.a.row, s.a.row, s.a.step};
  const Operand b{s.b.data + column * s.b.row, s.b.row, s.b.step};
  if (bf16) {
    product_bf16(m, n, s.k, a, b, false, c, ldc);
  } else {
    product(m, n, s.k, a, b, false, c, ldc);
  }
}

}  // namespace

void product_segments(int64_t m, int64_t n, std::span<const ProductSegment> segments, float* c, int64_t ldc,
                      int threads, bool bf16) {
  if (segments.empty()) throw Error("product_segments needs at least one segment");
  if (m <= 0 || n <= 0) return;
  const auto up = [](int64_t value, int64_t multiple) { return (value + multiple - 1) / multiple * multiple; };
  const auto divide = [](int64_t value, int64_t by) { return (value + by - 1) / by; };
  int64_t work = 0;
  for (const ProductSegment& s : segments) work += s.k;
  // Below about a million multiply-adds a thread's share is not worth waking it for.
  const int parts = work * m * n < (int64_t{1} << 20) ? 1 : std::max(threads, 1);
  // Blocks of about equal size, about a multiple of the threads in number (each thread about the
  // same share; the rounding to panels and tiles may add one).
  const int64_t nr = kernels().nr;
  const int64_t row_blocks = divide(m, kMaxBlockRows);
  const int64_t block_rows = std::min(m, up(divide(m, row_blocks), 32));
  const int64_t block_columns_wanted = std::max(nr, kBlockFloats / block_rows / nr * nr);
  const int64_t column_blocks = up(divide(n, block_columns_wanted) * row_blocks, parts) / row_blocks;
  const int64_t block_columns = std::min(n, up(divide(n, column_blocks), nr));
  const int64_t blocks = row_blocks * divide(n, block_columns);
#pragma omp parallel for num_threads(parts) schedule(static)
  for (int64_t block = 0; block < blocks; ++block) {
    thread_local std::vector<float, CacheAlignedAllocator<float>> scratch;
    const int64_t row = block % row_blocks * block_rows, column = block / row_blocks * block_columns;
    const int64_t rows = std::min(block_rows, m - row), columns = std::min(block_columns, n - column);
    float* out = c + column * ldc + row;
    segment_product(rows, columns, segments[0], row, column, out, ldc, bf16);
    if (segments.size() == 1) continue;
    if (scratch.size() < static_cast<size_t>(rows * columns)) scratch.resize(static_cast<size_t>(rows * columns));
    for (size_t s = 1; s < segments.size(); ++s) {
      segment_product(rows, columns, segments[s], row, column, scratch.data(), rows, bf16);
      for (int64_t j = 0; j < columns; ++j) {
        float* to = out + j * ldc;
        const float* from = scratch.data() + j * rows;
        for (int64_t i = 0; i < rows; ++i) to[i] += from[i];
      }
    }
  }
}

}  // namespace pstrain::simd
