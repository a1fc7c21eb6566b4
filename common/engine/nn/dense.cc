#include <algorithm>
#include <type_traits>

#include "common/base/error.h"
#include "common/engine/compute_threads.h"
#include "common/engine/nn/gemm.h"
#include "common/engine/nn/layers.h"
#include "common/engine/nn/row_groups.h"
#include "common/engine/simd/bf16_product.h"
#include "common/engine/simd/kernels.h"

namespace pstrain::nn {
namespace {

// The kernel gradient dout * x^T (out x k, column-major: k features' rows of the [in, out] kernel).
// For float it is simd::product, or simd::product_bf16 in mixed precision (`bf16`): each has one
// order of additions per element (common/engine/simd/kernels.h, bf16_product.h), so a server
// multiplying out a factored push (only its rows, only the nonzero ones, with the product the push
// names) gets the bits a worker's or the trainer's whole product has, on every CPU. The forward and
// the input gradient are oneDNN's or BLAS's products (layers.h): every path computes them on the
// same operands with the same shapes.
template <typename T>
void kernel_gradient(int64_t out, int64_t k, int64_t batch, const T* dout, const T* x, T* grads, bool bf16) {
  if constexpr (std::is_same_v<T, float>) {
    // On every compute thread when called from outside the replicas' threads (one replica:
    // --parallelism blas); the bits are the same.
    if (bf16) {
      simd::product_bf16(out, k, batch, {dout, 1, out}, {x, 1, k}, false, grads, out, threads_for_this_call());
    } else {
      simd::product(out, k, batch, {dout, 1, out}, {x, 1, k}, false, grads, out, threads_for_this_call());
    }
  } else {
    gemm<T>(Op::kNone, Op::kTranspose, out, k, batch, dout, out, x, k, T(0), grads, out);
  }
}

}  // namespace

template <typename T>
Dense<T>::Dense(int64_t in, int64_t out, bool relu, size_t kernel_offset, size_t bias_offset, bool data_input)
    : in_(in), out_(out), relu_(relu), data_input_(data_input), kernel_(kernel_offset), bias_(bias_offset) {}

template <typename T>
Dense<T>::~Dense() = default;

template <typename T>
bool Dense<T>::use_bf16() {
  if constexpr (std::is_same_v<T, float>) {
    if (matmul_bf16_) return false;
    matmul_ = std::make_unique<OneDnnMatmul>(in_, out_, relu_, /*bf16=*/true);
    matmul_bf16_ = true;
    return true;
  } else {
    throw Error("bfloat16 products are for the float engine");
  }
}

template <typename T>
OneDnnMatmul* Dense<T>::matmul() {
  if constexpr (std::is_same_v<T, float>) {
    if (!matmul_ && onednn_matmul_preferred()) matmul_ = std::make_unique<OneDnnMatmul>(in_, out_, relu_, /*bf16=*/false);
  }
  return matmul_.get();
}

template <typename T>
void Dense<T>::forward(const T* params, ConstMatMap<T> in, MatMap<T> out) {
  // The kernel, [in, out] row-major, is the [out x in] column-major matrix W^T.
  if (groups_ > 0) {
    grouped_forward(params, in, out);
    if (relu_) out = out.cwiseMax(T(0));
    return;
  }
  const T* w = params + kernel_;
  ConstVecMap<T> b(params + bias_, out_);
  const int64_t batch = in.cols();
  const bool sparse = data_input_ && gather_active_features(in);
  if constexpr (std::is_same_v<T, float>) {
    if (!sparse && matmul() != nullptr) {  // bias and ReLU inside the product
      matmul_->forward(w, params + bias_, in.data(), batch, out.data());
      return;
    }
  }
  out.colwise() = b;  // then accumulate the product onto the bias (beta = 1): one pass fewer
  if (sparse) {
    sparse_product(w, batch, out.data());
  } else {
    gemm<T>(Op::kNone, Op::kNone, out_, batch, in_, w, out_, in.data(), in_, T(1), out.data(), out_);
  }
  if (relu_) out = out.cwiseMax(T(0));
}

template <typename T>
void Dense<T>::backward(const T* params, ConstMatMap<T> in, ConstMatMap<T> out, MatMap<T> dout, T* grads,
                        T* din) {
  const int64_t batch = in.cols();
  if constexpr (std::is_same_v<T, float>) {
    if (relu_) simd::kernels().relu_mask(out_ * batch, out.data(), dout.data());
  } else {
    if (relu_) dout = (out.array() > T(0)).select(dout, T(0));
  }
  if (!kernel_gradient_) {
    // The caller multiplies the factors (in, dout) out elsewhere.
  } else if (data_input_ && din == nullptr && gather_active_features(in)) {
    sparse_kernel_gradient(dout.data(), batch, grads + kernel_);
  } else if (const uint16_t* rounded = rounded_input(in); rounded != nullptr) {
    // In bfloat16, from the input as the forward rounded it: the bits of kernel_gradient's.
    if constexpr (std::is_same_v<T, float>) {
      simd::product_bf16(out_, in_, batch, {dout.data(), 1, out_}, simd::RoundedRows{rounded, in_}, false,
                         grads + kernel_, out_, threads_for_this_call());
    }
  } else {
    kernel_gradient<T>(out_, in_, batch, dout.data(), in.data(), grads + kernel_, matmul_bf16_);
  }
  if constexpr (std::is_same_v<T, float>) {
    simd::kernels().row_sums(out_, batch, dout.data(), grads + bias_);
  } else {
    VecMap<T>(grads + bias_, out_).noalias() = dout.rowwise().sum();
  }
  if (din == nullptr) return;
  if constexpr (std::is_same_v<T, float>) {
    if (matmul() != nullptr) {
      matmul_->backward_data(params + kernel_, dout.data(), batch, din);
      return;
    }
  }
  gemm<T>(Op::kTranspose, Op::kNone, in_, batch, out_, params + kernel_, out_, dout.data(), out_, T(0), din, in_);
}

template <typename T>
const uint16_t* Dense<T>::rounded_input(ConstMatMap<T> in) {
  if constexpr (std::is_same_v<T, float>) {
    if (matmul_bf16_ && matmul_ != nullptr) return matmul_->rounded_input(in.cols(), in.data());
  }
  return nullptr;
}

template <typename T>
void Dense<T>::set_row_groups(std::vector<uint32_t> group_of_row, uint32_t groups) {
  if (!group_of_row.empty()) {
    if (!data_input_ || static_cast<int64_t>(group_of_row.size()) != in_ ||
        std::any_of(group_of_row.begin(), group_of_row.end(), [&](uint32_t g) { return g >= groups; })) {
      throw Error("row groups need a dense layer on the input and one group below " + std::to_string(groups) +
                  " per kernel row");
    }
  }
  groups_ = group_of_row.empty() ? 0 : groups;
  group_of_row_ = std::move(group_of_row);
  partials_.clear();
}

template <typename T>
void Dense<T>::grouped_forward(const T* params, ConstMatMap<T> in, MatMap<T> out) {
  const int64_t batch = in.cols();
  mark_active_features(in);
  out.colwise() = ConstVecMap<T>(params + bias_, out_);
  for (uint32_t g = 0; g < groups_; ++g) {
    const T* partial = g < partials_.size() ? partials_[g] : nullptr;
    if (partial == nullptr) {
      group_active_.clear();
      for (int64_t j : active_) {
        if (group_of_row_[j] == g) group_active_.push_back(j);
      }
      if (group_active_.empty()) continue;  // adds nothing (the servers send no partial then)
      const auto k = static_cast<int64_t>(group_active_.size());
      group_in_.resize(static_cast<size_t>(k * batch));
      for (int64_t b = 0; b < batch; ++b) {
        const T* x = in.data() + b * in_;
        T* xs = group_in_.data() + b * k;
        for (int64_t i = 0; i < k; ++i) xs[i] = x[group_active_[i]];
      }
      group_rows_.clear();
      for (int64_t j : group_active_) group_rows_.push_back(params + kernel_ + j * out_);
      partial_.resize(static_cast<size_t>(out_ * batch));
      row_group_product<T>(group_rows_, out_, group_in_.data(), batch, active_rows_, partial_.data());
      partial = partial_.data();
    }
    out += ConstMatMap<T>(partial, out_, batch);
  }
  partials_.clear();
}

template <typename T>
void Dense<T>::mark_active_features(ConstMatMap<T> in) {
  const int64_t batch = in.cols();
  auto& seen = active_rows_;  // (borrowed as flags)
  seen.assign(static_cast<size_t>(in_), T(0));
  for (int64_t b = 0; b < batch; ++b) {
    const T* x = in.data() + b * in_;
    for (int64_t j = 0; j < in_; ++j) seen[j] = x[j] != T(0) ? T(1) : seen[j];
  }
  active_.clear();
  for (int64_t j = 0; j < in_; ++j) {
    if (seen[j] != T(0)) active_.push_back(j);
  }
}

template <typename T>
bool Dense<T>::gather_active_features(ConstMatMap<T> in) {
  const int64_t batch = in.cols();
  mark_active_features(in);
  const auto k = static_cast<int64_t>(active_.size());
  // Gathering and scattering cost about what a sixth of the product does.
  if (k * 6 > in_ * 5) return false;
  active_in_.resize(static_cast<size_t>(k * batch));
  for (int64_t b = 0; b < batch; ++b) {
    const T* x = in.data() + b * in_;
    T* xs = active_in_.data() + b * k;
    for (int64_t i = 0; i < k; ++i) xs[i] = x[active_[i]];
  }
  return true;
}

template <typename T>
void Dense<T>::sparse_product(const T* kernel, int64_t batch, T* out) {
  const auto k = static_cast<int64_t>(active_.size());
  if (k == 0) return;
  active_rows_.resize(static_cast<size_t>(out_ * k));
  for (int64_t i = 0; i < k; ++i) std::copy_n(kernel + active_[i] * out_, out_, active_rows_.data() + i * out_);
  gemm<T>(Op::kNone, Op::kNone, out_, batch, k, active_rows_.data(), out_, active_in_.data(), k, T(1), out, out_);
}

template <typename T>
void Dense<T>::sparse_kernel_gradient(const T* dout, int64_t batch, T* kernel_grads) {
  const auto k = static_cast<int64_t>(active_.size());
  active_rows_.resize(static_cast<size_t>(out_ * k));
  if (k > 0) kernel_gradient<T>(out_, k, batch, dout, active_in_.data(), active_rows_.data(), matmul_bf16_);
  int64_t next = 0;  // into active_
  for (int64_t j = 0; j < in_; ++j) {
    T* row = kernel_grads + j * out_;
    if (next < k && active_[next] == j) {
      std::copy_n(active_rows_.data() + next * out_, out_, row);
      ++next;
    } else {
      std::fill_n(row, out_, T(0));
    }
  }
}

template class Dense<float>;
template class Dense<double>;

}  // namespace pstrain::nn
