#include "common/engine/simd/bf16_product.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "common/base/aligned.h"
#include "common/engine/simd/cpu_target.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace pstrain::simd {
namespace {

// The register tile of the native path: kMr vectors of 16 rows by kNr columns of accumulators (24
// of 32 zmm), as simd::product's AVX-512 tile. The emulated path packs alike.
constexpr int64_t kLanes = 16, kMr = 2, kPanel = kMr * kLanes, kNr = 12;
// B panels packed at a time when A is packed whole.
constexpr int64_t kBlock = 32;

int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }
float float_of(uint32_t u) { return std::bit_cast<float>(u); }

uint32_t round_bits(uint32_t x) {
  if ((x & 0x7f800000u) == 0) return (x & 0x80000000u) >> 16;              // zero, denormal: a signed zero
  if ((x & 0x7fffffffu) > 0x7f800000u) return ((x >> 16) | 0x0040u) & 0xffffu;  // a quiet NaN
  return (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;                           // to nearest even
}

// Rows [first, first + width) of an operand (entry (i, p) at src[i * row + p * step]) as ceil(k / 2)
// groups of `width` pairs: term 2q in a pair's low half, 2q + 1 in its high half (zeros past the
// last row and for the pad term of an odd k).
void pack_portable(const float* src, int64_t row, int64_t step, int64_t rows, int64_t k, int64_t first, int64_t width,
                   uint32_t* dst) {
  const int64_t valid = std::min(width, rows - first), pairs = (k + 1) / 2;
  for (int64_t q = 0; q < pairs; ++q) {
    uint32_t* out = dst + q * width;
    for (int64_t i = 0; i < valid; ++i) {
      const float* line = src + (first + i) * row;
      const uint32_t lo = round_bits(bits_of(line[2 * q * step]));
      const uint32_t hi = 2 * q + 1 < k ? round_bits(bits_of(line[(2 * q + 1) * step])) : 0u;
      out[i] = lo | (hi << 16);
    }
    for (int64_t i = valid; i < width; ++i) out[i] = 0u;
  }
}

// pack_portable of an operand already rounded (RoundedRows: entry (i, p) at src[i + p * step]).
void pack_portable_rounded(const uint16_t* src, int64_t step, int64_t rows, int64_t k, int64_t first, int64_t width,
                           uint32_t* dst) {
  const int64_t valid = std::min(width, rows - first), pairs = (k + 1) / 2;
  for (int64_t q = 0; q < pairs; ++q) {
    uint32_t* out = dst + q * width;
    for (int64_t i = 0; i < valid; ++i) {
      const uint32_t lo = src[first + i + 2 * q * step];
      const uint32_t hi = 2 * q + 1 < k ? src[first + i + (2 * q + 1) * step] : 0u;
      out[i] = lo | (hi << 16);
    }
    for (int64_t i = valid; i < width; ++i) out[i] = 0u;
  }
}

float ftz(float x) { return std::fabs(x) < 1.17549435e-38f ? std::copysign(0.0f, x) : x; }

// acc + a * b rounded once, flushed as VDPBF16PS flushes: a sum whose rounding to float's 24 bits
// with an unbounded exponent is below the smallest normal is a zero of its sign. Rounding into the
// denormal range first would differ just below the boundary (a sum within 2^-150 of 2^-126 rounds
// up to it there; the instruction gives 0): such sums are recomputed scaled by 2^64, which is
// exact because a nonzero sum that small needs |acc|, |a * b| < 2^-99 (their last bits are below
// 2^-124), so the smaller factor is under 2^-49. FMA: the CPU's instruction or the C library's.
template <bool kFmaInstruction>
inline float fma_flushed(float a, float b, float acc) {
  const auto fused = [](float x, float y, float z) {
    if constexpr (kFmaInstruction) {
      return __builtin_fmaf(x, y, z);
    } else {
      return std::fma(x, y, z);
    }
  };
  const float r = fused(a, b, acc);
  if (r == 0.0f || std::fabs(r) >= 0x1p-125f) return r;
  const float s = std::fabs(a) <= std::fabs(b) ? fused(a * 0x1p64f, b, acc * 0x1p64f) : fused(a, b * 0x1p64f, acc * 0x1p64f);
  return std::fabs(s) < 0x1p-62f ? std::copysign(0.0f, s) : s * 0x1p-64f;
}

// The contract's chain for one tile, element by element. FMA: the fused multiply-add of the CPU
// (target "fma") or the C library's (exact either way).
template <bool kFmaInstruction>
inline void tile_chain(int64_t pairs, const uint32_t* ap, const uint32_t* bp, bool accumulate, float* c, int64_t ldc,
                       int64_t rows, int64_t cols) {
  for (int64_t j = 0; j < cols; ++j) {
    for (int64_t i = 0; i < rows; ++i) {
      float acc = accumulate ? ftz(c[j * ldc + i]) : 0.0f;
      for (int64_t q = 0; q < pairs; ++q) {
        const uint32_t a = ap[q * kPanel + i], b = bp[q * kNr + j];
        const float a1 = float_of(a & 0xffff0000u), b1 = float_of(b & 0xffff0000u);
        const float a0 = float_of(a << 16), b0 = float_of(b << 16);
        acc = fma_flushed<kFmaInstruction>(a1, b1, acc);
        acc = fma_flushed<kFmaInstruction>(a0, b0, acc);
      }
      c[j * ldc + i] = acc;
    }
  }
}

void tile_emulated_libm(int64_t pairs, const uint32_t* ap, const uint32_t* bp, bool accumulate, float* c, int64_t ldc,
                        int64_t rows, int64_t cols) {
  tile_chain<false>(pairs, ap, bp, accumulate, c, ldc, rows, cols);
}

#if defined(__x86_64__)
__attribute__((target("fma"))) void tile_emulated_fma(int64_t pairs, const uint32_t* ap, const uint32_t* bp,
                                                      bool accumulate, float* c, int64_t ldc, int64_t rows,
                                                      int64_t cols) {
  tile_chain<true>(pairs, ap, bp, accumulate, c, ldc, rows, cols);
}

#define PSTRAIN_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))

// 16 pairs from 16 floats of each row: lane i = round(lo[i]) | round(hi[i]) << 16. VCVTNE2PS2BF16
// rounds as round_bits does (to nearest even, denormals to signed zeros, NaNs quieted: checked on
// 4 million random bit patterns, and by bf16_product_test's native-against-emulated cases).
PSTRAIN_BF16_TARGET inline __m512i round_pairs(__m512 lo, __m512 hi) {
  const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);  // lo's 16 values, then hi's
  const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22,
                                              6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(interleave, both);
}

// 16 pairs of one k pair's lines from entry i on: lane j = lo[i + j] | hi[i + j] << 16 (hi null:
// zeros), `here` entries valid (masked loads, zeros past them) unless `whole`. From float32 lines
// rounded (round_pairs); from lines already rounded (RoundedRows) only interleaved.
PSTRAIN_BF16_TARGET inline __m512i line_pairs(const float* lo, const float* hi, int64_t i, bool whole, int64_t here) {
  const auto mask = static_cast<__mmask16>((uint32_t{1} << here) - 1u);
  const __m512 l = whole ? _mm512_loadu_ps(lo + i) : _mm512_maskz_loadu_ps(mask, lo + i);
  __m512 h = _mm512_setzero_ps();
  if (hi != nullptr) h = whole ? _mm512_loadu_ps(hi + i) : _mm512_maskz_loadu_ps(mask, hi + i);
  return round_pairs(l, h);  // lanes past `here` loaded zeros, whose rounding is zero
}
PSTRAIN_BF16_TARGET inline __m256i rounded_line(const uint16_t* line, bool whole, int64_t here) {
  const auto mask = static_cast<__mmask32>((uint32_t{1} << here) - 1u);
  return whole ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(line))
               : _mm512_castsi512_si256(_mm512_maskz_loadu_epi16(mask, line));
}
PSTRAIN_BF16_TARGET inline __m512i line_pairs(const uint16_t* lo, const uint16_t* hi, int64_t i, bool whole,
                                              int64_t here) {
  const __m256i l = rounded_line(lo + i, whole, here);
  const __m256i h = hi != nullptr ? rounded_line(hi + i, whole, here) : _mm256_setzero_si256();
  return _mm512_or_si512(_mm512_cvtepu16_epi32(l), _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// pack_portable of `panels` consecutive panels of `width` rows from `first` on, panel p at
// dst + p * pairs * width, for operands whose rows are adjacent (row == 1: entry (i, p) at
// src[i + p * step]; float32, or already rounded). Each of k's lines is read as one contiguous run
// over all the panels (a few hundred values), which the hardware prefetchers follow, and the pairs
// are spread to the panels from `line` (panels * width + kLanes pairs of scratch).
template <typename T>
PSTRAIN_BF16_TARGET void pack_adjacent_rows(const T* src, int64_t step, int64_t rows, int64_t k, int64_t first,
                                            int64_t width, int64_t panels, uint32_t* dst, uint32_t* line) {
  const int64_t span = panels * width, valid = std::min(span, rows - first), pairs = (k + 1) / 2;
  for (int64_t q = 0; q < pairs; ++q) {
    const T* lo_line = src + 2 * q * step + first;
    const T* hi_line = 2 * q + 1 < k ? src + (2 * q + 1) * step + first : nullptr;
    for (int64_t i = 0; i < span; i += kLanes) {
      const int64_t here = std::max<int64_t>(0, std::min(kLanes, valid - i));
      // Whole-vector loads where the operand has 16 more rows (masked ones are slow on Zen 4);
      // the lanes past the panels are scratch.
      const bool whole = first + i + kLanes <= rows;
      _mm512_storeu_si512(line + i, line_pairs(lo_line, hi_line, i, whole, here));
    }
    for (int64_t p = 0; p < panels; ++p) {
      std::memcpy(dst + (p * pairs + q) * width, line + p * width, static_cast<size_t>(width) * sizeof(uint32_t));
    }
  }
}

PSTRAIN_BF16_TARGET void tile_native(int64_t pairs, const uint32_t* ap, const uint32_t* bp, bool accumulate,
                                     float* c, int64_t ldc, int64_t rows, int64_t cols) {
  __m512 acc[kMr][kNr];
  __mmask16 row_mask[kMr];
  for (int r = 0; r < kMr; ++r) {
    const int64_t here = std::max<int64_t>(0, std::min(kLanes, rows - r * kLanes));
    row_mask[r] = static_cast<__mmask16>((uint32_t{1} << here) - 1u);
  }
  for (int j = 0; j < kNr; ++j) {
    for (int r = 0; r < kMr; ++r) {
      // VDPBF16PS reads a denormal accumulator as zero, as the contract's start does.
      acc[r][j] = accumulate && j < cols ? _mm512_maskz_loadu_ps(row_mask[r], c + j * ldc + r * kLanes)
                                         : _mm512_setzero_ps();
    }
  }
  for (int64_t q = 0; q < pairs; ++q) {
    __m512bh a[kMr];
    for (int r = 0; r < kMr; ++r) a[r] = (__m512bh)_mm512_loadu_si512(ap + q * kPanel + r * kLanes);
    const uint32_t* b = bp + q * kNr;
    for (int j = 0; j < kNr; ++j) {
      const __m512bh bj = (__m512bh)_mm512_set1_epi32(static_cast<int>(b[j]));
      for (int r = 0; r < kMr; ++r) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], a[r], bj);
    }
  }
  for (int64_t j = 0; j < cols; ++j) {
    for (int r = 0; r < kMr; ++r) {
      // Plain stores for whole vectors: masked ones are slower on some CPUs (Zen 4).
      if (row_mask[r] == 0xffff) {
        _mm512_storeu_ps(c + j * ldc + r * kLanes, acc[r][j]);
      } else {
        _mm512_mask_storeu_ps(c + j * ldc + r * kLanes, row_mask[r], acc[r][j]);
      }
    }
  }
}

bool cpu_has_avx512_bf16() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d) == 0) return false;
  return (a & (1u << 5)) != 0;  // CPUID.(EAX=7, ECX=1):EAX[5], AVX512_BF16
}
#endif

using Tile = void (*)(int64_t, const uint32_t*, const uint32_t*, bool, float*, int64_t, int64_t, int64_t);

#if defined(__x86_64__)
constexpr bool kNativeBuild = true;  // this build has the native packing (and the instruction's path)
#else
constexpr bool kNativeBuild = false;
#endif

// pack_adjacent_rows with the calling thread's scratch line.
template <typename T>
void pack_adjacent_panels(const T* data, int64_t step, int64_t rows, int64_t k, int64_t panel, int64_t panels,
                          int64_t width, uint32_t* dst) {
#if defined(__x86_64__)
  thread_local std::vector<uint32_t, CacheAlignedAllocator<uint32_t>> line;
  const auto need = static_cast<size_t>(panels * width + kLanes);
  if (line.size() < need) line.resize(need);
  pack_adjacent_rows(data, step, rows, k, panel * width, width, panels, dst, line.data());
#else
  (void)data, (void)step, (void)rows, (void)k, (void)panel, (void)panels, (void)width, (void)dst;
#endif
}

// Panels [panel, panel + panels) of an operand, each `width` rows, panel p at dst + p * pairs * width.
void pack_panels(Operand o, int64_t rows, int64_t k, int64_t panel, int64_t panels, int64_t width, uint32_t* dst,
                 bool native) {
  if (kNativeBuild && native && o.row == 1) return pack_adjacent_panels(o.data, o.step, rows, k, panel, panels, width, dst);
  const int64_t pairs = (k + 1) / 2;
  for (int64_t p = 0; p < panels; ++p) {
    pack_portable(o.data, o.row, o.step, rows, k, (panel + p) * width, width, dst + p * pairs * width);
  }
}
void pack_panels(RoundedRows o, int64_t rows, int64_t k, int64_t panel, int64_t panels, int64_t width, uint32_t* dst,
                 bool native) {
  if (kNativeBuild && native) return pack_adjacent_panels(o.data, o.step, rows, k, panel, panels, width, dst);
  const int64_t pairs = (k + 1) / 2;
  for (int64_t p = 0; p < panels; ++p) {
    pack_portable_rounded(o.data, o.step, rows, k, (panel + p) * width, width, dst + p * pairs * width);
  }
}

Operand columns_from(Operand b, int64_t first) { return {b.data + first * b.row, b.row, b.step}; }
RoundedRows columns_from(RoundedRows b, int64_t first) { return {b.data + first, b.step}; }

Tile pick_tile(bool native) {
#if defined(__x86_64__)
  if (native) return tile_native;
  static const bool fma = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("fma") != 0;
  }();
  return fma ? tile_emulated_fma : tile_emulated_libm;
#else
  (void)native;
  return tile_emulated_libm;
#endif
}

template <typename B>
void product_on_this_thread(int64_t m, int64_t n, int64_t k, Operand a, B b, bool accumulate, float* c, int64_t ldc,
                            bool native) {
  thread_local std::vector<uint32_t, CacheAlignedAllocator<uint32_t>> scratch;
  const int64_t pairs = (k + 1) / 2;
  const int64_t a_panels = round_up(m, kPanel) / kPanel, b_panels = round_up(n, kNr) / kNr;
  const bool a_whole = a_panels * kPanel <= b_panels * kNr;  // the smaller operand packed whole
  const auto need = static_cast<size_t>((a_whole ? a_panels * kPanel + kBlock * kNr : b_panels * kNr + kPanel) * pairs);
  if (scratch.size() < need) scratch.resize(need);
  const Tile tile = pick_tile(native);
  const auto run = [&](int64_t i, const uint32_t* ap, int64_t j, const uint32_t* bp) {
    tile(pairs, ap, bp, accumulate, c + j * kNr * ldc + i * kPanel, ldc, std::min(kPanel, m - i * kPanel),
         std::min(kNr, n - j * kNr));
  };
  if (a_whole) {
    // A whole, B in blocks of kBlock panels (the block's lines read as runs of kBlock * kNr floats).
    uint32_t* packed_a = scratch.data();
    uint32_t* packed_b = packed_a + a_panels * kPanel * pairs;
    pack_panels(a, m, k, 0, a_panels, kPanel, packed_a, native);
    for (int64_t j0 = 0; j0 < b_panels; j0 += kBlock) {
      const int64_t block = std::min(kBlock, b_panels - j0);
      pack_panels(b, n, k, j0, block, kNr, packed_b, native);
      for (int64_t j = 0; j < block; ++j) {
        for (int64_t i = 0; i < a_panels; ++i) run(i, packed_a + i * kPanel * pairs, j0 + j, packed_b + j * kNr * pairs);
      }
    }
  } else {
    uint32_t* packed_b = scratch.data();
    uint32_t* packed_a = packed_b + b_panels * kNr * pairs;
    pack_panels(b, n, k, 0, b_panels, kNr, packed_b, native);
    for (int64_t i = 0; i < a_panels; ++i) {
      pack_panels(a, m, k, i, 1, kPanel, packed_a, native);
      for (int64_t j = 0; j < b_panels; ++j) run(i, packed_a, j, packed_b + j * kNr * pairs);
    }
  }
}

// round_to_pair_blocks' rows [row, row + 32) of column block `nb` (B columns from nb * B), for
// adjacent-row operands of round_to_pair_blocks; `hi`/`lo` rows past k are zeros.
#if defined(__x86_64__)
// `here` values of v rounded into out: a whole vector as it is, the block's last columns one by one.
PSTRAIN_BF16_TARGET void plain_values(__m512 v, int64_t here, uint16_t* out) {
  const __m256i h = (__m256i)_mm512_cvtneps_pbh(v);
  if (here == kLanes) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), h);
  } else {
    alignas(32) uint16_t lanes[kLanes];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), h);
    std::memcpy(out, lanes, static_cast<size_t>(here) * sizeof(uint16_t));
  }
}

PSTRAIN_BF16_TARGET void round_pair_block_native(const float* src, int64_t k, int64_t n, int64_t ld, int64_t row,
                                                 int64_t first, int64_t block, uint32_t* dst, uint16_t* plain) {
  const int64_t valid = std::min(block, n - first);
  for (int64_t q = 0; q < 16; ++q) {
    const int64_t r = row + 2 * q;
    for (int64_t i = 0; i < block; i += kLanes) {
      const int64_t here = std::max<int64_t>(0, std::min(kLanes, valid - i));
      const auto mask = static_cast<__mmask16>((uint32_t{1} << here) - 1u);
      const bool whole = here == kLanes;
      __m512 lo = _mm512_setzero_ps(), hi = _mm512_setzero_ps();
      if (r < k) {
        const float* line = src + r * ld + first + i;
        lo = whole ? _mm512_loadu_ps(line) : _mm512_maskz_loadu_ps(mask, line);
        if (plain != nullptr && here > 0) plain_values(lo, here, plain + r * n + first + i);
      }
      if (r + 1 < k) {
        const float* line = src + (r + 1) * ld + first + i;
        hi = whole ? _mm512_loadu_ps(line) : _mm512_maskz_loadu_ps(mask, line);
        if (plain != nullptr && here > 0) plain_values(hi, here, plain + (r + 1) * n + first + i);
      }
      _mm512_storeu_si512(dst + q * block + i, round_pairs(lo, hi));
    }
  }
}
#endif

void round_pair_block_portable(const float* src, int64_t k, int64_t n, int64_t ld, int64_t row, int64_t first,
                               int64_t block, uint32_t* dst, uint16_t* plain) {
  for (int64_t q = 0; q < 16; ++q) {
    const int64_t r = row + 2 * q;
    for (int64_t i = 0; i < block; ++i) {
      const int64_t col = first + i;
      const uint32_t lo = r < k && col < n ? round_bits(bits_of(src[r * ld + col])) : 0u;
      const uint32_t hi = r + 1 < k && col < n ? round_bits(bits_of(src[(r + 1) * ld + col])) : 0u;
      dst[q * block + i] = lo | (hi << 16);
      if (plain != nullptr && col < n) {
        if (r < k) plain[r * n + col] = static_cast<uint16_t>(lo);
        if (r + 1 < k) plain[(r + 1) * n + col] = static_cast<uint16_t>(hi);
      }
    }
  }
}

}  // namespace

void round_to_pair_blocks(const float* src, int64_t k, int64_t n, int64_t ld, int64_t block_columns, void* dst,
                          uint16_t* plain) {
  const int64_t row_blocks = round_up(k, 32) / 32, column_blocks = round_up(n, block_columns) / block_columns;
  const bool native = bf16_product_native();
  // Row blocks outermost: each reads its 32 rows whole, one column block after another.
  for (int64_t kb = 0; kb < row_blocks; ++kb) {
    for (int64_t nb = 0; nb < column_blocks; ++nb) {
      // 32 x B values, as 16 x B pairs (uint32: a little-endian pair is the two bfloat16 in order).
      uint32_t* out = static_cast<uint32_t*>(dst) + (nb * row_blocks + kb) * 16 * block_columns;
#if defined(__x86_64__)
      if (native && block_columns % kLanes == 0) {
        round_pair_block_native(src, k, n, ld, kb * 32, nb * block_columns, block_columns, out, plain);
        continue;
      }
#endif
      round_pair_block_portable(src, k, n, ld, kb * 32, nb * block_columns, block_columns, out, plain);
    }
  }
}

uint16_t bf16_round(float value) { return static_cast<uint16_t>(round_bits(bits_of(value))); }

bool bf16_product_native() {
#if defined(__x86_64__)
  static const bool native = cpu_has_avx512_bf16() && active_target() == CpuTarget::kX86_64_V4;
  return native;
#else
  return false;
#endif
}

namespace {

template <typename B>
void product_bf16_of(int64_t m, int64_t n, int64_t k, Operand a, B b, bool accumulate, float* c, int64_t ldc, int threads,
                     bool emulated) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t i = 0; i < m; ++i) c[j * ldc + i] = accumulate ? ftz(c[j * ldc + i]) : 0.0f;
    }
    return;
  }
  const bool native = !emulated && bf16_product_native();
  const int64_t tiles = (n + kNr - 1) / kNr;
  if (threads <= 1 || tiles < 2 || m * n * k < (int64_t{1} << 20)) {
    product_on_this_thread(m, n, k, a, b, accumulate, c, ldc, native);
    return;
  }
  const int parts = static_cast<int>(std::min<int64_t>(threads, tiles));
#pragma omp parallel for num_threads(parts) schedule(static, 1)
  for (int t = 0; t < parts; ++t) {
    const int64_t first = tiles * t / parts * kNr, last = std::min(n, tiles * (t + 1) / parts * kNr);
    if (last <= first) continue;
    product_on_this_thread(m, last - first, k, a, columns_from(b, first), accumulate, c + first * ldc, ldc, native);
  }
}

}  // namespace

void product_bf16(int64_t m, int64_t n, int64_t k, Operand a, Operand b, bool accumulate, float* c, int64_t ldc,
                  int threads, bool emulated) {
  product_bf16_of(m, n, k, a, b, accumulate, c, ldc, threads, emulated);
}

void product_bf16(int64_t m, int64_t n, int64_t k, Operand a, RoundedRows b, bool accumulate, float* c, int64_t ldc,
                  int threads, bool emulated) {
  product_bf16_of(m, n, k, a, b, accumulate, c, ldc, threads, emulated);
}

}  // namespace pstrain::simd
