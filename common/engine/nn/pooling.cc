#include <algorithm>
#include <type_traits>

#include "common/engine/nn/layers.h"
#include "common/engine/simd/kernels.h"

namespace pstrain::nn {

template <typename T>
MaxPool2D<T>::MaxPool2D(Geometry g, int64_t max_batch) : g_(g) {
  argmax_.resize(static_cast<size_t>(g_.out_h * g_.out_w * g_.channels * max_batch));
}

template <typename T>
void MaxPool2D<T>::forward(const T*, ConstMatMap<T> in, MatMap<T> out) {
  const int64_t oh = g_.out_h, ow = g_.out_w, w = g_.width, c = g_.channels;
  const int64_t out_size = oh * ow * c;
  if constexpr (std::is_same_v<T, float>) {  // the dispatched kernel, vectorized along channels
    const simd::KernelTable& k = simd::kernels();
    for (int64_t b = 0; b < in.cols(); ++b) {
      k.max_pool(in.data() + b * in.rows(), w, c, g_.pool_h, g_.pool_w, g_.stride_h, g_.stride_w, oh, ow,
                 out.data() + b * out_size, argmax_.data() + b * out_size);
    }
    return;
  }
  const bool two_by_two = g_.pool_h == 2 && g_.pool_w == 2 && g_.stride_h == 2 && g_.stride_w == 2;
  for (int64_t b = 0; b < in.cols(); ++b) {
    const T* image = in.data() + b * in.rows();
    T* pooled = out.data() + b * out_size;
    int32_t* arg = argmax_.data() + b * out_size;
    for (int64_t y = 0; y < oh; ++y) {
      for (int64_t x = 0; x < ow; ++x) {
        const int64_t base = ((y * g_.stride_h) * w + x * g_.stride_w) * c;
        T* dst = pooled + (y * ow + x) * c;
        int32_t* dst_arg = arg + (y * ow + x) * c;
        if (two_by_two) {  // the reference CNN's pooling, unrolled
          const int64_t offsets[4] = {base, base + c, base + w * c, base + (w + 1) * c};
          for (int64_t ch = 0; ch < c; ++ch) {
            int64_t best = offsets[0] + ch;
            for (int k = 1; k < 4; ++k) {
              // Strictly greater: ties keep the first position, as TensorFlow does.
              if (image[offsets[k] + ch] > image[best]) best = offsets[k] + ch;
            }
            dst[ch] = image[best];
            dst_arg[ch] = static_cast<int32_t>(best);
          }
          continue;
        }
        for (int64_t ch = 0; ch < c; ++ch) {
          int64_t best = base + ch;
          for (int64_t ky = 0; ky < g_.pool_h; ++ky) {
            for (int64_t kx = 0; kx < g_.pool_w; ++kx) {
              const int64_t at = base + (ky * w + kx) * c + ch;
              if (image[at] > image[best]) best = at;  // strictly greater, as above
            }
          }
          dst[ch] = image[best];
          dst_arg[ch] = static_cast<int32_t>(best);
        }
      }
    }
  }
}

template <typename T>
void MaxPool2D<T>::backward(const T*, ConstMatMap<T> in, ConstMatMap<T>, MatMap<T> dout, T*, T* din) {
  if (din == nullptr) return;
  const int64_t out_size = dout.rows();
  std::fill(din, din + in.rows() * in.cols(), T(0));
  for (int64_t b = 0; b < in.cols(); ++b) {
    T* dimage = din + b * in.rows();
    const T* d = dout.data() + b * out_size;
    const int32_t* arg = argmax_.data() + b * out_size;
    for (int64_t i = 0; i < out_size; ++i) dimage[arg[i]] += d[i];
  }
}

template <typename T>
void AvgPool2D<T>::forward(const T*, ConstMatMap<T> in, MatMap<T> out) {
  const int64_t oh = g_.out_h, ow = g_.out_w, w = g_.width, c = g_.channels;
  const int64_t out_size = oh * ow * c;
  const T inv = T(1) / static_cast<T>(g_.pool_h * g_.pool_w);
  for (int64_t b = 0; b < in.cols(); ++b) {
    const T* image = in.data() + b * in.rows();
    T* pooled = out.data() + b * out_size;
    for (int64_t y = 0; y < oh; ++y) {
      for (int64_t x = 0; x < ow; ++x) {
        const int64_t base = ((y * g_.stride_h) * w + x * g_.stride_w) * c;
        T* dst = pooled + (y * ow + x) * c;
        std::fill_n(dst, c, T(0));
        for (int64_t ky = 0; ky < g_.pool_h; ++ky) {
          for (int64_t kx = 0; kx < g_.pool_w; ++kx) {
            const T* src = image + base + (ky * w + kx) * c;
            for (int64_t ch = 0; ch < c; ++ch) dst[ch] += src[ch];
          }
        }
        for (int64_t ch = 0; ch < c; ++ch) dst[ch] *= inv;
      }
    }
  }
}

template <typename T>
void AvgPool2D<T>::backward(const T*, ConstMatMap<T> in, ConstMatMap<T>, MatMap<T> dout, T*, T* din) {
  if (din == nullptr) return;
  const int64_t oh = g_.out_h, ow = g_.out_w, w = g_.width, c = g_.channels;
  const int64_t out_size = oh * ow * c;
  const T inv = T(1) / static_cast<T>(g_.pool_h * g_.pool_w);
  std::fill(din, din + in.rows() * in.cols(), T(0));
  for (int64_t b = 0; b < in.cols(); ++b) {
    T* dimage = din + b * in.rows();
    const T* d = dout.data() + b * out_size;
    for (int64_t y = 0; y < oh; ++y) {
      for (int64_t x = 0; x < ow; ++x) {
        const int64_t base = ((y * g_.stride_h) * w + x * g_.stride_w) * c;
        const T* g = d + (y * ow + x) * c;
        for (int64_t ky = 0; ky < g_.pool_h; ++ky) {
          for (int64_t kx = 0; kx < g_.pool_w; ++kx) {
            T* dst = dimage + base + (ky * w + kx) * c;
            for (int64_t ch = 0; ch < c; ++ch) dst[ch] += g[ch] * inv;
          }
        }
      }
    }
  }
}

template <typename T>
void MaskedGlobalPool1D<T>::forward(const T*, ConstMatMap<T> in, MatMap<T> out) {
  const int64_t c = channels_;
  argmax_.resize(static_cast<size_t>(c * in.cols()));
  for (int64_t b = 0; b < in.cols(); ++b) {
    const T* x = in.data() + b * in.rows();
    T* y = out.data() + b * c;
    int32_t* arg = argmax_.data() + b * c;
    std::fill_n(y, c, T(0));
    std::fill_n(arg, c, -1);
    int64_t count = 0;
    for (int64_t t = 0; t < steps_; ++t) {
      if (!kept(b, t)) continue;
      ++count;
      for (int64_t ch = 0; ch < c; ++ch) {
        const T v = x[t * c + ch];
        if (average_) {
          y[ch] += v;
        } else if (arg[ch] < 0 || v > y[ch]) {  // strictly greater: ties keep the first step
          y[ch] = v;
          arg[ch] = static_cast<int32_t>(t);
        }
      }
    }
    if (average_ && count > 0) {
      for (int64_t ch = 0; ch < c; ++ch) y[ch] /= static_cast<T>(count);
    }
  }
}

template <typename T>
void MaskedGlobalPool1D<T>::backward(const T*, ConstMatMap<T> in, ConstMatMap<T>, MatMap<T> dout, T*, T* din) {
  if (din == nullptr) return;
  const int64_t c = channels_;
  std::fill(din, din + in.rows() * in.cols(), T(0));
  for (int64_t b = 0; b < in.cols(); ++b) {
    T* dx = din + b * in.rows();
    const T* dy = dout.data() + b * c;
    if (!average_) {
      const int32_t* arg = argmax_.data() + b * c;
      for (int64_t ch = 0; ch < c; ++ch) {
        if (arg[ch] >= 0) dx[arg[ch] * c + ch] = dy[ch];
      }
      continue;
    }
    int64_t count = 0;
    for (int64_t t = 0; t < steps_; ++t) count += kept(b, t) ? 1 : 0;
    if (count == 0) continue;
    for (int64_t t = 0; t < steps_; ++t) {
      if (!kept(b, t)) continue;
      for (int64_t ch = 0; ch < c; ++ch) dx[t * c + ch] = dy[ch] / static_cast<T>(count);
    }
  }
}

template class MaskedGlobalPool1D<float>;
template class MaskedGlobalPool1D<double>;
template class AvgPool2D<float>;
template class AvgPool2D<double>;

template <typename T>
void ReLU<T>::forward(const T*, ConstMatMap<T> in, MatMap<T> out) {
  out = in.cwiseMax(T(0));
}

template <typename T>
void ReLU<T>::backward(const T*, ConstMatMap<T>, ConstMatMap<T> out, MatMap<T> dout, T*, T* din) {
  if (din == nullptr) return;
  MatMap<T> dx(din, dout.rows(), dout.cols());
  dx = (out.array() > T(0)).select(dout, T(0));
}

template class MaxPool2D<float>;
template class MaxPool2D<double>;
template class ReLU<float>;
template class ReLU<double>;

}  // namespace pstrain::nn
