#include "common/engine/nn/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "common/engine/nn/gemm.h"
#include "common/engine/simd/kernels.h"

namespace pstrain::nn {

template <typename T>
MultiHeadAttention<T>::MultiHeadAttention(Geometry g, Tensors w, int64_t max_batch) : g_(g), w_(w) {
  const int64_t S = g_.steps, B = max_batch;
  const auto hk = static_cast<size_t>(g_.heads * g_.key_dim * S * B), hv = static_cast<size_t>(g_.heads * g_.value_dim * S * B);
  queries_.resize(hk);
  keys_.resize(hk);
  values_.resize(hv);
  context_.resize(hv);
  dqueries_.resize(hk);
  dkeys_.resize(hk);
  dvalues_.resize(hv);
  dcontext_.resize(hv);
  weights_.resize(static_cast<size_t>(B * g_.heads * S * S));
  dscores_.resize(static_cast<size_t>(S * S));
  key_kept_.resize(static_cast<size_t>(S));
  if (g_.dropout > 0.0f) {
    drop_factors_.resize(weights_.size());
    dropped_.resize(static_cast<size_t>(S * S));
  }
}

template <typename T>
typename MultiHeadAttention<T>::Span MultiHeadAttention<T>::span(int64_t b) const {
  int64_t lo = 0, hi = g_.steps;
  while (lo < hi && !kept(b, lo)) ++lo;
  while (hi > lo && !kept(b, hi - 1)) --hi;
  if (lo == hi) return {0, 0};
  return {lo / kSpanAlign * kSpanAlign, hi};
}

template <typename T>
std::vector<typename MultiHeadAttention<T>::Block> MultiHeadAttention<T>::blocks(Span s) const {
  if (!g_.causal) return {{s.lo, s.hi, s.size()}};
  std::vector<Block> out;
  for (int64_t begin = s.lo; begin < s.hi; begin += kCausalBlock) {
    const int64_t end = std::min(s.hi, begin + kCausalBlock);
    out.push_back({begin, end, end - s.lo});
  }
  return out;
}

template <typename T>
void MultiHeadAttention<T>::zero_outside(T* m, int64_t rows, int64_t b, Span s) const {
  T* example = m + b * g_.steps * rows;
  std::fill(example, example + s.lo * rows, T(0));
  std::fill(example + s.hi * rows, example + g_.steps * rows, T(0));
}

template <typename T>
const T* MultiHeadAttention<T>::weighing(const T* a, int64_t b, int64_t h, Span s) {
  if (!dropping()) return a;
  const T* f = drop_factors(b, h);
  const int64_t S = g_.steps;
  for (int64_t i = s.lo; i < s.hi; ++i) {
    for (int64_t j = s.lo; j < s.hi; ++j) dropped_[static_cast<size_t>(i * S + j)] = a[i * S + j] * f[i * S + j];
  }
  return dropped_.data();
}

template <typename T>
void MultiHeadAttention<T>::softmax(int64_t first, int64_t n, T scale, T* column) const {
  const T* allowed = key_kept_.data() + first;
  if constexpr (std::is_same_v<T, float>) {
    simd::kernels().masked_softmax(n, scale, allowed, column);
  } else {  // the double engine's (gradient checks): the same formula, in plain order
    T top = -std::numeric_limits<T>::infinity();
    for (int64_t j = 0; j < n; ++j) {
      if (allowed[j] != T(0)) top = std::max(top, column[j] * scale);
    }
    T sum = T(0);
    for (int64_t j = 0; j < n; ++j) {
      column[j] = allowed[j] != T(0) ? std::exp(column[j] * scale - top) : T(0);
      sum += column[j];
    }
    if (sum > T(0)) {
      for (int64_t j = 0; j < n; ++j) column[j] /= sum;
    }
  }
}

template <typename T>
void MultiHeadAttention<T>::softmax_backward(int64_t n, T scale, const T* weight, T* column) const {
  if constexpr (std::is_same_v<T, float>) {
    simd::kernels().softmax_backward(n, scale, weight, column);
  } else {
    T dot = T(0);
    for (int64_t j = 0; j < n; ++j) dot += weight[j] * column[j];
    for (int64_t j = 0; j < n; ++j) column[j] = weight[j] * (column[j] - dot) * scale;
  }
}

template <typename T>
void MultiHeadAttention<T>::project(const T* kernel, size_t bias, const T* params, const T* x, int64_t rows, int64_t inner,
                                    int64_t columns, T* y) const {
  gemm<T>(Op::kNone, Op::kNone, rows, columns, inner, kernel, rows, x, inner, T(0), y, rows);
  if (bias == kNoBias) return;
  const T* b = params + bias;
  for (int64_t col = 0; col < columns; ++col) {
    for (int64_t r = 0; r < rows; ++r) y[col * rows + r] += b[r];
  }
}

template <typename T>
void MultiHeadAttention<T>::project_backward(size_t kernel, size_t bias, const T* params, const T* x, const T* dy,
                                             int64_t rows, int64_t inner, int64_t columns, T* grads, T* dx,
                                             bool accumulate) const {
  gemm<T>(Op::kNone, Op::kTranspose, rows, inner, columns, dy, rows, x, inner, T(0), grads + kernel, rows);
  if (bias != kNoBias) {
    T* db = grads + bias;
    std::fill_n(db, rows, T(0));
    for (int64_t col = 0; col < columns; ++col) {
      for (int64_t r = 0; r < rows; ++r) db[r] += dy[col * rows + r];
    }
  }
  if (dx != nullptr) {
    gemm<T>(Op::kTranspose, Op::kNone, inner, columns, rows, params + kernel, rows, dy, rows, accumulate ? T(1) : T(0), dx,
            inner);
  }
}

template <typename T>
void MultiHeadAttention<T>::forward(const T* params, ConstMatMap<T> in, MatMap<T> out) {
  const int64_t S = g_.steps, C = g_.channels, H = g_.heads, K = g_.key_dim, V = g_.value_dim, B = in.cols();
  const int64_t HK = H * K, HV = H * V;
  // Every step of every example is a column: the batch is C x (S B) as it lies.
  project(params + w_.query, w_.query_bias, params, in.data(), HK, C, S * B, queries_.data());
  project(params + w_.key, w_.key_bias, params, in.data(), HK, C, S * B, keys_.data());
  project(params + w_.value, w_.value_bias, params, in.data(), HV, C, S * B, values_.data());
  const T scale = T(1) / std::sqrt(static_cast<T>(K));
  for (int64_t b = 0; b < B; ++b) {
    // Only the span's keys and queries: every weight outside it is zero (padding), and so is
    // every context column outside it.
    const Span sp = span(b);
    const int64_t L = sp.size();
    const std::vector<Block> queries = blocks(sp);
    zero_outside(context_.data(), HV, b, sp);
    for (int64_t j = sp.lo; j < sp.hi; ++j) key_kept_[static_cast<size_t>(j)] = kept(b, j) ? T(1) : T(0);
    for (int64_t h = 0; h < H && L > 0; ++h) {
      T* a = weights(b, h);
      const int64_t qk = (b * S + sp.lo) * HK + h * K, v = (b * S + sp.lo) * HV + h * V;
      // column i: query i's scores over the keys it may see (causal: a block's queries see up to
      // its last; the rest of each column is zeroed below)
      for (const Block q : queries) {
        gemm<T>(Op::kTranspose, Op::kNone, q.seen, q.size(), K, keys_.data() + qk, HK,
                queries_.data() + qk + (q.begin - sp.lo) * HK, HK, T(0), a + q.begin * S + sp.lo, S);
      }
      for (int64_t i = sp.lo; i < sp.hi; ++i) {
        T* column = a + i * S + sp.lo;
        const int64_t n = !kept(b, i) ? 0 : (g_.causal ? i + 1 : sp.hi) - sp.lo;  // the keys query i may see
        softmax(sp.lo, n, scale, column);
        std::fill(column + n, column + L, T(0));
        if (dropping()) {
          Dropout<T>::factors(g_.stream, example_keys_, b, (h * S + i) * S + sp.lo, L, g_.dropout,
                              drop_factors(b, h) + i * S + sp.lo);
        }
      }
      const T* w = weighing(a, b, h, sp);
      for (const Block q : queries) {
        gemm<T>(Op::kNone, Op::kNone, V, q.size(), q.seen, values_.data() + v, HV, w + q.begin * S + sp.lo, S, T(0),
                context_.data() + v + (q.begin - sp.lo) * HV, HV);
      }
    }
  }
  project(params + w_.output, w_.output_bias, params, context_.data(), C, HV, S * B, out.data());
}

template <typename T>
void MultiHeadAttention<T>::backward(const T* params, ConstMatMap<T> in, ConstMatMap<T> out, MatMap<T> dout, T* grads,
                                     T* din) {
  (void)out;
  const int64_t S = g_.steps, C = g_.channels, H = g_.heads, K = g_.key_dim, V = g_.value_dim, B = in.cols();
  const int64_t HK = H * K, HV = H * V;
  project_backward(w_.output, w_.output_bias, params, context_.data(), dout.data(), C, HV, S * B, grads,
                   dcontext_.data(), false);
  const T scale = T(1) / std::sqrt(static_cast<T>(K));
  T* ds = dscores_.data();
  for (int64_t b = 0; b < B; ++b) {
    const Span sp = span(b);  // as forward: outside it every weight and so every gradient is zero
    const int64_t L = sp.size();
    const std::vector<Block> queries = blocks(sp);
    zero_outside(dqueries_.data(), HK, b, sp);
    zero_outside(dkeys_.data(), HK, b, sp);
    zero_outside(dvalues_.data(), HV, b, sp);
    for (int64_t h = 0; h < H && L > 0; ++h) {
      const T* a = weights(b, h);
      const int64_t qk = (b * S + sp.lo) * HK + h * K, v = (b * S + sp.lo) * HV + h * V;
      const T* dcontext = dcontext_.data() + v;
      const T* w = weighing(a, b, h, sp);
      // Each block's columns hold q.seen scores' gradients (as forward computed them); the keys
      // of a block (the same blocks) are seen by the queries from its first to the span's end.
      for (const Block q : queries) {
        const int64_t at = q.begin - sp.lo, later = sp.hi - q.begin;
        gemm<T>(Op::kTranspose, Op::kNone, q.seen, q.size(), V, values_.data() + v, HV, dcontext + at * HV, HV, T(0),
                ds + q.begin * S + sp.lo, S);
        gemm<T>(Op::kNone, Op::kTranspose, V, q.size(), later, dcontext + at * HV, HV, w + q.begin * S + q.begin, S,
                T(0), dvalues_.data() + v + at * HV, HV);
      }
      for (const Block q : queries) {
        for (int64_t i = q.begin; i < q.end; ++i) {
          T* column = ds + i * S + sp.lo;
          if (dropping()) {  // through the dropout to the weights
            const T* f = drop_factors(b, h) + i * S + sp.lo;
            for (int64_t j = 0; j < q.seen; ++j) column[j] *= f[j];
          }
          softmax_backward(q.seen, scale, a + i * S + sp.lo, column);  // the scale folded in
        }
      }
      for (const Block q : queries) {
        const int64_t at = q.begin - sp.lo, later = sp.hi - q.begin;
        gemm<T>(Op::kNone, Op::kNone, K, q.size(), q.seen, keys_.data() + qk, HK, ds + q.begin * S + sp.lo, S, T(0),
                dqueries_.data() + qk + at * HK, HK);
        gemm<T>(Op::kNone, Op::kTranspose, K, q.size(), later, queries_.data() + qk + at * HK, HK,
                ds + q.begin * S + q.begin, S, T(0), dkeys_.data() + qk + at * HK, HK);
      }
    }
  }
  project_backward(w_.query, w_.query_bias, params, in.data(), dqueries_.data(), HK, C, S * B, grads, din, false);
  project_backward(w_.key, w_.key_bias, params, in.data(), dkeys_.data(), HK, C, S * B, grads, din, true);
  project_backward(w_.value, w_.value_bias, params, in.data(), dvalues_.data(), HV, C, S * B, grads, din, true);
}

template <typename T>
void PositionEmbedding<T>::forward(const T* params, ConstMatMap<T> in, MatMap<T> out) {
  const T* p = params + positions_;
  for (int64_t b = 0; b < in.cols(); ++b) {
    const T* x = in.data() + b * size_;
    T* y = out.data() + b * size_;
    for (int64_t k = 0; k < size_; ++k) y[k] = x[k] + p[k];
  }
}

template <typename T>
void PositionEmbedding<T>::backward(const T* params, ConstMatMap<T> in, ConstMatMap<T> out, MatMap<T> dout, T* grads,
                                    T* din) {
  (void)params;
  (void)out;
  T* dp = grads + positions_;
  std::fill_n(dp, size_, T(0));
  for (int64_t b = 0; b < in.cols(); ++b) {
    const T* dy = dout.data() + b * size_;
    for (int64_t k = 0; k < size_; ++k) dp[k] += dy[k];
  }
  if (din != nullptr) std::copy_n(dout.data(), size_ * in.cols(), din);
}

template class MultiHeadAttention<float>;
template class MultiHeadAttention<double>;
template class PositionEmbedding<float>;
template class PositionEmbedding<double>;

}  // namespace pstrain::nn
