#include "common/engine/optim/optimizer.h"

#include <algorithm>
#include <cmath>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "common/base/error.h"
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

// Decoupled weight decay (Keras 3's _apply_weight_decay), before the update: out = w - w * wd * lr,
// over [b, e).
void decay(const float* w, float* o, int64_t b, int64_t e, float weight_decay, float lr) {
  for (int64_t i = b; i < e; ++i) o[i] = w[i] - w[i] * weight_decay * lr;
}

// The decay over the whole range. Returns where the update reads its parameters from then.
const float* apply_weight_decay(std::span<const float> params, std::span<float> out, float weight_decay, float lr) {
  if (weight_decay == 0.0f) return params.data();
  over_threads(static_cast<int64_t>(params.size()),
               [&](int64_t b, int64_t e) { decay(params.data(), out.data(), b, e, weight_decay, lr); });
  return out.data();
}

class Sgd final : public Optimizer {
 public:
  explicit Sgd(const OptimizerSpec& s) : spec_(s), momentum_(s.momentum), nesterov_(s.nesterov) {}

  OptimizerState make_state(size_t n) const override {
    OptimizerState state;
    if (momentum_ > 0.0f) state.slots.push_back({"momentum", std::vector<float>(n, 0.0f)});
    return state;
  }

  double batch_size_exponent() const override { return 1.0; }

 protected:
  Step begin_step(OptimizerState& state, float lr_scale) const override {
    const float lr = learning_rate_at(spec_, state.iterations) * lr_scale;
    ++state.iterations;
    return {lr, lr, 0.0f};
  }
  void update(const Step& step, int64_t n, const float* w, const float* g, float* const* slots,
              float* o) const override {
    const simd::KernelTable& k = simd::kernels();
    if (momentum_ == 0.0f) {
      k.sgd(n, w, g, o, step.lr);
    } else {
      k.momentum(n, w, g, slots[0], o, step.lr, momentum_, nesterov_);
    }
  }
  float weight_decay() const override { return spec_.weight_decay; }

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

  double batch_size_exponent() const override { return 0.5; }

 protected:
  Step begin_step(OptimizerState& state, float lr_scale) const override {
    const float lr = learning_rate_at(spec_, state.iterations);
    const double t = static_cast<double>(++state.iterations);
    const auto alpha = static_cast<float>(lr * std::sqrt(1.0 - std::pow(double{b2_}, t)) /
                                          (1.0 - std::pow(double{b1_}, t))) *
                       lr_scale;
    return {lr * lr_scale, lr, alpha};
  }
  // One fused pass over w, g, m, v: the update is memory-bound, so every extra pass costs.
  void update(const Step& step, int64_t n, const float* w, const float* g, float* const* slots,
              float* o) const override {
    simd::kernels().adam(n, w, g, slots[0], slots[1], o, step.alpha, 1.0f - b1_, 1.0f - b2_, eps_);
  }
  float weight_decay() const override { return spec_.weight_decay; }

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

  double batch_size_exponent() const override { return 0.5; }

 protected:
  Step begin_step(OptimizerState& state, float lr_scale) const override {
    const float lr = learning_rate_at(spec_, state.iterations) * lr_scale;
    ++state.iterations;
    return {lr, lr, 0.0f};
  }
  void update(const Step& step, int64_t n, const float* w, const float* g, float* const* slots,
              float* o) const override {
    simd::kernels().adagrad(n, w, g, slots[0], o, step.lr, eps_);
  }
  float weight_decay() const override { return spec_.weight_decay; }

 private:
  OptimizerSpec spec_;
  float initial_, eps_;
};

// Keras 3's RMSprop: v = rho * v + (1 - rho) * g^2 (centered: a = rho * a + (1 - rho) * g, and
// v - a^2 in the denominator); step = lr * g / sqrt(denominator + eps); with momentum
// m = momentum * m + step, w -= m; else w -= step. Plain loops: compiled once for the portable
// level, they give the same bits on every CPU. Slots: velocity, then momentum (momentum > 0),
// then average_gradient (centered).
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

  double batch_size_exponent() const override { return 0.5; }

 protected:
  Step begin_step(OptimizerState& state, float lr_scale) const override {
    const float lr = learning_rate_at(spec_, state.iterations) * lr_scale;
    ++state.iterations;
    return {lr, lr, 0.0f};
  }
  void update(const Step& step, int64_t n, const float* w, const float* g, float* const* slots,
              float* o) const override {
    float* v = slots[0];
    float* m = spec_.momentum > 0.0f ? slots[1] : nullptr;
    float* a = spec_.centered ? slots[spec_.momentum > 0.0f ? 2 : 1] : nullptr;
    const float lr = step.lr, rho = spec_.rho, one_minus_rho = 1.0f - spec_.rho, eps = spec_.epsilon,
                momentum = spec_.momentum;
    for (int64_t i = 0; i < n; ++i) {
      v[i] = rho * v[i] + one_minus_rho * g[i] * g[i];
      float denominator = v[i];
      if (a != nullptr) {
        a[i] = rho * a[i] + one_minus_rho * g[i];
        denominator -= a[i] * a[i];
      }
      const float s = lr * g[i] / std::sqrt(denominator + eps);
      if (m != nullptr) {
        m[i] = momentum * m[i] + s;
        o[i] = w[i] - m[i];
      } else {
        o[i] = w[i] - s;
      }
    }
  }
  float weight_decay() const override { return spec_.weight_decay; }

 private:
  OptimizerSpec spec_;
};

// The most slots an optimizer keeps (RMSprop centered with momentum).
constexpr size_t kMaxSlots = 3;

}  // namespace

void Optimizer::apply(std::span<const float> params, std::span<const float> grads, OptimizerState& state,
                      std::span<float> out, float lr_scale) const {
  const Step step = begin_step(state, lr_scale);
  update_range(step, params, grads, state, out);
}

void Optimizer::apply(std::span<const float> params, std::span<const float> grads, OptimizerState& state,
                      std::span<float> out, float lr_scale, const Prologue& prologue) const {
  const Step step = begin_step(state, lr_scale);
  update_range(step, params, grads, state, out, &prologue);
}

void Optimizer::update_range(const Step& step, std::span<const float> params, std::span<const float> grads,
                             OptimizerState& state, std::span<float> out, const Prologue* prologue) const {
  const float wd = weight_decay();
  // Without a prologue the decay is one pass before the update; with one, each block's decay comes
  // after its prologue (which may read the parameters as they were) and before its update.
  const float* w = prologue == nullptr ? apply_weight_decay(params, out, wd, step.decay_lr)
                                       : (wd == 0.0f ? params.data() : out.data());
  const float* g = grads.data();
  float* o = out.data();
  float* slots[kMaxSlots] = {};
  for (size_t i = 0; i < state.slots.size() && i < kMaxSlots; ++i) slots[i] = state.slots[i].values.data();
  const auto update_at = [&](int64_t b, int64_t e) {
    float* at[kMaxSlots] = {};
    for (size_t i = 0; i < kMaxSlots; ++i) at[i] = slots[i] != nullptr ? slots[i] + b : nullptr;
    update(step, e - b, w + b, g + b, at, o + b);
  };
  if (prologue == nullptr) {
    over_threads(static_cast<int64_t>(params.size()), update_at);
    return;
  }
  over_threads(static_cast<int64_t>(params.size()), [&](int64_t b, int64_t e) {
    for (int64_t at = b; at < e; at += kPrologueBlock) {
      const int64_t end = std::min(e, at + kPrologueBlock);
      (*prologue)(at, end);
      if (wd != 0.0f) decay(params.data(), o, at, end, wd, step.decay_lr);
      update_at(at, end);
    }
  });
}

namespace {

// Throws unless `rows` are ascending rows of a table of `table_size` values in rows of `dim`, with
// a gradient row each.
void check_rows(size_t table_size, size_t dim, std::span<const uint32_t> rows, size_t grads) {
  if (dim == 0 || table_size % dim != 0 || grads != rows.size() * dim) {
    throw Error("apply_rows: " + std::to_string(grads) + " gradients for " + std::to_string(rows.size()) +
                " rows of " + std::to_string(dim) + " in a table of " + std::to_string(table_size) + " values");
  }
  const size_t table_rows = table_size / dim;
  for (size_t r = 0; r < rows.size(); ++r) {
    if (rows[r] >= table_rows || (r > 0 && rows[r] <= rows[r - 1])) {
      throw Error("apply_rows: row " + std::to_string(rows[r]) + " (at " + std::to_string(r) +
                  ") is not ascending within the table's " + std::to_string(table_rows) + " rows");
    }
  }
}

}  // namespace

void Optimizer::update_rows(const Step& step, float* table, size_t dim, std::span<const uint32_t> rows,
                            const float* grads, OptimizerState& state, size_t slot_offset) const {
  const float decay = weight_decay();
  for (size_t r = 0; r < rows.size(); ++r) {
    const size_t at = size_t{rows[r]} * dim;
    float* w = table + at;
    if (decay != 0.0f) {  // apply_weight_decay's arithmetic, on this row only
      for (size_t i = 0; i < dim; ++i) w[i] = w[i] - w[i] * decay * step.decay_lr;
    }
    float* slots[kMaxSlots] = {};
    for (size_t i = 0; i < state.slots.size() && i < kMaxSlots; ++i) {
      slots[i] = state.slots[i].values.data() + slot_offset + at;
    }
    update(step, static_cast<int64_t>(dim), w, grads + r * dim, slots, w);
  }
}

void Optimizer::apply_rows(std::span<float> params, size_t dim, std::span<const uint32_t> rows,
                           std::span<const float> grads, OptimizerState& state, float lr_scale) const {
  check_rows(params.size(), dim, rows, grads.size());
  const Step step = begin_step(state, lr_scale);
  update_rows(step, params.data(), dim, rows, grads.data(), state, 0);
}

void Optimizer::apply_with_tables(std::span<float> params, size_t dense, std::span<const float> grads,
                                  std::span<const TableRows> tables, OptimizerState& state, float lr_scale) const {
  for (const TableRows& t : tables) {
    if (t.offset < dense || t.offset + t.size > params.size()) {
      throw Error("apply_with_tables: a table at " + std::to_string(t.offset) + " is not after the dense " +
                  std::to_string(dense) + " values within the " + std::to_string(params.size()));
    }
    check_rows(t.size, t.dim, t.rows, t.grads.size());
  }
  const Step step = begin_step(state, lr_scale);
  update_range(step, params.first(dense), grads.first(dense), state, params.first(dense));
  for (const TableRows& t : tables) update_rows(step, params.data() + t.offset, t.dim, t.rows, t.grads.data(), state, t.offset);
}

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
