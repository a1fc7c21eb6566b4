// Gradient compression codecs (spec `training.compression`, job_spec.h CompressionSpec): pure
// functions over buffers, no RPC. The worker encodes its pushes and decodes fp16 replies
// (worker/server_chunks.cc); the parameter server decodes pushes into float32 and encodes fp16
// replies (server/parameter_server.cc). Servers always sum and store float32.
//
// - fp16: IEEE 754 binary16, round to nearest even (overflow to infinity, subnormals kept, NaN
//   stays NaN), little-endian on the wire. Exact for every value a half can hold.
// - topk with error feedback: residual += gradient; the k entries of largest |residual| (ties:
//   the lower index; NaN counts as largest) are sent as (index, value) pairs in ascending index
//   order and zeroed in the residual; the rest waits for the next step. Deterministic: the same
//   inputs give the same selection.
//
// Thread rules: none (no state; callers own every buffer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace pstrain {

uint16_t float_to_half(float value);
float half_to_float(uint16_t half);

// `out` holds values.size() halves (2 bytes each; any alignment), little-endian.
void encode_half(std::span<const float> values, unsigned char* out);
// `in` holds out.size() halves.
void decode_half(const unsigned char* in, std::span<float> out);

// Entries a topk push of `fraction` sends for a chunk of `n`: ceil(fraction * n), at least 1
// (when n > 0) and at most n.
size_t topk_count(size_t n, float fraction);

// Error-feedback top-k of one chunk: adds `gradient` into `residual` (same size), then writes the
// k = indices.size() (<= size) entries of largest magnitude to `indices` (ascending) and `values`
// (same size as indices) and zeroes them in `residual`. `scratch` is reused between calls.
// O(size): one nth_element over the magnitudes and two passes.
void topk_with_feedback(std::span<const float> gradient, std::span<float> residual, std::span<uint32_t> indices,
                        std::span<float> values, std::vector<float>& scratch);

}  // namespace pstrain
