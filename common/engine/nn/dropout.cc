#include "common/engine/nn/dropout.h"

#include <algorithm>

#include "common/base/rng.h"

namespace pstrain::nn {

template <typename T>
Dropout<T>::Dropout(float rate, uint64_t stream, int64_t size, int64_t max_batch)
    : rate_(rate), stream_(stream), scale_(static_cast<size_t>(size * max_batch)) {}

namespace {

uint64_t example_stream(uint64_t stream, uint32_t epoch, uint32_t id) { return mix_seed(mix_seed(stream, epoch), id); }

// A uniform draw in [0, 1) from the top 24 bits (as Rng::uniform_float builds them), kept if >= rate.
bool keep(uint64_t example, int64_t position, float rate) {
  const uint64_t bits = mix_seed(example, static_cast<uint64_t>(position)) >> 40;
  return static_cast<float>(bits) * (1.0f / 16777216.0f) >= rate;
}

}  // namespace

template <typename T>
bool Dropout<T>::kept(uint64_t stream, uint32_t epoch, uint32_t id, int64_t position, float rate) {
  return keep(example_stream(stream, epoch, id), position, rate);
}

template <typename T>
void Dropout<T>::factors(uint64_t stream, const ExampleKeys& keys, int64_t b, int64_t first, int64_t n, float rate, T* out) {
  const T factor = T(1) / (T(1) - static_cast<T>(rate));
  const uint64_t example = example_stream(stream, keys.epoch, keys.ids[b]);
  for (int64_t k = 0; k < n; ++k) out[k] = keep(example, first + k, rate) ? factor : T(0);
}

template <typename T>
void Dropout<T>::forward(const T*, ConstMatMap<T> in, MatMap<T> out) {
  if (keys_.ids == nullptr || rate_ == 0.0f) {
    out = in;
    return;
  }
  const int64_t size = in.rows();
  for (int64_t b = 0; b < in.cols(); ++b) {
    T* s = scale_.data() + b * size;
    factors(stream_, keys_, b, 0, size, rate_, s);
    const T* x = in.col(b).data();
    T* y = out.col(b).data();
    for (int64_t j = 0; j < size; ++j) y[j] = x[j] * s[j];
  }
}

template <typename T>
void Dropout<T>::backward(const T*, ConstMatMap<T>, ConstMatMap<T>, MatMap<T> dout, T*, T* din) {
  if (din == nullptr) return;
  const int64_t n = dout.size();
  if (keys_.ids == nullptr || rate_ == 0.0f) {
    std::copy_n(dout.data(), n, din);
    return;
  }
  for (int64_t i = 0; i < n; ++i) din[i] = dout.data()[i] * scale_[static_cast<size_t>(i)];
}

template class Dropout<float>;
template class Dropout<double>;

}  // namespace pstrain::nn
