#include <algorithm>
#include <string>
#include <type_traits>

#include "common/base/error.h"
#include "common/engine/nn/gemm.h"
#include "common/engine/nn/layers.h"
#include "common/engine/simd/kernels.h"

namespace pstrain::nn {
namespace {

// Runs of a patch are short (kernel_w * channels values: 3 for the first layer of the reference
// CNN), so a call to memmove per run costs more than the copy. GCC would turn these loops back
// into library calls; the attribute keeps them inline.
template <typename T>
__attribute__((optimize("no-tree-loop-distribute-patterns"))) inline void copy_run(const T* src, int64_t n, T* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
}

template <typename T>
__attribute__((optimize("no-tree-loop-distribute-patterns"))) inline void zero_run(int64_t n, T* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = T(0);
}

template <typename T>
inline void add_run(const T* src, int64_t n, T* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

}  // namespace

template <typename T>
typename Conv2D<T>::Method Conv2D<T>::default_method() {
  return std::is_same_v<T, float> && onednn_preferred() ? Method::kOneDnn : Method::kIm2col;
}

// The input position (row or column) under kernel tap k of output position o along one axis, or
// -1 when it falls in the padding.
inline int64_t tap(int64_t o, int64_t k, int64_t stride, int64_t pad, int64_t dilation, int64_t size) {
  const int64_t i = o * stride - pad + k * dilation;
  return i >= 0 && i < size ? i : -1;
}

template <typename T>
bool Conv2D<T>::one_channel(const Geometry& g) {
  return std::is_same_v<T, float> && g.channels == 1 && !g.dilated() && g.kernel_h * g.kernel_w <= simd::kOneChannelMaxTaps;
}

template <typename T>
Conv2D<T>::Conv2D(Geometry g, bool relu, size_t kernel_offset, size_t bias_offset, int64_t max_batch)
    : g_(g), relu_(relu), kernel_(kernel_offset), bias_(bias_offset), max_columns_(g.out_h * g.out_w * max_batch),
      method_(Method::kIm2col) {
  if (bias_ == kNoBias) {
    no_bias_.assign(static_cast<size_t>(g.filters), T(0));
    no_bias_gradient_.resize(static_cast<size_t>(g.filters));
  }
  // Dilated kernels run on im2col (its patches follow the dilation; oneDNN's dilated primitives
  // are not wired up).
  set_method(one_channel(g) ? Method::kOneChannel : g.dilated() ? Method::kIm2col : default_method());
}

template <typename T>
Conv2D<T>::~Conv2D() = default;

template <typename T>
void Conv2D<T>::set_method(Method m) {
  method_ = m;
  // Each method's state, made once, when the method is first used.
  if (m == Method::kIm2col) {
    if (patches_.cols() < max_columns_) patches_.resize(g_.patch_size(), max_columns_);
  } else if (m == Method::kOneChannel) {
    if (!one_channel(g_)) throw Error("the one-channel convolution needs float, one input channel, no dilation and at most " +
                                      std::to_string(simd::kOneChannelMaxTaps) + " taps");
    const int64_t rows = (g_.out_h - 1) * g_.stride_h + g_.kernel_h, cols = (g_.out_w - 1) * g_.stride_w + g_.kernel_w;
    padded_.assign(static_cast<size_t>(rows * cols + simd::kOneChannelSlack * g_.stride_w), 0.0f);
  } else {
    if constexpr (!std::is_same_v<T, float>) throw Error("the oneDNN convolution is float only");
    if (g_.dilated()) throw Error("a dilated convolution runs on im2col only");
    // (A switch between float32 and bfloat16 makes the other's primitives.)
    const bool bf16 = m == Method::kOneDnnBf16;
    if (!onednn_ || onednn_bf16_ != bf16) onednn_ = std::make_unique<OneDnnConv>(g_, relu_, bf16);
    onednn_bf16_ = bf16;
  }
}

template <typename T>
void Conv2D<T>::forward(const T* params, ConstMatMap<T> in, MatMap<T> out) {
  if constexpr (std::is_same_v<T, float>) {
    if (method_ == Method::kOneChannel) {
      one_channel_forward(params, in, out);
      return;
    }
    if (method_ != Method::kIm2col) {
      onednn_->forward(params + kernel_, bias_values(params), in.data(), in.cols(), out.data());
      return;
    }
  }
  im2col_forward(params, in, out);
}

template <typename T>
void Conv2D<T>::inside_columns(int64_t x, int64_t& first, int64_t& last) const {
  const int64_t x0 = x * g_.stride_w - g_.pad_left;  // input column under kernel column 0
  first = std::clamp<int64_t>(-x0, 0, g_.kernel_w);
  last = std::clamp<int64_t>(g_.width - x0, first, g_.kernel_w);
}

template <typename T>
void Conv2D<T>::im2col_forward(const T* params, ConstMatMap<T> in, MatMap<T> out) {
  const int64_t batch = in.cols();
  const int64_t oh = g_.out_h, ow = g_.out_w;
  const int64_t run = g_.kernel_w * g_.channels;  // one kernel row of a patch is contiguous input
  const int64_t columns = oh * ow * batch;
  const int64_t c = g_.channels;
  // im2col: patch column (b, y, x) holds the kernel_h runs of `run` values under the kernel, in
  // the kernel's [kh, kw, cin] order.
  for (int64_t b = 0; b < batch; ++b) {
    const T* image = in.data() + b * in.rows();
    if (g_.dilated()) {  // every kernel tap on its own: the taps of a kernel row are d apart
      for (int64_t y = 0; y < oh; ++y) {
        for (int64_t x = 0; x < ow; ++x) {
          T* column = patches_.data() + ((b * oh + y) * ow + x) * g_.patch_size();
          for (int64_t ky = 0; ky < g_.kernel_h; ++ky) {
            const int64_t iy = tap(y, ky, g_.stride_h, g_.pad_top, g_.dilation_h, g_.height);
            for (int64_t kx = 0; kx < g_.kernel_w; ++kx) {
              const int64_t ix = tap(x, kx, g_.stride_w, g_.pad_left, g_.dilation_w, g_.width);
              T* dst = column + (ky * g_.kernel_w + kx) * c;
              if (iy < 0 || ix < 0) {
                zero_run(c, dst);
              } else {
                copy_run(image + (iy * g_.width + ix) * c, c, dst);
              }
            }
          }
        }
      }
      continue;
    }
    if (g_.dense_windows()) {
      for (int64_t y = 0; y < oh; ++y) {
        for (int64_t x = 0; x < ow; ++x) {
          T* column = patches_.data() + ((b * oh + y) * ow + x) * g_.patch_size();
          for (int64_t ky = 0; ky < g_.kernel_h; ++ky) {
            const T* src = image + ((y + ky) * g_.width + x) * g_.channels;
            copy_run(src, run, column + ky * run);
          }
        }
      }
      continue;
    }
    // Strided or padded: a kernel row is still contiguous input, except the kernel columns
    // [first, last) that fall outside it (padding), which read zero.
    for (int64_t y = 0; y < oh; ++y) {
      for (int64_t x = 0; x < ow; ++x) {
        T* column = patches_.data() + ((b * oh + y) * ow + x) * g_.patch_size();
        int64_t first, last;
        inside_columns(x, first, last);
        const int64_t x0 = x * g_.stride_w - g_.pad_left;
        for (int64_t ky = 0; ky < g_.kernel_h; ++ky) {
          const int64_t iy = y * g_.stride_h - g_.pad_top + ky;
          T* dst = column + ky * run;
          if (iy < 0 || iy >= g_.height) {
            zero_run(run, dst);
            continue;
          }
          zero_run(first * c, dst);
          copy_run(image + (iy * g_.width + x0 + first) * c, (last - first) * c, dst + first * c);
          zero_run((g_.kernel_w - last) * c, dst + last * c);
        }
      }
    }
  }
  ConstVecMap<T> bias(bias_values(params), g_.filters);
  MatMap<T> y(out.data(), g_.filters, columns);  // [filters x (b, y, x)] == HWC columns per example
  y.colwise() = bias;
  gemm<T>(Op::kNone, Op::kNone, g_.filters, columns, g_.patch_size(), params + kernel_, g_.filters, patches_.data(),
          g_.patch_size(), T(1), y.data(), g_.filters);
  if (relu_) y = y.cwiseMax(T(0));
}

template <typename T>
void Conv2D<T>::backward(const T* params, ConstMatMap<T> in, ConstMatMap<T> out, MatMap<T> dout, T* grads,
                         T* din) {
  const int64_t batch = in.cols();
  MatMap<T> dy(dout.data(), g_.filters, g_.out_h * g_.out_w * batch);
  if constexpr (std::is_same_v<T, float>) {
    if (method_ == Method::kOneChannel) {
      one_channel_backward(params, in, out, dy, grads, din);
      return;
    }
    if (relu_) simd::kernels().relu_mask(dy.size(), out.data(), dy.data());
    if (method_ != Method::kIm2col) {
      onednn_->backward_weights(in.data(), dy.data(), batch, grads + kernel_, bias_gradient(grads));
      if (din != nullptr) onednn_->backward_data(params + kernel_, dy.data(), batch, din);
      return;
    }
  }
  if constexpr (!std::is_same_v<T, float>) {
    if (relu_) {
      ConstMatMap<T> y(out.data(), g_.filters, dy.cols());
      dy = (y.array() > T(0)).select(dy, T(0));
    }
  }
  im2col_backward(params, in, dy, grads, din);
}

template <typename T>
void Conv2D<T>::im2col_backward(const T* params, ConstMatMap<T> in, MatMap<T> dy, T* grads, T* din) {
  const int64_t batch = in.cols();
  const int64_t oh = g_.out_h, ow = g_.out_w;
  const int64_t columns = oh * ow * batch;
  gemm<T>(Op::kNone, Op::kTranspose, g_.filters, g_.patch_size(), columns, dy.data(), g_.filters, patches_.data(),
          g_.patch_size(), T(0), grads + kernel_, g_.filters);
  VecMap<T>(bias_gradient(grads), g_.filters).noalias() = dy.rowwise().sum();
  if (din == nullptr) return;

  if (dpatches_.cols() < max_columns_) dpatches_.resize(g_.patch_size(), max_columns_);
  gemm<T>(Op::kTranspose, Op::kNone, g_.patch_size(), columns, g_.filters, params + kernel_, g_.filters, dy.data(),
          g_.filters, T(0), dpatches_.data(), g_.patch_size());
  // col2im: scatter-add every patch column back onto the input positions it was read from.
  const int64_t run = g_.kernel_w * g_.channels;
  std::fill(din, din + in.rows() * batch, T(0));
  const int64_t c = g_.channels;
  for (int64_t b = 0; b < batch; ++b) {
    T* image = din + b * in.rows();
    if (g_.dilated()) {
      for (int64_t y = 0; y < oh; ++y) {
        for (int64_t x = 0; x < ow; ++x) {
          const T* column = dpatches_.data() + ((b * oh + y) * ow + x) * g_.patch_size();
          for (int64_t ky = 0; ky < g_.kernel_h; ++ky) {
            const int64_t iy = tap(y, ky, g_.stride_h, g_.pad_top, g_.dilation_h, g_.height);
            if (iy < 0) continue;
            for (int64_t kx = 0; kx < g_.kernel_w; ++kx) {
              const int64_t ix = tap(x, kx, g_.stride_w, g_.pad_left, g_.dilation_w, g_.width);
              if (ix >= 0) add_run(column + (ky * g_.kernel_w + kx) * c, c, image + (iy * g_.width + ix) * c);
            }
          }
        }
      }
      continue;
    }
    if (g_.dense_windows()) {
      for (int64_t y = 0; y < oh; ++y) {
        for (int64_t x = 0; x < ow; ++x) {
          const T* column = dpatches_.data() + ((b * oh + y) * ow + x) * g_.patch_size();
          for (int64_t ky = 0; ky < g_.kernel_h; ++ky) {
            T* dst = image + ((y + ky) * g_.width + x) * g_.channels;
            const T* src = column + ky * run;
            add_run(src, run, dst);
          }
        }
      }
      continue;
    }
    // Strided or padded: the entries that read padding have no input to go back to.
    for (int64_t y = 0; y < oh; ++y) {
      for (int64_t x = 0; x < ow; ++x) {
        const T* column = dpatches_.data() + ((b * oh + y) * ow + x) * g_.patch_size();
        int64_t first, last;
        inside_columns(x, first, last);
        const int64_t x0 = x * g_.stride_w - g_.pad_left;
        for (int64_t ky = 0; ky < g_.kernel_h; ++ky) {
          const int64_t iy = y * g_.stride_h - g_.pad_top + ky;
          if (iy < 0 || iy >= g_.height) continue;
          add_run(column + ky * run + first * c, (last - first) * c, image + (iy * g_.width + x0 + first) * c);
        }
      }
    }
  }
}

template <typename T>
const float* Conv2D<T>::pad_example(const T* in, int64_t b) {
  if constexpr (std::is_same_v<T, float>) {
    // Rows and columns of the padded image cover every tap of every output; those outside the
    // input stay the zeros set_method wrote (the image's own positions are the same every call).
    const int64_t cols = (g_.out_w - 1) * g_.stride_w + g_.kernel_w;
    const int64_t rows = (g_.out_h - 1) * g_.stride_h + g_.kernel_h;
    const T* image = in + b * g_.height * g_.width;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t iy = r - g_.pad_top;
      if (iy < 0 || iy >= g_.height) continue;
      const int64_t first = std::max<int64_t>(0, g_.pad_left), last = std::min<int64_t>(cols, g_.pad_left + g_.width);
      if (last > first) std::copy(image + iy * g_.width + (first - g_.pad_left), image + iy * g_.width + (last - g_.pad_left),
                                  padded_.data() + r * cols + first);
    }
    return padded_.data();
  } else {
    (void)in, (void)b;
    throw Error("the one-channel convolution is float only");
  }
}

template <typename T>
void Conv2D<T>::one_channel_forward(const T* params, ConstMatMap<T> in, MatMap<T> out) {
  if constexpr (std::is_same_v<T, float>) {
    const simd::OneChannelGeometry g{(g_.out_w - 1) * g_.stride_w + g_.kernel_w, g_.kernel_h, g_.kernel_w, g_.stride_h,
                                     g_.stride_w, g_.out_h, g_.out_w, g_.filters};
    const auto& k = simd::kernels();
    for (int64_t b = 0; b < in.cols(); ++b) {
      k.one_channel_conv(pad_example(in.data(), b), g, params + kernel_, bias_values(params), relu_,
                         out.data() + b * out.rows());
    }
  } else {
    (void)params, (void)in, (void)out;
  }
}

// The kernel gradient by one_channel_conv_gradient, example after example (each adds its sums);
// the ReLU's mask inside it, unless the input gradient needs the masked dy too. The input gradient
// (a one-channel input that is not the model's input: rare) by the definition, in a fixed order.
template <typename T>
void Conv2D<T>::one_channel_backward(const T* params, ConstMatMap<T> in, ConstMatMap<T> out, MatMap<T> dy, T* grads,
                                     T* din) {
  if constexpr (std::is_same_v<T, float>) {
    const int64_t batch = in.cols(), positions = g_.out_h * g_.out_w, f = g_.filters;
    const simd::OneChannelGeometry g{(g_.out_w - 1) * g_.stride_w + g_.kernel_w, g_.kernel_h, g_.kernel_w, g_.stride_h,
                                     g_.stride_w, g_.out_h, g_.out_w, f};
    const auto& k = simd::kernels();
    if (relu_ && din != nullptr) k.relu_mask(dy.size(), out.data(), dy.data());
    const float* mask = relu_ && din == nullptr ? out.data() : nullptr;
    float* dw = grads + kernel_;
    float* db = bias_gradient(grads);
    std::fill(dw, dw + g_.patch_size() * f, 0.0f);
    std::fill(db, db + f, 0.0f);
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t at = b * positions * f;
      k.one_channel_conv_gradient(pad_example(in.data(), b), g, mask == nullptr ? nullptr : mask + at, dy.data() + at, dw,
                                  db);
    }
    if (din == nullptr) return;
    const float* w = params + kernel_;
    std::fill(din, din + in.rows() * batch, 0.0f);
    for (int64_t b = 0; b < batch; ++b) {
      float* image = din + b * in.rows();
      for (int64_t y = 0; y < g_.out_h; ++y) {
        for (int64_t x = 0; x < g_.out_w; ++x) {
          const float* d = dy.data() + (b * positions + y * g_.out_w + x) * f;
          for (int64_t ky = 0; ky < g_.kernel_h; ++ky) {
            const int64_t iy = tap(y, ky, g_.stride_h, g_.pad_top, 1, g_.height);
            for (int64_t kx = 0; kx < g_.kernel_w && iy >= 0; ++kx) {
              const int64_t ix = tap(x, kx, g_.stride_w, g_.pad_left, 1, g_.width);
              if (ix < 0) continue;
              const float* wk = w + (ky * g_.kernel_w + kx) * f;
              float sum = 0.0f;
              for (int64_t c = 0; c < f; ++c) sum += wk[c] * d[c];
              image[iy * g_.width + ix] += sum;
            }
          }
        }
      }
    }
  } else {
    (void)params, (void)in, (void)out, (void)dy, (void)grads, (void)din;
  }
}

template class Conv2D<float>;
template class Conv2D<double>;

}  // namespace pstrain::nn
