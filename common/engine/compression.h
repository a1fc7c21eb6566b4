// Gradient compression codecs (spec `training.compression`, job_spec.h CompressionSpec): pure
// functions over buffers, no RPC. The worker encodes its pushes and decodes fp16 and bfloat16
// replies (worker/server_chunks.cc); the parameter server decodes pushes into float32 and encodes
// those replies (server/parameter_server.cc). Servers always sum and store float32.
//
// - fp16: IEEE 754 binary16, round to nearest even (overflow to infinity, subnormals kept, NaN
//   stays NaN), little-endian on the wire. Exact for every value a half can hold.
// - bf16: bfloat16 (float32's sign, exponent and top 7 mantissa bits), round to nearest even
//   (float32's range: only values within half a bfloat16 ulp of float32's largest round up to
//   infinity; NaN stays a quiet NaN, its sign and
//   top payload bits kept), little-endian on the wire. Exact for every value a bfloat16 holds.
// - topk with error feedback: residual += gradient; the k entries of largest |residual| (ties:
//   the lower index; NaN counts as largest) are sent as (index, value) pairs in ascending index
//   order and zeroed in the residual; the rest waits for the next step. Deterministic: the same
//   inputs give the same selection.
// - powersgd (Vogels et al., NeurIPS 2019) with error feedback: a chunk of whole rows of a
//   matrix, M (rows x columns, row-major) = gradient + residual, goes as two factors of rank r:
//   P = M Q (Q warm-started: the previous step's), P's columns orthonormalized (Gram-Schmidt),
//   Q = M^T P; the receiver adds P Q^T, and the residual becomes M - P Q^T. Loops in a fixed
//   order (dot products in fixed lanes, so they vectorize without reassociation), so the same
//   inputs give the same bits with the same binary; worker and server reconstruct with the same
//   function.
//
// Thread rules: none (no state; callers own every buffer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace pstrain {

uint16_t float_to_half(float value) noexcept;
float half_to_float(uint16_t half) noexcept;

// `out` holds values.size() halves (2 bytes each; any alignment), little-endian. Vectorized where
// the CPU has F16C (the level's simd kernels), the same halves as float_to_half either way.
void encode_half(std::span<const float> values, unsigned char* out);
// `in` holds out.size() halves.
void decode_half(const unsigned char* in, std::span<float> out);

uint16_t float_to_bfloat16(float value);
float bfloat16_to_float(uint16_t value);
// `out` holds values.size() bfloat16 values (2 bytes each; any alignment), little-endian.
void encode_bfloat16(std::span<const float> values, unsigned char* out);
// `in` holds out.size() bfloat16 values (exact; the level's simd kernel).
void decode_bfloat16(const unsigned char* in, std::span<float> out);
// Mixed precision's rounding (bf16_round, common/engine/simd/bf16_product.h: a denormal becomes a
// zero of its sign, where encode_bfloat16 keeps it), for the values a server replies in bfloat16
// (PushParams.replyBfloat16); the level's simd kernel. Decoded by decode_bfloat16.
void encode_rounded_bfloat16(std::span<const float> values, unsigned char* out);

// Entries a topk push of `fraction` sends for a chunk of `n`: ceil(fraction * n), at least 1
// (when n > 0) and at most n.
size_t topk_count(size_t n, float fraction);

// Error-feedback top-k of one chunk: adds `gradient` into `residual` (same size), then writes the
// k = indices.size() (<= size) entries of largest magnitude to `indices` (ascending) and `values`
// (same size as indices) and zeroes them in `residual`. `scratch` is reused between calls.
// O(size): one nth_element over the magnitudes and two passes.
void topk_with_feedback(std::span<const float> gradient, std::span<float> residual, std::span<uint32_t> indices,
                        std::span<float> values, std::vector<float>& scratch);

// The largest rank a powersgd push may have (the spec's limit; the server's check).
inline constexpr size_t kMaxPowerSgdRank = 64;

// PowerSGD. Factors are row-major: P is rows x rank (p[i * rank + j]); Q is kept transposed,
// rank x columns (q[j * columns + c]: Q's column j is a row of it, contiguous).

// The rank a chunk of rows x columns is sent at with the spec's `rank`: min(rank, rows, columns),
// or 0 when the factors would not be smaller than the chunk ((rows + columns) * r >= rows *
// columns): then the chunk goes dense.
size_t powersgd_rank(size_t rows, size_t columns, uint32_t rank);

// The first Q of a chunk (rank x columns), uniform in [-1, 1) from `seed`: every run of a job
// starts from the same factors.
void powersgd_initial_q(uint64_t seed, std::span<float> q);

// Gram-Schmidt (modified) on the columns of p (rows x rank, row-major), in place: orthonormal
// columns, each made orthogonal to the ones before it. A column that is (numerically) in the span
// of the ones before it, or zero, becomes exactly zero.
void orthogonalize_columns(std::span<float> p, size_t rows, size_t rank);

// out = P Q^T (rows x columns): what a powersgd push stands for (written, not added).
void low_rank_product(std::span<const float> p, std::span<const float> q, size_t rows, size_t columns, size_t rank,
                      std::span<float> out);

// One PowerSGD step of one chunk with error feedback: M = gradient + residual (rows x columns);
// p_out = orthonormalized M q; q_out = M^T p_out; residual = M - p_out q_out^T. `q` holds the
// warm start (rank x columns) and becomes the next step's: q_out, except where a column of p_out
// is zero (that column of q is kept: a zero column would stay zero forever). `scratch` is reused.
void powersgd_with_feedback(std::span<const float> gradient, std::span<float> residual, size_t rows, size_t columns,
                            size_t rank, std::span<float> q, std::span<float> p_out, std::span<float> q_out,
                            std::vector<float>& scratch);

}  // namespace pstrain
