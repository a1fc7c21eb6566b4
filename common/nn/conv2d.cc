#include <algorithm>
#include <cstring>
#include <tuple>

#include "common/nn/gemm.h"
#include "common/nn/layers.h"

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

// The tiles below are passed by value only between inline functions of this file, so GCC's note
// that a 64-byte vector argument's ABI depends on AVX-512 (builds without -march=native) does
// not concern us.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

// One filter tile: a 64-byte vector of T (GCC's vector extension: one AVX-512 register, or two
// AVX2 or four SSE registers, whatever the target has). Loads and stores go through memcpy, which
// compiles to unaligned vector moves.
template <typename T>
struct TileOf {
  typedef T type __attribute__((vector_size(64)));
};
template <typename T>
using Tile = typename TileOf<T>::type;
template <typename T>
constexpr int64_t kTile = 64 / sizeof(T);

template <typename T>
inline Tile<T> load_tile(const T* src) {
  Tile<T> v;
  std::memcpy(&v, src, sizeof v);
  return v;
}

template <typename T>
inline void store_tile(const Tile<T>& v, T* dst) {
  std::memcpy(dst, &v, sizeof v);
}

// Direct method's register blocking. Forward computes kGroup output positions by up to
// kTilesAtOnce filter tiles together (16 independent chains of multiply-adds; each kernel tile
// and each input value loaded once for all of them). Backward sums the kernel gradient over
// blocks of kBlock positions in registers, 4 patch entries by up to kTilesAtOnce filter tiles at
// a time, before adding to the batch's sums in memory.
constexpr int64_t kGroup = 4;  // direct_forward dispatches group sizes 1 to 4
constexpr int64_t kBlock = 16;
constexpr int64_t kTilesAtOnce = 4;

// For K output positions and TG tiles of filters: out[k][t] = bias + sum_p kernel[p * stride +
// t * kTile] * win[k][offs[p]], then ReLU if asked. kernel and bias point at the first tile.
template <typename T, int64_t K, int64_t TG>
inline void forward_tiles(const T* kernel, int64_t stride, const T* bias, const T* const* win,
                          const int64_t* offs, int64_t patch, bool relu, Tile<T> (*out)[kTilesAtOnce]) {
  Tile<T> acc[K][TG];
  for (int64_t t = 0; t < TG; ++t) {
    const Tile<T> b = load_tile(bias + t * kTile<T>);
    for (int64_t k = 0; k < K; ++k) acc[k][t] = b;
  }
  for (int64_t p = 0; p < patch; ++p) {
    Tile<T> w[TG];
    for (int64_t t = 0; t < TG; ++t) w[t] = load_tile(kernel + p * stride + t * kTile<T>);
    const int64_t o = offs[p];
    for (int64_t k = 0; k < K; ++k) {
      const T v = win[k][o];
      for (int64_t t = 0; t < TG; ++t) acc[k][t] += w[t] * v;
    }
  }
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t t = 0; t < TG; ++t) out[k][t] = relu ? (acc[k][t] < T(0) ? Tile<T>{} : acc[k][t]) : acc[k][t];
  }
}

// acc[q * stride + t * kTile] += sum_k g[k * g_stride + t * kTile] * win[k][offs[p + q]] for
// q < Q, t < TG: Q patch entries' kernel gradients over the m positions of a block, TG tiles of
// filters (g: the positions' masked output gradients).
template <typename T, int64_t Q, int64_t TG>
inline void gradient_tiles(const T* g, int64_t g_stride, const T* const* win, const int64_t* offs, int64_t m,
                           int64_t p, T* acc, int64_t stride) {
  Tile<T> sum[Q][TG] = {};
  int64_t o[Q];
  for (int64_t q = 0; q < Q; ++q) o[q] = offs[p + q];
  for (int64_t k = 0; k < m; ++k) {
    Tile<T> gk[TG];
    for (int64_t t = 0; t < TG; ++t) gk[t] = load_tile(g + k * g_stride + t * kTile<T>);
    const T* w = win[k];
    for (int64_t q = 0; q < Q; ++q) {
      const T v = w[o[q]];
      for (int64_t t = 0; t < TG; ++t) sum[q][t] += gk[t] * v;
    }
  }
  for (int64_t q = 0; q < Q; ++q) {
    for (int64_t t = 0; t < TG; ++t) {
      T* a = acc + q * stride + t * kTile<T>;
      store_tile(load_tile(a) + sum[q][t], a);
    }
  }
}

// The calls above for a run-time tile count tg in [1, kTilesAtOnce].
template <typename T, int64_t K>
inline void forward_tiles(int64_t tg, const T* kernel, int64_t stride, const T* bias, const T* const* win,
                          const int64_t* offs, int64_t patch, bool relu, Tile<T> (*out)[kTilesAtOnce]) {
  switch (tg) {
    case 1: return forward_tiles<T, K, 1>(kernel, stride, bias, win, offs, patch, relu, out);
    case 2: return forward_tiles<T, K, 2>(kernel, stride, bias, win, offs, patch, relu, out);
    case 3: return forward_tiles<T, K, 3>(kernel, stride, bias, win, offs, patch, relu, out);
    default: return forward_tiles<T, K, 4>(kernel, stride, bias, win, offs, patch, relu, out);
  }
}

template <typename T, int64_t Q>
inline void gradient_tiles(int64_t tg, const T* g, int64_t g_stride, const T* const* win, const int64_t* offs,
                           int64_t m, int64_t p, T* acc, int64_t stride) {
  switch (tg) {
    case 1: return gradient_tiles<T, Q, 1>(g, g_stride, win, offs, m, p, acc, stride);
    case 2: return gradient_tiles<T, Q, 2>(g, g_stride, win, offs, m, p, acc, stride);
    case 3: return gradient_tiles<T, Q, 3>(g, g_stride, win, offs, m, p, acc, stride);
    default: return gradient_tiles<T, Q, 4>(g, g_stride, win, offs, m, p, acc, stride);
  }
}

}  // namespace

template <typename T>
void Conv2D<T>::advance(int64_t m, int64_t& y, int64_t& x) const {
  x += m;
  while (x >= g_.out_w) x -= g_.out_w, ++y;
}

template <typename T>
Conv2D<T>::Conv2D(Geometry g, bool relu, size_t kernel_offset, size_t bias_offset, int64_t max_batch)
    : g_(g), relu_(relu), kernel_(kernel_offset), bias_(bias_offset), max_columns_(g.out_h * g.out_w * max_batch),
      method_(Method::kDirect) {
  for (int64_t ky = 0; ky < g_.kernel_h; ++ky) {
    for (int64_t kx = 0; kx < g_.kernel_w; ++kx) {
      for (int64_t c = 0; c < g_.channels; ++c) offsets_.push_back((ky * g_.width + kx) * g_.channels + c);
    }
  }
  for (int64_t p = 0; p < g_.patch_size(); ++p) identity_.push_back(p);
  padded_filters_ = (g_.filters + kTile<T> - 1) / kTile<T> * kTile<T>;
  set_method(default_method(g_));
}

template <typename T>
void Conv2D<T>::set_method(Method m) {
  method_ = m;
  // Each method's scratch, allocated once, when the method is first used.
  if (m == Method::kIm2col) {
    patches_.resize(g_.patch_size(), max_columns_);
  } else if (acc_.empty()) {
    window_.resize(kBlock * g_.patch_size());
    kernel_padded_.assign((g_.patch_size() + 1) * padded_filters_, T(0));
    acc_.assign((g_.patch_size() + 1) * padded_filters_, T(0));
    dy_block_.assign(kBlock * padded_filters_, T(0));
  }
}

template <typename T>
void Conv2D<T>::forward(const T* params, ConstMatMap<T> in, MatMap<T> out) {
  if (method_ == Method::kDirect) {
    direct_forward(params, in, out);
  } else {
    im2col_forward(params, in, out);
  }
}

template <typename T>
int64_t Conv2D<T>::windows(const T* image, int64_t y, int64_t x, int64_t m, const T** win, int64_t* pos) {
  int64_t inside = 0, over = m;  // windows inside fill win from the front, gathered ones from the back
  for (int64_t k = 0; k < m; ++k) {
    const int64_t iy0 = y * g_.stride_h - g_.pad_top, ix0 = x * g_.stride_w - g_.pad_left;
    if (iy0 >= 0 && ix0 >= 0 && iy0 + g_.kernel_h <= g_.height && ix0 + g_.kernel_w <= g_.width) {
      win[inside] = image + (iy0 * g_.width + ix0) * g_.channels;
      pos[inside++] = k;
    } else {
      --over;
      win[over] = gather_window(image, iy0, ix0, over);
      pos[over] = k;
    }
    if (++x == g_.out_w) x = 0, ++y;
  }
  return inside;
}

template <typename T>
const T* Conv2D<T>::gather_window(const T* image, int64_t iy0, int64_t ix0, int64_t slot) {
  T* const start = window_.data() + slot * g_.patch_size();
  T* dst = start;
  for (int64_t ky = 0; ky < g_.kernel_h; ++ky) {
    const int64_t iy = iy0 + ky;
    for (int64_t kx = 0; kx < g_.kernel_w; ++kx) {
      const int64_t ix = ix0 + kx;
      const bool inside = iy >= 0 && iy < g_.height && ix >= 0 && ix < g_.width;
      for (int64_t c = 0; c < g_.channels; ++c) *dst++ = inside ? image[(iy * g_.width + ix) * g_.channels + c] : T(0);
    }
  }
  return start;
}

template <typename T>
void Conv2D<T>::direct_forward(const T* params, ConstMatMap<T> in, MatMap<T> out) {
  const int64_t f = g_.filters, fp = padded_filters_, patch = g_.patch_size(), tile = kTile<T>;
  // The kernel ([filters x patch]: column p holds every filter's weight p) and the bias, each
  // column padded with zeros to whole tiles.
  T* kernel = kernel_padded_.data();
  for (int64_t p = 0; p < patch; ++p) std::copy_n(params + kernel_ + p * f, f, kernel + p * fp);
  std::copy_n(params + bias_, f, kernel + patch * fp);
  const T* bias = kernel + patch * fp;
  const int64_t positions = g_.out_h * g_.out_w;
  const T* win[kGroup];
  int64_t pos[kGroup];
  Tile<T> result[kGroup][kTilesAtOnce];
  for (int64_t b = 0; b < in.cols(); ++b) {
    const T* image = in.data() + b * in.rows();
    T* dst = out.data() + b * out.rows();
    for (int64_t j = 0, y = 0, x = 0; j < positions; j += kGroup) {
      const int64_t m = std::min(kGroup, positions - j);
      const int64_t inside = windows(image, y, x, m, win, pos);
      advance(m, y, x);
      for (int64_t f0 = 0; f0 < f; f0 += kTilesAtOnce * tile) {
        const int64_t tg = std::min(kTilesAtOnce, (fp - f0) / tile);
        // The windows inside the input, then those gathered over padding, each as one group.
        for (const auto& [first, count, offs] : {std::tuple{int64_t{0}, inside, offsets_.data()},
                                                 std::tuple{inside, m - inside, identity_.data()}}) {
          const T* const* w = win + first;
          auto* r = result + first;
          switch (count) {
            case 0: break;
            case 1: forward_tiles<T, 1>(tg, kernel + f0, fp, bias + f0, w, offs, patch, relu_, r); break;
            case 2: forward_tiles<T, 2>(tg, kernel + f0, fp, bias + f0, w, offs, patch, relu_, r); break;
            case 3: forward_tiles<T, 3>(tg, kernel + f0, fp, bias + f0, w, offs, patch, relu_, r); break;
            default: forward_tiles<T, 4>(tg, kernel + f0, fp, bias + f0, w, offs, patch, relu_, r); break;
          }
        }
        // The tiles' first n filters are real (the last tile may hold padding).
        const int64_t n = std::min(tg * tile, f - f0);
        for (int64_t k = 0; k < m; ++k) {
          T* d = dst + (j + pos[k]) * f + f0;
          if (n == tg * tile) {
            for (int64_t t = 0; t < tg; ++t) store_tile(result[k][t], d + t * tile);
          } else {
            std::memcpy(d, result[k], n * sizeof(T));
          }
        }
      }
    }
  }
}

template <typename T>
void Conv2D<T>::direct_gradient(ConstMatMap<T> in, const T* out, const T* dout, T* grads) {
  const int64_t f = g_.filters, fp = padded_filters_, patch = g_.patch_size(), tile = kTile<T>;
  const int64_t positions = g_.out_h * g_.out_w;
  // The batch's sums in acc_ ([patch + 1] rows of fp: the kernel gradient, then the bias's), each
  // block's partial sums added in block order. A block's masked output gradient goes to dy_block_
  // (kBlock rows of fp, the padding zero).
  std::fill(acc_.begin(), acc_.end(), T(0));
  T* acc = acc_.data();
  T* acc_bias = acc + patch * fp;
  T* g = dy_block_.data();
  const T* win[kBlock];
  int64_t pos[kBlock];
  for (int64_t b = 0; b < in.cols(); ++b) {
    const T* image = in.data() + b * in.rows();
    const T* dy = dout + b * positions * f;
    const T* y_out = out == nullptr ? nullptr : out + b * positions * f;
    for (int64_t j = 0, y = 0, x = 0; j < positions; j += kBlock) {
      const int64_t m = std::min(kBlock, positions - j);
      const int64_t inside = windows(image, y, x, m, win, pos);
      advance(m, y, x);
      for (int64_t k = 0; k < m; ++k) {  // row k of g: the gradient of window k's position
        const T* d = dy + (j + pos[k]) * f;
        T* gk = g + k * fp;
        if (y_out == nullptr) {
          std::copy_n(d, f, gk);
        } else {
          const T* o = y_out + (j + pos[k]) * f;
          for (int64_t i = 0; i < f; ++i) gk[i] = o[i] > T(0) ? d[i] : T(0);
        }
      }
      for (int64_t f0 = 0; f0 < fp; f0 += tile) {
        Tile<T> bias_sum = load_tile(acc_bias + f0);
        for (int64_t k = 0; k < m; ++k) bias_sum += load_tile(g + k * fp + f0);
        store_tile(bias_sum, acc_bias + f0);
      }
      // The windows inside the input, then those gathered over padding.
      for (const auto& [first, count, offs] : {std::tuple{int64_t{0}, inside, offsets_.data()},
                                               std::tuple{inside, m - inside, identity_.data()}}) {
        if (count == 0) continue;
        for (int64_t f0 = 0; f0 < fp; f0 += kTilesAtOnce * tile) {
          const int64_t tg = std::min(kTilesAtOnce, (fp - f0) / tile);
          const T* gf = g + first * fp + f0;
          int64_t p = 0;
          for (; p + 4 <= patch; p += 4) {
            gradient_tiles<T, 4>(tg, gf, fp, win + first, offs, count, p, acc + p * fp + f0, fp);
          }
          for (; p < patch; ++p) gradient_tiles<T, 1>(tg, gf, fp, win + first, offs, count, p, acc + p * fp + f0, fp);
        }
      }
    }
  }
  for (int64_t p = 0; p < patch; ++p) std::copy_n(acc + p * fp, f, grads + kernel_ + p * f);
  std::copy_n(acc_bias, f, grads + bias_);
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
  ConstVecMap<T> bias(params + bias_, g_.filters);
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
  const int64_t oh = g_.out_h, ow = g_.out_w;
  const int64_t columns = oh * ow * batch;
  MatMap<T> dy(dout.data(), g_.filters, columns);
  if (method_ == Method::kDirect && din == nullptr) {  // the mask is applied on the fly
    direct_gradient(in, relu_ ? out.data() : nullptr, dy.data(), grads);
    return;
  }
  if (relu_) {
    ConstMatMap<T> y(out.data(), g_.filters, columns);
    dy = (y.array() > T(0)).select(dy, T(0));
  }
  if (method_ == Method::kDirect) {
    direct_gradient(in, nullptr, dy.data(), grads);
  } else {
    gemm<T>(Op::kNone, Op::kTranspose, g_.filters, g_.patch_size(), columns, dy.data(), g_.filters, patches_.data(),
            g_.patch_size(), T(0), grads + kernel_, g_.filters);
    VecMap<T>(grads + bias_, g_.filters).noalias() = dy.rowwise().sum();
  }
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

template class Conv2D<float>;
template class Conv2D<double>;

}  // namespace pstrain::nn
