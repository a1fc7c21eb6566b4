// The layers of the engine: dense, conv2d, maxpool2d, avgpool2d and relu. Flatten and reshape need no code:
// in the column-per-example layout they only rename the shape (see matrix.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/base/aligned.h"
#include "common/engine/nn/layer.h"
#include "common/engine/nn/onednn_conv.h"
#include "common/engine/nn/onednn_matmul.h"

namespace pstrain::nn {

// y = W^T x + b, optionally followed by ReLU (fused: the mask is applied in place).
//
// Sparse inputs: a dense layer that reads the model's input (`data_input`) skips the features
// that are zero in every example of the batch (MNIST: about a third of the pixels in a batch of
// 64). Forward multiplies by the other features' kernel rows only; backward computes only their
// rows of the kernel gradient and sets the others to zero. Smaller products, the same values
// (up to the order of additions).
//
// Row groups (row_groups.h): a data-input layer can compute its pre-activation as one partial
// product per group of kernel rows (the rows each parameter server holds), added in group order,
// and take some of those partials ready-made (computed by the servers) for one forward.
//
// Factored kernel gradient: with compute_kernel_gradient(false), backward leaves the kernel's
// gradient unwritten. The caller takes it as the product of two factors instead, the layer's
// input and its masked output gradient (Model::kernel_factors): a worker ships those, which are
// smaller than the kernel, and the parameter server multiplies them out.
//
// Products: Dense<float>'s forward and input gradient are oneDNN's float32 matmul where
// onednn_matmul_preferred() (AVX-512 and up), else BLAS's (and the double engine's always). Mixed precision
// (use_bf16, float only) makes them oneDNN's bfloat16 matmul where onednn_bf16()
// (onednn_matmul.h), and the kernel gradient simd::product_bf16 (float32's is simd::product: both
// fixed-order, so a server multiplying out factors gets the same bits; bf16_products() tells the
// worker which to ask for). The sparse-input and row-group forwards (the products a server may
// compute for it) stay float32 and BLAS's.
template <typename T>
class Dense final : public Layer<T> {
 public:
  Dense(int64_t in, int64_t out, bool relu, size_t kernel_offset, size_t bias_offset, bool data_input = false);
  ~Dense() override;
  void forward(const T* params, ConstMatMap<T> in, MatMap<T> out) override;
  void backward(const T* params, ConstMatMap<T> in, ConstMatMap<T> out, MatMap<T> dout, T* grads,
                T* din) override;
  void compute_kernel_gradient(bool on) { kernel_gradient_ = on; }
  // group_of_row: the group (< groups) of each kernel row; empty: one plain product.
  void set_row_groups(std::vector<uint32_t> group_of_row, uint32_t groups);
  bool has_row_groups() const { return groups_ > 0; }
  // The next forward (only) takes group g's partial product from partials[g] (out x batch,
  // 64-byte aligned) where it is not null, and computes the others.
  void use_partials(std::vector<const T*> partials) { partials_ = std::move(partials); }
  // Switches the products to bfloat16 (above); T = float and onednn_bf16() only. Call it between
  // steps. Returns false when they already were.
  bool use_bf16();
  // Whether the products are bfloat16 (the kernel gradient simd::product_bf16).
  bool bf16_products() const { return matmul_bf16_; }
  // Whether this layer reads the data (its forward may skip zero features, or take row groups).
  bool data_input() const { return data_input_; }

 private:
  // The batch's nonzero features, ascending, into active_.
  void mark_active_features(ConstMatMap<T> in);
  // out = b + P_0 + P_1 + ... (row_groups.h).
  void grouped_forward(const T* params, ConstMatMap<T> in, MatMap<T> out);
  // Finds the batch's nonzero features (active_) and gathers their inputs (active_in_, k x batch);
  // false when too few features are zero for skipping them to pay.
  bool gather_active_features(ConstMatMap<T> in);
  // out += W^T x over the active features only.
  void sparse_product(const T* kernel, int64_t batch, T* out);
  // The kernel gradient of the active features' rows, zero in the others.
  void sparse_kernel_gradient(const T* dout, int64_t batch, T* kernel_grads);

  int64_t in_, out_;
  bool relu_, data_input_;
  bool kernel_gradient_ = true;
  size_t kernel_, bias_;
  // Scratch of the sparse paths: the active features, their inputs, and a [out x k] matrix (the
  // gathered kernel rows in forward, their gradient in backward).
  std::vector<int64_t> active_;
  std::vector<T, CacheAlignedAllocator<T>> active_in_, active_rows_;  // aligned: see aligned.h
  std::vector<uint32_t> group_of_row_;
  uint32_t groups_ = 0;
  std::vector<const T*> partials_;
  std::vector<int64_t> group_active_;      // scratch of grouped_forward: one group's active rows
  std::vector<const T*> group_rows_;       // their kernel rows
  std::vector<T, CacheAlignedAllocator<T>> group_in_, partial_;  // their inputs, the group's product
  // The forward's and input gradient's oneDNN products (null: BLAS's), made at the first forward;
  // matmul_bf16_ when they are mixed precision's.
  std::unique_ptr<OneDnnMatmul> matmul_;
  bool matmul_bf16_ = false;
  OneDnnMatmul* matmul();
  // In bfloat16, `in` as the forward's matmul rounded it (OneDnnMatmul::rounded_input), else null.
  const uint16_t* rounded_input(ConstMatMap<T> in);
};

// 2-D convolution over [height, width, channels] examples. Strides and padding follow TensorFlow
// (model_spec.h's window_axis gives the output size and the padding before); padded positions
// read as zero and take no gradient. Three methods, the same values up to the order of additions:
//
// - one channel (float, every input with one channel and at most kOneChannelMaxTaps taps, not
//   dilated; any precision): simd::kernels().one_channel_conv on each example, padded into a
//   scratch image. A first layer on grayscale images; its order of additions is fixed
//   (kernels.h), so it is exact as the others. Mixed precision keeps it float32: its time is the
//   output's bytes, not its products (docs/DESIGN-NOTES.md, "One-channel convolutions").
// - oneDNN (float, the default where the build has it and the CPU has AVX2: onednn_conv.h): code
//   generated at run time for the CPU's instruction set; bias and ReLU fused into the forward.
// - im2col: the patches of the whole batch form one matrix and the convolution is one matrix
//   product (and the kernel gradient another). Stride 1 without padding keeps a copy loop of its
//   own, with no bounds to check. The double engine (gradient checks) and builds without oneDNN
//   use it.
template <typename T>
class Conv2D final : public Layer<T> {
 public:
  using Geometry = ConvGeometry;
  // kOneDnnBf16: oneDNN with the products in bfloat16 (mixed precision, onednn_conv.h), where
  // onednn_bf16().
  enum class Method { kIm2col, kOneDnn, kOneDnnBf16, kOneChannel };
  // oneDNN for float where onednn_preferred(), else im2col (the constructor prefers kOneChannel
  // where one_channel(g)).
  static Method default_method();
  // Whether kOneChannel can run g: float, one input channel, not dilated, few enough taps.
  static bool one_channel(const Geometry& g);

  // bias_offset kNoBias: a conv2d without a bias (use_bias false): it adds zeros, and its bias
  // gradient goes to scratch.
  static constexpr size_t kNoBias = SIZE_MAX;
  Conv2D(Geometry g, bool relu, size_t kernel_offset, size_t bias_offset, int64_t max_batch);
  ~Conv2D() override;
  void forward(const T* params, ConstMatMap<T> in, MatMap<T> out) override;
  void backward(const T* params, ConstMatMap<T> in, ConstMatMap<T> out, MatMap<T> dout, T* grads,
                T* din) override;
  // Overrides the constructor's choice (tests and pstrain-conv-bench compare the two). Call it
  // between steps, not between a forward and its backward. kOneDnn needs T = float and oneDNN.
  void set_method(Method m);
  Method method() const { return method_; }

 private:
  // The kernel columns [first, last) of output column x that fall inside the input.
  void inside_columns(int64_t x, int64_t& first, int64_t& last) const;
  void im2col_forward(const T* params, ConstMatMap<T> in, MatMap<T> out);
  void im2col_backward(const T* params, ConstMatMap<T> in, MatMap<T> dy, T* grads, T* din);
  // kOneChannel: example b's image into padded_ (zeros around it, as the kernels read it).
  const float* pad_example(const T* in, int64_t b);
  void one_channel_forward(const T* params, ConstMatMap<T> in, MatMap<T> out);
  void one_channel_backward(const T* params, ConstMatMap<T> in, ConstMatMap<T> out, MatMap<T> dy, T* grads, T* din);
  const T* bias_values(const T* params) const { return bias_ == kNoBias ? no_bias_.data() : params + bias_; }
  T* bias_gradient(T* grads) { return bias_ == kNoBias ? no_bias_gradient_.data() : grads + bias_; }

  Geometry g_;
  bool relu_;
  size_t kernel_, bias_;
  int64_t max_columns_;  // out_h * out_w * the largest batch
  Method method_;
  Mat<T> patches_;   // im2col: patch_size x (out_h * out_w * batch), kept from forward for backward
  Mat<T> dpatches_;  // same shape, scratch of the input gradient (allocated at its first use)
  std::unique_ptr<OneDnnConv> onednn_;  // the oneDNN method's primitives (created at its first use)
  bool onednn_bf16_ = false;            // onednn_'s products are bfloat16
  std::vector<float> padded_;           // kOneChannel: one example's padded image, and its slack
  std::vector<T> no_bias_, no_bias_gradient_;  // without a bias: zeros, and where its gradient goes
};

// Max pooling with valid padding, as in Keras: windows of pool_h x pool_w every stride_h/stride_w
// positions, out = floor((in - pool) / stride) + 1, edges that fit no window dropped. Ties go to
// the first position in the window (row-major), as in TensorFlow. Windows may overlap (stride
// below the pool size): backward adds each output's gradient to its argmax.
template <typename T>
class MaxPool2D final : public Layer<T> {
 public:
  struct Geometry {
    int64_t height, width, channels;  // input
    int64_t pool_h = 2, pool_w = 2;
    int64_t stride_h = 2, stride_w = 2;
    int64_t out_h = 0, out_w = 0;
  };
  MaxPool2D(Geometry g, int64_t max_batch);
  void forward(const T* params, ConstMatMap<T> in, MatMap<T> out) override;
  void backward(const T* params, ConstMatMap<T> in, ConstMatMap<T> out, MatMap<T> dout, T* grads,
                T* din) override;

 private:
  Geometry g_;
  std::vector<int32_t> argmax_;  // per output value: the input row it came from
};

// Average pooling with valid padding, as Keras' AveragePooling2D: the mean of each window
// (summed in row-major window order, then divided by its size); backward spreads each output's
// gradient evenly over its window (overlapping windows add). Global average pooling is the one
// window the size of the input.
template <typename T>
class AvgPool2D final : public Layer<T> {
 public:
  using Geometry = typename MaxPool2D<T>::Geometry;
  explicit AvgPool2D(Geometry g) : g_(g) {}
  void forward(const T* params, ConstMatMap<T> in, MatMap<T> out) override;
  void backward(const T* params, ConstMatMap<T> in, ConstMatMap<T> out, MatMap<T> dout, T* grads,
                T* din) override;

 private:
  Geometry g_;
};

// Global average or max pooling over the unmasked steps of a [steps, channels] sequence (the mask
// of an embedding's mask_zero: Keras' GlobalAveragePooling1D with a mask): the mean (summed in step
// order, divided by the unmasked count) or the max (ties to the first step); an example with every
// step masked gives zeros. Backward spreads (mean) or routes (max) each output's gradient to the
// unmasked steps only. Without a mask (none set) every step counts.
template <typename T>
class MaskedGlobalPool1D final : public Layer<T> {
 public:
  MaskedGlobalPool1D(int64_t steps, int64_t channels, bool average) : steps_(steps), channels_(channels), average_(average) {}
  void use_mask(const T* ids, int64_t rows) override {
    ids_ = ids;
    rows_ = rows;
  }
  void forward(const T* params, ConstMatMap<T> in, MatMap<T> out) override;
  void backward(const T* params, ConstMatMap<T> in, ConstMatMap<T> out, MatMap<T> dout, T* grads, T* din) override;

 private:
  bool kept(int64_t b, int64_t t) const { return ids_ == nullptr || ids_[b * rows_ + t] != T(0); }
  int64_t steps_, channels_;
  bool average_;
  const T* ids_ = nullptr;
  int64_t rows_ = 0;
  std::vector<int32_t> argmax_;  // max: per output value, the step it came from (-1: none)
};

template <typename T>
class ReLU final : public Layer<T> {
 public:
  void forward(const T* params, ConstMatMap<T> in, MatMap<T> out) override;
  void backward(const T* params, ConstMatMap<T> in, ConstMatMap<T> out, MatMap<T> dout, T* grads,
                T* din) override;
};

}  // namespace pstrain::nn
