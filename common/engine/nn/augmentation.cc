#include "common/engine/nn/augmentation.h"

#include <algorithm>

#include "common/base/rng.h"

namespace pstrain::nn {

template <typename T>
Augmentation<T>::Augmentation(int64_t height, int64_t width, int64_t channels, Draws draws, uint64_t stream,
                              int64_t max_batch)
    : height_(height), width_(width), channels_(channels), draws_(draws), stream_(stream),
      transforms_(static_cast<size_t>(max_batch)) {}

template <typename T>
typename Augmentation<T>::Transform Augmentation<T>::draw(const Draws& draws, uint64_t stream, uint32_t epoch,
                                                          uint32_t id) {
  Rng rng(mix_seed(mix_seed(stream, epoch), id));
  Transform t;
  // Every draw is made whether or not it is used, so the others do not depend on the settings.
  const uint64_t h = rng.uniform_index(2), v = rng.uniform_index(2);
  const auto rows = static_cast<int64_t>(rng.uniform_index(static_cast<uint64_t>(2 * draws.max_shift_rows + 1)));
  const auto cols = static_cast<int64_t>(rng.uniform_index(static_cast<uint64_t>(2 * draws.max_shift_cols + 1)));
  t.flip_h = draws.flip_horizontal && h == 1;
  t.flip_v = draws.flip_vertical && v == 1;
  t.shift_rows = rows - draws.max_shift_rows;
  t.shift_cols = cols - draws.max_shift_cols;
  return t;
}

template <typename T>
int64_t Augmentation<T>::source_pixel(const Transform& t, int64_t i, int64_t j) const {
  int64_t r = i - t.shift_rows, c = j - t.shift_cols;
  if (r < 0 || r >= height_ || c < 0 || c >= width_) return -1;
  if (t.flip_v) r = height_ - 1 - r;
  if (t.flip_h) c = width_ - 1 - c;
  return r * width_ + c;
}

template <typename T>
void Augmentation<T>::forward(const T*, ConstMatMap<T> in, MatMap<T> out) {
  if (keys_.ids == nullptr) {
    out = in;
    return;
  }
  for (int64_t b = 0; b < in.cols(); ++b) {
    const Transform t = draw(draws_, stream_, keys_.epoch, keys_.ids[b]);
    transforms_[static_cast<size_t>(b)] = t;
    const T* x = in.col(b).data();
    T* y = out.col(b).data();
    for (int64_t i = 0; i < height_; ++i) {
      for (int64_t j = 0; j < width_; ++j) {
        const int64_t p = source_pixel(t, i, j);
        T* dst = y + (i * width_ + j) * channels_;
        if (p < 0) {
          std::fill_n(dst, channels_, T(0));
        } else {
          std::copy_n(x + p * channels_, channels_, dst);
        }
      }
    }
  }
}

template <typename T>
void Augmentation<T>::backward(const T*, ConstMatMap<T>, ConstMatMap<T>, MatMap<T> dout, T*, T* din) {
  if (din == nullptr) return;
  const int64_t size = dout.rows();
  if (keys_.ids == nullptr) {
    std::copy_n(dout.data(), dout.size(), din);
    return;
  }
  std::fill_n(din, dout.size(), T(0));
  for (int64_t b = 0; b < dout.cols(); ++b) {
    const Transform& t = transforms_[static_cast<size_t>(b)];
    const T* dy = dout.col(b).data();
    T* dx = din + b * size;
    for (int64_t i = 0; i < height_; ++i) {
      for (int64_t j = 0; j < width_; ++j) {
        const int64_t p = source_pixel(t, i, j);  // one output per source pixel at most
        if (p < 0) continue;
        const T* src = dy + (i * width_ + j) * channels_;
        T* dst = dx + p * channels_;
        for (int64_t k = 0; k < channels_; ++k) dst[k] += src[k];
      }
    }
  }
}

template class Augmentation<float>;
template class Augmentation<double>;

}  // namespace pstrain::nn
