#include "common/engine/optim/optimizer.h"

#include <cmath>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "common/engine/optim/schedule.h"
#include "common/engine/simd/kernels.h"

namespace pstrain {

const char* optimizer_type_name(OptimizerType type) {
  switch (type) {
    case OptimizerType::kSgd: return "sgd";
    case OptimizerType::kAdam: return "adam";
    case OptimizerType::kAdagrad: return "adagrad";
    case OptimizerType::kRmsprop: return "rmsprop";
    case OptimizerType::kAdamW: return "adamw";
  }
  return "?";
}

}  // namespace pstrain

namespace pstrain::optim {
namespace {

// Below this many parameters an update is not worth waking other threads for.
constexpr int64_t kParallelThreshold = 1 << 16;

// Calls f(begin, end) over [0, n) split across the OpenMP threads (one call below the threshold).
// The updates are element-wise and their kernels give an element the same value wherever a range
// starts (common/engine/simd/kernels.h), so the split never changes a result.
template <typename F>
void over_threads(int64_t n, const F& f) {
#ifdef _OPENMP
  if (n >= kParallelThreshold && omp_get_max_threads() > 1 && !omp_in_parallel()) {
#pragma omp parallel
    {
      const int64_t t = omp_get_thread_num(), threads = omp_get_num_threads();
      // Boundaries on whole cache lines, so no two threads write one.
      const int64_t begin = n * t / threads / 16 * 16;
      const int64_t end = t + 1 == threads ? n : n * (t + 1) / threads / 16 * 16;
      f(begin, end);
    }
    return;
  }
#endif
  f(0, n);
}

// Decoupled weight decay (Keras 3's _apply_weight_decay), before the update: out = w - w * wd * lr.
// Returns where the update reads its parameters from then.
const float* apply_weight_decay(std::span<const float> params, std::span<float> out, float weight_decay, float lr) {
  if (weight_decay == 0.0f) return params.data();
  const float* w = params.data();
  float* o = out.data();
  over_threads(static_cast<int64_t>(params.size()), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) o[i] = w[i] - w[i] * weight_decay * lr;
  });
  return o;
}

class Sgd final : public Optimizer {
 public:
  explicit Sgd(const OptimizerSpec& s) : spec_(s), momentum_(s.momentum), nesterov_(s.nesterov) {}

  OptimizerState make_state(size_t n) const override {
    OptimizerState state;
    if (momentum_ > 0.0f) state.slots.push_back({"momentum", std::vector<float>(n, 0.0f)});
    return state;
  }

  void apply(std::span<const float> params, std::span<const float> grads, OptimizerState& state,
             std::span<float> out, float lr_scale) const override {
    const float lr = learning_rate_at(spec_, state.iterations) * lr_scale;
    const float* w = apply_weight_decay(params, out, spec_.weight_decay, lr);
    const float* g = grads.data();
    float* o = out.data();
    const simd::KernelTable& k = simd::kernels();
    if (momentum_ == 0.0f) {
      over_threads(static_cast<int64_t>(params.size()),
                   [&](int64_t b, int64_t e) { k.sgd(e - b, w + b, g + b, o + b, lr); });
    } else {
      float* m = state.slots[0].values.data();
      over_threads(static_cast<int64_t>(params.size()), [&](int64_t b, int64_t e) {
        k.momentum(e - b, w + b, g + b, m + b, o + b, lr, momentum_, nesterov_);
      });
    }
    ++state.iterations;
  }

  double batch_size_exponent() const override { return 1.0; }

 private:
  OptimizerSpec spec_;
  float momentum_;
  bool nesterov_;
};

class Adam final : public Optimizer {
 public:
  explicit Adam(const OptimizerSpec& s) : spec_(s), b1_(s.beta_1), b2_(s.beta_2), eps_(s.epsilon) {}

  OptimizerState make_state(size_t n) const override {
    OptimizerState state;
    state.slots.push_back({"m", std::vector<float>(n, 0.0f)});
    state.slots.push_back({"v", std::vector<float>(n, 0.0f)});
    return state;
  }

  void apply(std::span<const float> params, std::span<const float> grads, OptimizerState& state,
             std::span<float> out, float lr_scale) const override {
    const float lr = learning_rate_at(spec_, state.iterations);
    const float* w = apply_weight_decay(params, out, spec_.weight_decay, lr * lr_scale);
    const double t = static_cast<double>(++state.iterations);
    const auto alpha = static_cast<float>(lr * std::sqrt(1.0 - std::pow(double{b2_}, t)) /
                                          (1.0 - std::pow(double{b1_}, t))) *
                      lr_scale;
    // One fused pass over w, g, m, v: the update is memory-bound, so every extra pass costs.
    float* o = out.data();
    const float* g = grads.data();
    float* m = state.slots[0].values.data();
    float* v = state.slots[1].values.data();
    const simd::KernelTable& k = simd::kernels();
    over_threads(static_cast<int64_t>(params.size()), [&](int64_t b, int64_t e) {
      k.adam(e - b, w + b, g + b, m + b, v + b, o + b, alpha, 1.0f - b1_, 1.0f - b2_, eps_);
    });
  }

  double batch_size_exponent() const override { return 0.5; }

 private:
  OptimizerSpec spec_;
  float b1_, b2_, eps_;
};

class Adagrad final : public Optimizer {
 public:
  explicit Adagrad(const OptimizerSpec& s)
      : spec_(s), initial_(s.initial_accumulator_value), eps_(s.epsilon) {}

  OptimizerState make_state(size_t n) const override {
    OptimizerState state;
    state.slots.push_back({"accumulator", std::vector<float>(n, initial_)});
    return state;
  }

  void apply(std::span<const float> params, std::span<const float> grads, OptimizerState& state,
             std::span<float> out, float lr_scale) const override {
    const float lr = learning_rate_at(spec_, state.iterations) * lr_scale;
    const float* w = apply_weight_decay(params, out, spec_.weight_decay, lr);
    const float* g = grads.data();
    float* acc = state.slots[0].values.data();
    float* o = out.data();
    const simd::KernelTable& k = simd::kernels();
    over_threads(static_cast<int64_t>(params.size()),
                 [&](int64_t b, int64_t e) { k.adagrad(e - b, w + b, g + b, acc + b, o + b, lr, eps_); });
    ++state.iterations;
  }

  double batch_size_exponent() const override { return 0.5; }

 private:
  OptimizerSpec spec_;
  float initial_, eps_;
};

// Keras 3's RMSprop: v = rho * v + (1 - rho) * g^2 (centered: a = rho * a + (1 - rho) * g, and
// v - a^2 in the denominator); step = lr * g / sqrt(denominator + eps); with momentum
// m = momentum * m + step, w -= m; else w -= step. Plain loops: compiled once for the portable
// level, they give the same bits on every CPU.
class Rmsprop final : public Optimizer {
 public:
  explicit Rmsprop(const OptimizerSpec& s) : spec_(s) {}

  OptimizerState make_state(size_t n) const override {
    OptimizerState state;
    state.slots.push_back({"velocity", std::vector<float>(n, 0.0f)});
    if (spec_.momentum > 0.0f) state.slots.push_back({"momentum", std::vector<float>(n, 0.0f)});
    if (spec_.centered) state.slots.push_back({"average_gradient", std::vector<float>(n, 0.0f)});
    return state;
  }

  void apply(std::span<const float> params, std::span<const float> grads, OptimizerState& state,
             std::span<float> out, float lr_scale) const override {
    const float lr = learning_rate_at(spec_, state.iterations) * lr_scale;
    const float* w = apply_weight_decay(params, out, spec_.weight_decay, lr);
    const float* g = grads.data();
    float* o = out.data();
    float* v = state.find("velocity")->values.data();
    Slot* momentum_slot = state.find("momentum");
    Slot* average_slot = state.find("average_gradient");
    float* m = momentum_slot != nullptr ? momentum_slot->values.data() : nullptr;
    float* a = average_slot != nullptr ? average_slot->values.data() : nullptr;
    const float rho = spec_.rho, one_minus_rho = 1.0f - spec_.rho, eps = spec_.epsilon, momentum = spec_.momentum;
    over_threads(static_cast<int64_t>(params.size()), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        v[i] = rho * v[i] + one_minus_rho * g[i] * g[i];
        float denominator = v[i];
        if (a != nullptr) {
          a[i] = rho * a[i] + one_minus_rho * g[i];
          denominator -= a[i] * a[i];
        }
        const float step = lr * g[i] / std::sqrt(denominator + eps);
        if (m != nullptr) {
          m[i] = momentum * m[i] + step;
          o[i] = w[i] - m[i];
        } else {
          o[i] = w[i] - step;
        }
      }
    });
    ++state.iterations;
  }

  double batch_size_exponent() const override { return 0.5; }

 private:
  OptimizerSpec spec_;
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
    case OptimizerType::kAdam:
    case OptimizerType::kAdamW: return std::make_unique<Adam>(spec);  // (adamw: its weight_decay)
    case OptimizerType::kAdagrad: return std::make_unique<Adagrad>(spec);
    case OptimizerType::kRmsprop: return std::make_unique<Rmsprop>(spec);
  }
  return nullptr;
}

}  // namespace pstrain::optim
