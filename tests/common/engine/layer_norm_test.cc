// layer_norm's passes (common/engine/nn/normalization.h) in the float engine: blocks of groups
// computed together give the bits of the formula one group at a time, forward and backward, for
// group counts that are and are not multiples of the block, with and without scale and center.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "common/engine/nn/normalization.h"

using namespace pstrain;

namespace {

struct Expected {
  std::vector<float> y, dgamma, dbeta, dx;
};

// The formula one group after another: statistics summed in double in order, the gradients of
// gamma and beta summed over the groups in order.
Expected one_group_at_a_time(int64_t c, int64_t groups, float epsilon, const float* gamma, const float* beta,
                             const std::vector<float>& x, const std::vector<float>& dy) {
  Expected e{std::vector<float>(x.size()), std::vector<float>(static_cast<size_t>(c), 0.0f),
             std::vector<float>(static_cast<size_t>(c), 0.0f), std::vector<float>(x.size())};
  const double inv_c = 1.0 / static_cast<double>(c);
  for (int64_t g = 0; g < groups; ++g) {
    const float* xs = x.data() + g * c;
    const float* d = dy.data() + g * c;
    double sum = 0, squares = 0;
    for (int64_t k = 0; k < c; ++k) sum += static_cast<double>(xs[k]);
    const double mean_wide = sum * inv_c;
    for (int64_t k = 0; k < c; ++k) {
      const double deviation = static_cast<double>(xs[k]) - mean_wide;
      squares += deviation * deviation;
    }
    const auto mean = static_cast<float>(mean_wide);
    const auto rstd = static_cast<float>(1.0 / std::sqrt(squares * inv_c + static_cast<double>(epsilon)));
    double sum_dxhat = 0, sum_dxhat_xhat = 0;
    for (int64_t k = 0; k < c; ++k) {
      float v = (xs[k] - mean) * rstd;
      if (gamma != nullptr) v *= gamma[k];
      if (beta != nullptr) v += beta[k];
      e.y[static_cast<size_t>(g * c + k)] = v;
      const float xhat = (xs[k] - mean) * rstd;
      if (gamma != nullptr) e.dgamma[static_cast<size_t>(k)] += d[k] * xhat;
      if (beta != nullptr) e.dbeta[static_cast<size_t>(k)] += d[k];
      const float dxhat = gamma != nullptr ? d[k] * gamma[k] : d[k];
      sum_dxhat += dxhat;
      sum_dxhat_xhat += static_cast<double>(dxhat) * static_cast<double>(xhat);
    }
    const auto mean_dxhat = static_cast<float>(sum_dxhat * inv_c);
    const auto mean_dxhat_xhat = static_cast<float>(sum_dxhat_xhat * inv_c);
    for (int64_t k = 0; k < c; ++k) {
      const float xhat = (xs[k] - mean) * rstd;
      const float dxhat = gamma != nullptr ? d[k] * gamma[k] : d[k];
      e.dx[static_cast<size_t>(g * c + k)] = rstd * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat);
    }
  }
  return e;
}

}  // namespace

TEST_CASE("layer_norm's blocks of groups give the bits of one group at a time, forward and backward") {
  std::mt19937 rng(11);
  std::normal_distribution<float> value(0.3f, 2.0f);
  for (const int64_t c : {1, 7, 32, 33}) {
    for (const int64_t positions : {1, 3}) {
      for (const int64_t batch : {1, 2, 5}) {
        for (const bool affine : {true, false}) {
          CAPTURE(c);
          CAPTURE(positions);
          CAPTURE(batch);
          CAPTURE(affine);
          const int64_t size = c * positions, groups = positions * batch;
          // params: gamma at 0, beta at c (or none).
          std::vector<float> params(static_cast<size_t>(2 * c));
          for (float& p : params) p = value(rng);
          std::vector<float> x(static_cast<size_t>(size * batch)), dy(x.size()), y(x.size()), dx(x.size()),
              grads(params.size(), -1.0f);
          for (float& v : x) v = value(rng);
          for (float& v : dy) v = value(rng);
          nn::LayerNorm<float> norm(size, c, 1e-3f, affine ? 0 : -1, affine ? c : -1, batch);
          norm.forward(params.data(), nn::ConstMatMap<float>(x.data(), size, batch),
                       nn::MatMap<float>(y.data(), size, batch));
          std::vector<float> dy_copy = dy;
          norm.backward(params.data(), nn::ConstMatMap<float>(x.data(), size, batch),
                        nn::ConstMatMap<float>(y.data(), size, batch), nn::MatMap<float>(dy_copy.data(), size, batch),
                        grads.data(), dx.data());
          const Expected e = one_group_at_a_time(c, groups, 1e-3f, affine ? params.data() : nullptr,
                                                 affine ? params.data() + c : nullptr, x, dy);
          CHECK(y == e.y);
          CHECK(dx == e.dx);
          if (affine) {
            CHECK(std::vector<float>(grads.begin(), grads.begin() + c) == e.dgamma);
            CHECK(std::vector<float>(grads.begin() + c, grads.end()) == e.dbeta);
          }
        }
      }
    }
  }
}
