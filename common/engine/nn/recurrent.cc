#include "common/engine/nn/recurrent.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "common/engine/nn/gemm.h"

namespace pstrain::nn {
namespace {

template <typename T>
T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// tanh: libm's (double: the reference tests' precision); in float 1 - 2 / (1 + e^2x), one expf
// instead of libm's expm1f-based tanhf (which took 30% of a float LSTM step): within 1.8e-7 of
// tanh in absolute value over every 97th float (tanhf: 1.0e-7), the same on every CPU; a float
// layer against the double one: tests/common/engine/recurrent_test.cc.
template <typename T>
T tanh_of(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return 1.0f - 2.0f / (1.0f + std::exp(2.0f * x));
  } else {
    return std::tanh(x);
  }
}

}  // namespace

template <typename T>
Recurrent<T>::Recurrent(Geometry g, std::vector<Tensors> directions, int64_t max_batch)
    : g_(g), directions_(std::move(directions)) {
  const auto d = static_cast<int64_t>(directions_.size());
  const int64_t G = gate_rows(), U = g_.units, S = g_.steps, B = max_batch;
  input_products_.resize(static_cast<size_t>(G * S * B));
  dinput_products_.resize(input_products_.size());
  gates_.resize(static_cast<size_t>(d * S * G * B));
  cells_.resize(static_cast<size_t>(d * S * U * B));
  states_.resize(cells_.size());
  recurrent_.resize(static_cast<size_t>(G * B));
  dgates_.resize(recurrent_.size());
  drecurrent_.resize(recurrent_.size());
  dstate_.resize(static_cast<size_t>(U * B));
  dcell_.resize(dstate_.size());
  zeros_.assign(dstate_.size(), T(0));
  drecurrent_bias_.resize(static_cast<size_t>(G));
}

template <typename T>
void Recurrent<T>::forward_direction(size_t d, const T* params, const T* in, int64_t batch) {
  const Tensors& w = directions_[d];
  const int64_t G = gate_rows(), U = g_.units, S = g_.steps, C = g_.channels, B = batch;
  T* xw = input_products_.data();
  // Every step's input product at once: the sequences are C x (S B) columns as they lie.
  gemm<T>(Op::kNone, Op::kNone, G, S * B, C, params + w.kernel, G, in, C, T(0), xw, G);
  const T* bias = params + w.bias;
  for (int64_t col = 0; col < S * B; ++col) {
    for (int64_t j = 0; j < G; ++j) xw[col * G + j] += bias[j];
  }
  const T* recurrent_bias = bias + G;  // GRU: the bias' second row
  for (int64_t s = 0; s < S; ++s) {
    const int64_t t = position(d, s);
    const T* h_prev = s == 0 ? zeros_.data() : state(d, s - 1, B);
    T* rec = recurrent_.data();
    gemm<T>(Op::kNone, Op::kNone, G, B, U, params + w.recurrent, G, h_prev, U, T(0), rec, G);
    T* gates_out = gates(d, s, B);
    T* cells_out = cell(d, s, B);
    T* h = state(d, s, B);
    for (int64_t b = 0; b < B; ++b) {
      const T* x = xw + (b * S + t) * G;
      const T* r = rec + b * G;
      T* a = gates_out + b * G;
      if (!kept(b, t)) {  // masked: the state carries over
        std::copy_n(h_prev + b * U, U, h + b * U);
        std::copy_n((s == 0 ? zeros_.data() : cell(d, s - 1, B)) + b * U, U, cells_out + b * U);
        std::fill_n(a, G, T(0));
        continue;
      }
      if (g_.cell == Cell::kLstm) {
        const T* c_prev = (s == 0 ? zeros_.data() : cell(d, s - 1, B)) + b * U;
        for (int64_t u = 0; u < U; ++u) {
          const T i = sigmoid(x[u] + r[u]);
          const T f = sigmoid(x[U + u] + r[U + u]);
          const T g = tanh_of(x[2 * U + u] + r[2 * U + u]);
          const T o = sigmoid(x[3 * U + u] + r[3 * U + u]);
          a[u] = i;
          a[U + u] = f;
          a[2 * U + u] = g;
          a[3 * U + u] = o;
          const T c = f * c_prev[u] + i * g;
          cells_out[b * U + u] = c;
          h[b * U + u] = o * tanh_of(c);
        }
      } else {
        const T* hp = h_prev + b * U;
        for (int64_t u = 0; u < U; ++u) {
          const T z = sigmoid(x[u] + (r[u] + recurrent_bias[u]));
          const T rr = sigmoid(x[U + u] + (r[U + u] + recurrent_bias[U + u]));
          const T rh = r[2 * U + u] + recurrent_bias[2 * U + u];
          const T n = tanh_of(x[2 * U + u] + rr * rh);
          a[u] = z;
          a[U + u] = rr;
          a[2 * U + u] = n;
          cells_out[b * U + u] = rh;
          h[b * U + u] = z * hp[u] + (T(1) - z) * n;
        }
      }
    }
  }
}

template <typename T>
void Recurrent<T>::forward(const T* params, ConstMatMap<T> in, MatMap<T> out) {
  const int64_t B = in.cols(), U = g_.units, S = g_.steps;
  const auto width = static_cast<int64_t>(directions_.size()) * U;
  for (size_t d = 0; d < directions_.size(); ++d) {
    forward_direction(d, params, in.data(), B);
    for (int64_t b = 0; b < B; ++b) {
      T* column = out.data() + b * out.rows();
      if (!g_.return_sequences) {
        std::copy_n(state(d, S - 1, B) + b * U, U, column + static_cast<int64_t>(d) * U);
        continue;
      }
      for (int64_t s = 0; s < S; ++s) {
        T* at = column + position(d, s) * width + static_cast<int64_t>(d) * U;
        if (kept(b, position(d, s))) std::copy_n(state(d, s, B) + b * U, U, at);
        else std::fill_n(at, U, T(0));  // a masked step's output
      }
    }
  }
}

template <typename T>
void Recurrent<T>::backward_direction(size_t d, const T* params, const T* in, const T* dout, int64_t batch, T* grads,
                                      T* din) {
  const Tensors& w = directions_[d];
  const int64_t G = gate_rows(), U = g_.units, S = g_.steps, C = g_.channels, B = batch;
  const auto width = static_cast<int64_t>(directions_.size()) * U;
  const int64_t out_rows = g_.return_sequences ? S * width : width;
  T* dxw = dinput_products_.data();
  T* recurrent_grads = grads + w.recurrent;
  std::fill_n(recurrent_grads, U * G, T(0));
  std::vector<T>& recurrent_bias_grads = drecurrent_bias_;
  std::fill(recurrent_bias_grads.begin(), recurrent_bias_grads.end(), T(0));
  T* dh = dstate_.data();
  T* dc = dcell_.data();
  std::fill_n(dh, U * B, T(0));
  std::fill_n(dc, U * B, T(0));
  T* dg = dgates_.data();      // the gates' pre-activation gradients (the input side)
  T* drec = drecurrent_.data();  // the recurrent product's gradients (GRU: differs in the h gate)
  for (int64_t s = S - 1; s >= 0; --s) {
    const int64_t t = position(d, s);
    for (int64_t b = 0; b < B; ++b) {
      if (g_.return_sequences && !kept(b, t)) continue;  // a masked step's output is a constant 0
      const T* from = g_.return_sequences ? dout + b * out_rows + t * width + static_cast<int64_t>(d) * U
                      : s == S - 1        ? dout + b * out_rows + static_cast<int64_t>(d) * U
                                          : nullptr;
      if (from != nullptr) {
        for (int64_t u = 0; u < U; ++u) dh[b * U + u] += from[u];
      }
    }
    const T* h_prev = s == 0 ? zeros_.data() : state(d, s - 1, B);
    const T* a_all = gates(d, s, B);
    const T* cells_in = cell(d, s, B);
    for (int64_t b = 0; b < B; ++b) {
      const T* a = a_all + b * G;
      T* g_out = dg + b * G;
      T* r_out = drec + b * G;
      if (!kept(b, t)) {  // masked: dh and dc carry over to the step before, the gates take nothing
        std::fill_n(g_out, G, T(0));
        std::fill_n(r_out, G, T(0));
        for (int64_t j = 0; j < G; ++j) dxw[(b * S + t) * G + j] = T(0);
        continue;
      }
      if (g_.cell == Cell::kLstm) {
        const T* c_prev = (s == 0 ? zeros_.data() : cell(d, s - 1, B)) + b * U;
        for (int64_t u = 0; u < U; ++u) {
          const T i = a[u], f = a[U + u], g = a[2 * U + u], o = a[3 * U + u];
          const T tc = tanh_of(cells_in[b * U + u]);
          const T dhv = dh[b * U + u];
          const T dcv = dc[b * U + u] + dhv * o * (T(1) - tc * tc);
          g_out[u] = dcv * g * i * (T(1) - i);
          g_out[U + u] = dcv * c_prev[u] * f * (T(1) - f);
          g_out[2 * U + u] = dcv * i * (T(1) - g * g);
          g_out[3 * U + u] = dhv * tc * o * (T(1) - o);
          dc[b * U + u] = dcv * f;
          dh[b * U + u] = T(0);  // (all of it goes through the gates: the recurrent product below)
        }
        std::copy_n(g_out, G, r_out);
      } else {
        const T* hp = h_prev + b * U;
        for (int64_t u = 0; u < U; ++u) {
          const T z = a[u], r = a[U + u], n = a[2 * U + u];
          const T rh = cells_in[b * U + u];
          const T dhv = dh[b * U + u];
          const T dn = dhv * (T(1) - z) * (T(1) - n * n);
          const T dz = dhv * (hp[u] - n) * z * (T(1) - z);
          const T dr = dn * rh * r * (T(1) - r);
          g_out[u] = r_out[u] = dz;
          g_out[U + u] = r_out[U + u] = dr;
          g_out[2 * U + u] = dn;
          r_out[2 * U + u] = dn * r;
          dh[b * U + u] = dhv * z;  // the direct path; the recurrent product's is added below
        }
        for (int64_t j = 0; j < G; ++j) recurrent_bias_grads[static_cast<size_t>(j)] += r_out[j];
      }
      for (int64_t j = 0; j < G; ++j) dxw[(b * S + t) * G + j] = g_out[j];
    }
    gemm<T>(Op::kNone, Op::kTranspose, G, U, B, drec, G, h_prev, U, T(1), recurrent_grads, G);
    gemm<T>(Op::kTranspose, Op::kNone, U, B, G, params + w.recurrent, G, drec, G, T(1), dh, U);
  }
  gemm<T>(Op::kNone, Op::kTranspose, G, C, S * B, dxw, G, in, C, T(0), grads + w.kernel, G);
  T* bias_grads = grads + w.bias;
  std::fill_n(bias_grads, G, T(0));
  for (int64_t col = 0; col < S * B; ++col) {
    for (int64_t j = 0; j < G; ++j) bias_grads[j] += dxw[col * G + j];
  }
  if (g_.cell == Cell::kGru) std::copy(recurrent_bias_grads.begin(), recurrent_bias_grads.end(), bias_grads + G);
  if (din != nullptr) gemm<T>(Op::kTranspose, Op::kNone, C, S * B, G, params + w.kernel, G, dxw, G, d == 0 ? T(0) : T(1), din, C);
}

template <typename T>
void Recurrent<T>::backward(const T* params, ConstMatMap<T> in, ConstMatMap<T>, MatMap<T> dout, T* grads, T* din) {
  const int64_t B = in.cols();
  for (size_t d = 0; d < directions_.size(); ++d) {
    backward_direction(d, params, in.data(), dout.data(), B, grads, din);
  }
}

template class Recurrent<float>;
template class Recurrent<double>;

}  // namespace pstrain::nn
