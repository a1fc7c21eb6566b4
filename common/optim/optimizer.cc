#include "common/optim/optimizer.h"

#include <Eigen/Core>
#include <cmath>

namespace pstrain::optim {
namespace {

// Below this many parameters an update is not worth waking other threads for.
constexpr int64_t kParallelThreshold = 1 << 16;

using Vec = Eigen::Map<Eigen::ArrayXf>;
using ConstVec = Eigen::Map<const Eigen::ArrayXf>;

Vec view(std::span<float> s) { return Vec(s.data(), static_cast<Eigen::Index>(s.size())); }
Vec view(std::vector<float>& s) { return Vec(s.data(), static_cast<Eigen::Index>(s.size())); }
ConstVec view(std::span<const float> s) { return ConstVec(s.data(), static_cast<Eigen::Index>(s.size())); }

class Sgd final : public Optimizer {
 public:
  explicit Sgd(const OptimizerSpec& s) : lr_(s.learning_rate), momentum_(s.momentum), nesterov_(s.nesterov) {}

  OptimizerState make_state(size_t n) const override {
    OptimizerState state;
    if (momentum_ > 0.0f) state.slots.push_back({"momentum", std::vector<float>(n, 0.0f)});
    return state;
  }

  void apply(std::span<const float> params, std::span<const float> grads, OptimizerState& state,
             std::span<float> out, float lr_scale) const override {
    ConstVec w = view(params);
    ConstVec g = view(grads);
    Vec o = view(out);
    const float lr = lr_ * lr_scale;
    if (momentum_ == 0.0f) {
      o = w - lr * g;
    } else {
      Vec m = view(state.slots[0].values);
      m = momentum_ * m - lr * g;
      if (nesterov_) {
        o = w + (momentum_ * m - lr * g);
      } else {
        o = w + m;
      }
    }
    ++state.iterations;
  }

  double batch_size_exponent() const override { return 1.0; }

 private:
  float lr_, momentum_;
  bool nesterov_;
};

class Adam final : public Optimizer {
 public:
  explicit Adam(const OptimizerSpec& s) : lr_(s.learning_rate), b1_(s.beta_1), b2_(s.beta_2), eps_(s.epsilon) {}

  OptimizerState make_state(size_t n) const override {
    OptimizerState state;
    state.slots.push_back({"m", std::vector<float>(n, 0.0f)});
    state.slots.push_back({"v", std::vector<float>(n, 0.0f)});
    return state;
  }

  void apply(std::span<const float> params, std::span<const float> grads, OptimizerState& state,
             std::span<float> out, float lr_scale) const override {
    const double t = static_cast<double>(++state.iterations);
    const auto alpha = static_cast<float>(lr_ * std::sqrt(1.0 - std::pow(double{b2_}, t)) /
                                          (1.0 - std::pow(double{b1_}, t))) *
                      lr_scale;
    // One fused pass over w, g, m, v: the update is memory-bound, so every extra pass costs.
    const float* w = params.data();
    float* o = out.data();
    const float* g = grads.data();
    float* m = state.slots[0].values.data();
    float* v = state.slots[1].values.data();
    const float one_minus_b1 = 1.0f - b1_, one_minus_b2 = 1.0f - b2_, eps = eps_;
    const auto n = static_cast<int64_t>(params.size());
#pragma omp parallel for simd schedule(static) if (n >= kParallelThreshold)
    for (int64_t i = 0; i < n; ++i) {
      const float mi = m[i] + (g[i] - m[i]) * one_minus_b1;
      const float vi = v[i] + (g[i] * g[i] - v[i]) * one_minus_b2;
      m[i] = mi;
      v[i] = vi;
      o[i] = w[i] - alpha * mi / (std::sqrt(vi) + eps);
    }
  }

  double batch_size_exponent() const override { return 0.5; }

 private:
  float lr_, b1_, b2_, eps_;
};

class Adagrad final : public Optimizer {
 public:
  explicit Adagrad(const OptimizerSpec& s)
      : lr_(s.learning_rate), initial_(s.initial_accumulator_value), eps_(s.epsilon) {}

  OptimizerState make_state(size_t n) const override {
    OptimizerState state;
    state.slots.push_back({"accumulator", std::vector<float>(n, initial_)});
    return state;
  }

  void apply(std::span<const float> params, std::span<const float> grads, OptimizerState& state,
             std::span<float> out, float lr_scale) const override {
    ConstVec w = view(params);
    ConstVec g = view(grads);
    Vec acc = view(state.slots[0].values);
    acc += g.square();
    const float lr = lr_ * lr_scale;
    view(out) = w - lr * g / (acc.sqrt() + eps_);
    ++state.iterations;
  }

  double batch_size_exponent() const override { return 0.5; }

 private:
  float lr_, initial_, eps_;
};

}  // namespace

Slot* OptimizerState::find(const std::string& name) {
  for (auto& s : slots) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerSpec& spec) {
  switch (spec.type) {
    case OptimizerType::kSgd: return std::make_unique<Sgd>(spec);
    case OptimizerType::kAdam: return std::make_unique<Adam>(spec);
    case OptimizerType::kAdagrad: return std::make_unique<Adagrad>(spec);
  }
  return nullptr;
}

}  // namespace pstrain::optim
