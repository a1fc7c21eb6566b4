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
// kCellKernel, kRecurrentKernel, kCellBias: a recurrent layer's (nn/recurrent.h) kernel (Glorot
// uniform), recurrent_kernel (orthogonal, Keras' default) and bias (zeros; an LSTM's forget gate
// ones, Keras' unit_forget_bias: fan_in holds its units then).
enum class ParamRole { kKernel, kBias, kGamma, kBeta, kMovingMean, kMovingVariance, kEmbeddings, kCellKernel, kRecurrentKernel, kCellBias };

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
  // A sparse embedding table (docs/DESIGN-NOTES.md "Sparse models"): laid out after every dense
  // tensor; a step reads and updates only its touched rows, and its initial rows are each a
  // function of (seed, tensor, row), so that any part of it can be made without the rest.
  bool sparse = false;
};

class ParamLayout {
 public:
  // Every tensor starts on a multiple of this many floats (64 bytes): tensors and the chunks cut
  // from them are word-aligned, which Cap'n Proto needs to send a slice of a buffer without
  // copying it, and cache-line aligned for the math. The padding between tensors stays zero.
  static constexpr size_t kAlignment = 16;

  // Appends a tensor after the existing ones.
  void add(ParamInfo info);

  // Marks the end of the dense tensors: the ones added after are sparse tables.
  void end_dense() { dense_size_ = total_size_; dense_count_ = params_.size(); }

  const std::vector<ParamInfo>& params() const { return params_; }
  size_t total_size() const { return total_size_; }
  // Floats before the first sparse table (total_size() when there is none), and the tensors there.
  size_t dense_size() const { return dense_count_ == kAll ? total_size_ : dense_size_; }
  size_t dense_count() const { return dense_count_ == kAll ? params_.size() : dense_count_; }
  bool has_sparse() const { return dense_count() < params_.size(); }
  // nullptr if there is no such tensor.
  const ParamInfo* find(const std::string& name) const;

 private:
  static constexpr size_t kAll = static_cast<size_t>(-1);
  std::vector<ParamInfo> params_;
  size_t total_size_ = 0;
  size_t dense_size_ = 0, dense_count_ = kAll;  // kAll until end_dense()
};

// Glorot-uniform kernels, zero biases and betas, unit gammas, from `seed`. Each tensor draws from its own stream
// (seeded by seed and its position), so adding a layer does not change the others' values. A
// sparse table's rows each draw from their own stream (sparse_row_init).
void glorot_uniform_init(const ParamLayout& layout, uint64_t seed, float* params);
// The same for the dense tensors only: params' first layout.dense_size() values (a server holds
// its tables' pieces apart from them).
void dense_glorot_uniform_init(const ParamLayout& layout, uint64_t seed, float* params);
// Rows first, first + stride, ... (`count` of them, back to back in `rows`) of sparse table
// `param` (an index into layout.params()), as glorot_uniform_init makes them: uniform in
// [-0.05, 0.05) from a stream of (seed, param, row), so a server makes its piece alone.
void sparse_row_init(const ParamLayout& layout, uint64_t seed, size_t param, int64_t first, int64_t count, float* rows,
                     int64_t stride = 1);

}  // namespace pstrain
