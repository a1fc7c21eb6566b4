#include "common/engine/nn/embedding.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/base/error.h"

namespace pstrain::nn {

template <typename T>
int64_t Embedding<T>::id_at(ConstMatMap<T> in, int64_t i, int64_t b) const {
  const T v = in(i, b);
  if (combiner_ != Combiner::kNone && v < T(0) && v == std::floor(v)) return -1;
  if (!(v >= T(0) && v < static_cast<T>(input_dim_)) || v != std::floor(v)) {
    throw Error("embedding: input " + std::to_string(static_cast<double>(v)) + " (value " + std::to_string(i) +
                " of an example) is not an id in 0.." + std::to_string(input_dim_ - 1));
  }
  return static_cast<int64_t>(v);
}

template <typename T>
const SparseTableRows<T>& Embedding<T>::rows() const {
  if (rows_ == nullptr) throw Error("embedding: a sparse table's layer was given no rows for the step");
  return *rows_;
}

template <typename T>
size_t Embedding<T>::row_index(int64_t id) const {
  const auto ids = rows().ids;
  const auto it = std::lower_bound(ids.begin(), ids.end(), static_cast<uint32_t>(id));
  if (it == ids.end() || *it != id) {
    throw Error("embedding: id " + std::to_string(id) + " is not among the step's rows of the sparse table");
  }
  return static_cast<size_t>(it - ids.begin());
}

template <typename T>
const T* Embedding<T>::row_of(const T* params, int64_t id) const {
  return rows_ != nullptr ? rows_->values[row_index(id)] : params + table_ + id * output_dim_;
}

template <typename T>
T Embedding<T>::divisor(ConstMatMap<T> in, int64_t b) const {
  if (combiner_ != Combiner::kMean) return T(1);
  int64_t count = 0;
  for (int64_t i = 0; i < in.rows(); ++i) count += id_at(in, i, b) >= 0 ? 1 : 0;
  return static_cast<T>(std::max<int64_t>(count, 1));
}

template <typename T>
void Embedding<T>::forward(const T* params, ConstMatMap<T> in, MatMap<T> out) {
  for (int64_t b = 0; b < in.cols(); ++b) {
    T* y = out.col(b).data();
    if (combiner_ == Combiner::kNone) {
      for (int64_t i = 0; i < in.rows(); ++i) std::copy_n(row_of(params, id_at(in, i, b)), output_dim_, y + i * output_dim_);
      continue;
    }
    std::fill_n(y, output_dim_, T(0));
    for (int64_t i = 0; i < in.rows(); ++i) {
      const int64_t id = id_at(in, i, b);
      if (id < 0) continue;
      const T* row = row_of(params, id);
      for (int64_t k = 0; k < output_dim_; ++k) y[k] += row[k];
    }
    const T n = divisor(in, b);
    if (n != T(1)) {
      for (int64_t k = 0; k < output_dim_; ++k) y[k] /= n;
    }
  }
}

template <typename T>
void Embedding<T>::backward(const T*, ConstMatMap<T> in, ConstMatMap<T>, MatMap<T> dout, T* grads, T* din) {
  T* dtable = sparse() ? rows().grads : grads + table_;
  std::fill_n(dtable, (sparse() ? static_cast<int64_t>(rows().ids.size()) : input_dim_) * output_dim_, T(0));
  for (int64_t b = 0; b < in.cols(); ++b) {
    const T n = divisor(in, b);
    for (int64_t i = 0; i < in.rows(); ++i) {
      const int64_t id = id_at(in, i, b);
      if (id < 0) continue;
      T* row = dtable + (sparse() ? static_cast<int64_t>(row_index(id)) : id) * output_dim_;
      const T* d = dout.col(b).data() + (combiner_ == Combiner::kNone ? i * output_dim_ : 0);
      if (n == T(1)) {
        for (int64_t k = 0; k < output_dim_; ++k) row[k] += d[k];
      } else {
        for (int64_t k = 0; k < output_dim_; ++k) row[k] += d[k] / n;
      }
    }
  }
  if (din != nullptr) std::fill_n(din, in.size(), T(0));
}

template class Embedding<float>;
template class Embedding<double>;

}  // namespace pstrain::nn
