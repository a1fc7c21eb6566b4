// Where each named parameter tensor lives inside one flat float buffer.
//
// Parameters, gradients and optimizer slots of a model are each one contiguous float buffer; the
// layout says which slice belongs to which tensor. Flat buffers make shipping, chunking across
// servers, optimizer loops and backups all simple loops over memory.
//
// Thread rules: a ParamLayout is an immutable value once built.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace pstrain {

using Shape = std::vector<int64_t>;

int64_t num_elements(const Shape& shape);
std::string shape_string(const Shape& shape);  // "[784, 700]"

// kGamma and kMovingVariance start at 1, kBias, kBeta and kMovingMean at 0, kernels
// Glorot-uniform, embeddings uniform in [-0.05, 0.05). The moving statistics are set as moving
// averages, never by an optimizer (common/engine/nn/moving_statistics.h).
enum class ParamRole { kKernel, kBias, kGamma, kBeta, kMovingMean, kMovingVariance, kEmbeddings };

struct ParamInfo {
  std::string name;   // "layers.1.kernel": the spec's layer index and the role
  Shape shape;        // TensorFlow's convention: dense [in, out], conv2d [kh, kw, cin, cout]
  ParamRole role = ParamRole::kKernel;
  size_t offset = 0;  // in floats, inside the flat buffer
  size_t size = 0;    // num_elements(shape)
  float l2 = 0.0f;    // L2 regularisation factor: loss += l2 * sum(w^2)
  int layer_index = 0;
  // Glorot-uniform fan-in / fan-out for kernels (ignored for biases, which start at zero).
  int64_t fan_in = 0, fan_out = 0;
};

class ParamLayout {
 public:
  // Every tensor starts on a multiple of this many floats (64 bytes): tensors and the chunks cut
  // from them are word-aligned, which Cap'n Proto needs to send a slice of a buffer without
  // copying it, and cache-line aligned for the math. The padding between tensors stays zero.
  static constexpr size_t kAlignment = 16;

  // Appends a tensor after the existing ones.
  void add(ParamInfo info);

  const std::vector<ParamInfo>& params() const { return params_; }
  size_t total_size() const { return total_size_; }
  // nullptr if there is no such tensor.
  const ParamInfo* find(const std::string& name) const;

 private:
  std::vector<ParamInfo> params_;
  size_t total_size_ = 0;
};

// Glorot-uniform kernels, zero biases and betas, unit gammas, from `seed`. Each tensor draws from its own stream
// (seeded by seed and its position), so adding a layer does not change the others' values.
void glorot_uniform_init(const ParamLayout& layout, uint64_t seed, float* params);

}  // namespace pstrain
