// layer_norm's passes (common/engine/nn/normalization.h) in the float and double engines: blocks
// of groups computed together give the bits of the formula one group at a time, forward and
// backward, for group counts that are and are not multiples of the block, with scale and center
// each on or off, and without an input gradient. (This file and normalization.cc build with
// -ffp-contract=off, so a -march=native build cannot fuse the two sides differently.)
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "common/engine/nn/normalization.h"

using namespace pstrain;

namespace {

template <typename T>
struct Expected {
  std::vector<T> y, dgamma, dbeta, dx;
};

// The formula one group after another: statistics summed in double in order, the gradients of
// gamma and beta summed over the groups in order.
template <typename T>
Expected<T> one_group_at_a_time(int64_t c, int64_t groups, T epsilon, const T* gamma, const T* beta,
                                const std::vector<T>& x, const std::vector<T>& dy) {
  Expected<T> e{std::vector<T>(x.size()), std::vector<T>(static_cast<size_t>(c), T(0)),
                std::vector<T>(static_cast<size_t>(c), T(0)), std::vector<T>(x.size())};
  const double inv_c = 1.0 / static_cast<double>(c);
  for (int64_t g = 0; g < groups; ++g) {
    const T* xs = x.data() + g * c;
    const T* d = dy.data() + g * c;
    double sum = 0, squares = 0;
    for (int64_t k = 0; k < c; ++k) sum += static_cast<double>(xs[k]);
    const double mean_wide = sum * inv_c;
    for (int64_t k = 0; k < c; ++k) {
      const double deviation = static_cast<double>(xs[k]) - mean_wide;
      squares += deviation * deviation;
    }
    const auto mean = static_cast<T>(mean_wide);
    const auto rstd = static_cast<T>(1.0 / std::sqrt(squares * inv_c + static_cast<double>(epsilon)));
    double sum_dxhat = 0, sum_dxhat_xhat = 0;
    for (int64_t k = 0; k < c; ++k) {
      T v = (xs[k] - mean) * rstd;
      if (gamma != nullptr) v *= gamma[k];
      if (beta != nullptr) v += beta[k];
      e.y[static_cast<size_t>(g * c + k)] = v;
      const T xhat = (xs[k] - mean) * rstd;
      if (gamma != nullptr) e.dgamma[static_cast<size_t>(k)] += d[k] * xhat;
      if (beta != nullptr) e.dbeta[static_cast<size_t>(k)] += d[k];
      const T dxhat = gamma != nullptr ? d[k] * gamma[k] : d[k];
      sum_dxhat += dxhat;
      sum_dxhat_xhat += static_cast<double>(dxhat) * static_cast<double>(xhat);
    }
    const auto mean_dxhat = static_cast<T>(sum_dxhat * inv_c);
    const auto mean_dxhat_xhat = static_cast<T>(sum_dxhat_xhat * inv_c);
    for (int64_t k = 0; k < c; ++k) {
      const T xhat = (xs[k] - mean) * rstd;
      const T dxhat = gamma != nullptr ? d[k] * gamma[k] : d[k];
      e.dx[static_cast<size_t>(g * c + k)] = rstd * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat);
    }
  }
  return e;
}

template <typename T>
void check_against_one_group_at_a_time() {
  std::mt19937 rng(11);
  std::normal_distribution<double> value(0.3, 2.0);
  for (const int64_t c : {1, 7, 32, 33}) {
    for (const int64_t positions : {1, 3, 4}) {
      for (const int64_t batch : {1, 2, 5, 8}) {
        for (const bool scale : {true, false}) {
          for (const bool center : {true, false}) {
            CAPTURE(c);
            CAPTURE(positions);
            CAPTURE(batch);
            CAPTURE(scale);
            CAPTURE(center);
            const int64_t size = c * positions, groups = positions * batch;
            // params: gamma at 0, beta at c (when on).
            std::vector<T> params(static_cast<size_t>(2 * c));
            for (T& p : params) p = static_cast<T>(value(rng));
            std::vector<T> x(static_cast<size_t>(size * batch)), dy(x.size()), y(x.size()), dx(x.size());
            std::vector<T> grads(params.size(), T(-1)), grads_without_dx(params.size(), T(-1));
            for (T& v : x) v = static_cast<T>(value(rng));
            for (T& v : dy) v = static_cast<T>(value(rng));
            nn::LayerNorm<T> norm(size, c, 1e-3f, scale ? 0 : -1, center ? c : -1, batch);
            const nn::ConstMatMap<T> in(x.data(), size, batch);
            norm.forward(params.data(), in, nn::MatMap<T>(y.data(), size, batch));
            std::vector<T> dy_copy = dy;
            norm.backward(params.data(), in, nn::ConstMatMap<T>(y.data(), size, batch),
                          nn::MatMap<T>(dy_copy.data(), size, batch), grads.data(), dx.data());
            dy_copy = dy;
            norm.backward(params.data(), in, nn::ConstMatMap<T>(y.data(), size, batch),
                          nn::MatMap<T>(dy_copy.data(), size, batch), grads_without_dx.data(), nullptr);
            const T* gamma = scale ? params.data() : nullptr;
            const T* beta = center ? params.data() + c : nullptr;
            const Expected<T> e = one_group_at_a_time<T>(c, groups, static_cast<T>(1e-3f), gamma, beta, x, dy);
            CHECK(y == e.y);
            CHECK(dx == e.dx);
            CHECK(grads_without_dx == grads);
            if (scale) CHECK(std::vector<T>(grads.begin(), grads.begin() + c) == e.dgamma);
            if (center) CHECK(std::vector<T>(grads.begin() + c, grads.end()) == e.dbeta);
          }
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("layer_norm's blocks of groups: the bits of one group at a time, forward and backward, float and double") {
  check_against_one_group_at_a_time<float>();
  check_against_one_group_at_a_time<double>();
}
