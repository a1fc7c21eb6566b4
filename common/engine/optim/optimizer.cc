#include "common/engine/optim/optimizer.h"

#include <cmath>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "common/engine/simd/kernels.h"

namespace pstrain {

const char* optimizer_type_name(OptimizerType type) {
  switch (type) {
    case OptimizerType::kSgd: return "sgd";
    case OptimizerType::kAdam: return "adam";
    case OptimizerType::kAdagrad: return "adagrad";
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
    const float lr = lr_ * lr_scale;
    const float* w = params.data();
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
    const simd::KernelTable& k = simd::kernels();
    over_threads(static_cast<int64_t>(params.size()), [&](int64_t b, int64_t e) {
      k.adam(e - b, w + b, g + b, m + b, v + b, o + b, alpha, 1.0f - b1_, 1.0f - b2_, eps_);
    });
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
    const float lr = lr_ * lr_scale;
    const float* w = params.data();
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
