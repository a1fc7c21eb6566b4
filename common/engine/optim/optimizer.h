// Optimizers that update a flat range of parameters from its (already scaled) gradient.
//
// Formulas are Keras' (tf.keras.optimizers, TF 2.11+):
//   sgd      w -= lr * g
//   momentum m = momentum * m - lr * g;  w += m            (nesterov: w += momentum * m - lr * g)
//   adam     t += 1; a = lr * sqrt(1 - b2^t) / (1 - b1^t)
//            m += (g - m) * (1 - b1); v += (g^2 - v) * (1 - b2); w -= a * m / (sqrt(v) + eps)
//   adagrad  acc += g^2; w -= lr * g / (sqrt(acc) + eps)    (acc starts at initial_accumulator_value)
//   rmsprop  v = rho * v + (1 - rho) * g^2; s = lr * g / sqrt(v + eps)   (Keras 3)
//            (centered: a = rho * a + (1 - rho) * g, s = lr * g / sqrt(v - a^2 + eps));
//            momentum > 0: m = momentum * m + s, w -= m; else w -= s
//   adamw    adam with weight_decay (default 0.004)
// weight_decay (any optimizer; Keras 3's decoupled form, before the update): w -= w * wd * lr.
//
// lr_scale (staleness-aware async training, DESIGN-NOTES "Staleness-aware async"): the update
// is made with lr * lr_scale where lr multiplies the gradient's contribution, and only there: the
// slots' decays (momentum, Adam's beta_1 and beta_2) and the statistics they keep (Adam's m and v,
// Adagrad's accumulator) are those of the unscaled gradient:
//   sgd      w -= lr * s * g
//   momentum m = momentum * m - lr * s * g;  w += m   (nesterov: w += momentum * m - lr * s * g)
//   adam     w -= a * s * m / (sqrt(v) + eps)         (m, v updated from g as above)
//   adagrad  w -= lr * s * g / (sqrt(acc) + eps)      (acc += g^2 as above)
// lr is the spec's schedule at the update's step (schedule.h: the state's iterations before the
// update), the constant learning_rate without one.
// With lr_scale 1 the arithmetic is exactly that of the unscaled formulas (x * 1.0f == x), so sync
// training stays bit-identical. batch_size_exponent() tells a caller how to choose lr_scale for a
// batch smaller than the one the learning rate was set for (async pushes).
//
// The optimizer object holds only hyperparameters; the slots live in an OptimizerState that the
// caller owns, one per parameter range (a whole model in the trainer, one shard on a server), so
// state can be backed up and restored as plain float vectors.
//
// Thread rules: an Optimizer is immutable and may be shared; an OptimizerState is used by one
// thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/engine/optim/optimizer_spec.h"

namespace pstrain::optim {

struct Slot {
  std::string name;           // "m", "v", "momentum", "accumulator"
  std::vector<float> values;  // one per parameter of the range
};

struct OptimizerState {
  int64_t iterations = 0;  // updates applied so far (Adam's t)
  std::vector<Slot> slots;

  // nullptr if there is no such slot.
  Slot* find(const std::string& name);
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // Fresh state for a range of n parameters.
  virtual OptimizerState make_state(size_t n) const = 0;
  // One update: params and grads have the same length as the state's slots.
  void apply(std::span<float> params, std::span<const float> grads, OptimizerState& state) const {
    apply(params, grads, state, params, 1.0f);
  }
  void apply(std::span<const float> params, std::span<const float> grads, OptimizerState& state,
             std::span<float> out) const {
    apply(params, grads, state, out, 1.0f);
  }
  // The same update written to `out` (same length; may be `params` itself), leaving `params`
  // as they were when they are distinct: a server keeps the version before the last update
  // this way without copying it. The arithmetic is the same either way. `lr_scale` (> 0) scales the
  // learning rate as the top comment says.
  void apply(std::span<const float> params, std::span<const float> grads, OptimizerState& state,
             std::span<float> out, float lr_scale) const;
  // The caller's last element-wise pass over the gradient, done by the update itself: called on
  // each block [begin, end) of the range (blocks of kPrologueBlock values, on whichever thread then
  // updates that block, so on several threads at once), just before the block's gradients are
  // read. It must not throw (it runs inside an OpenMP region). It may write only
  // grads[begin, end) (and its own buffers) and read params there; the update's bits are those
  // of running it over the whole range first (every step is element-wise). Why: the trainer's
  // replica sum and scaling are memory-bound passes over the whole gradient; done block by block
  // they read what the update is about to read while it is in cache (DESIGN-NOTES "The step's
  // tail in one pass").
  using Prologue = std::function<void(int64_t begin, int64_t end)>;
  static constexpr int64_t kPrologueBlock = 4096;
  void apply(std::span<const float> params, std::span<const float> grads, OptimizerState& state,
             std::span<float> out, float lr_scale, const Prologue& prologue) const;
  // The lazy update of a table's rows (a sparse embedding table; docs/DESIGN-NOTES.md "Sparse
  // models"): rows `rows` (ascending, distinct) of `params`, a table of `dim` columns, get the
  // update apply() gives them, from `grads` (rows.size() x dim, row after row), in place; every
  // other row and its slots stay as they were (weight decay included). One step: the state's
  // iterations (Adam's t, the schedule's step) advance once, as TF's LazyAdam and PyTorch's
  // SparseAdam count them. With every row listed it equals apply() bit for bit.
  void apply_rows(std::span<float> params, size_t dim, std::span<const uint32_t> rows, std::span<const float> grads,
                  OptimizerState& state, float lr_scale = 1.0f) const;
  // One step of a layout with sparse tables (the trainer's): [0, dense) updated as apply()
  // updates it, then each table's listed rows as apply_rows() does (the optimizer's
  // sparse_updates "lazy"), under one step (iterations advance once). params and the state's slots
  // span the whole layout; each table's slots are at its offset.
  struct TableRows {
    size_t offset = 0, size = 0, dim = 0;  // the table in params: where, how many values, row width
    std::span<const uint32_t> rows;        // ascending, distinct
    std::span<const float> grads;          // rows.size() x dim
  };
  void apply_with_tables(std::span<float> params, size_t dense, std::span<const float> grads,
                         std::span<const TableRows> tables, OptimizerState& state, float lr_scale = 1.0f) const;
  // How the learning rate that makes the same progress per example follows the batch size b:
  // lr proportional to b^exponent. 1 for SGD with or without momentum (the step is linear in the
  // gradient: k steps on b examples ~ one step on k b; the linear scaling rule, Goyal et al. 2017),
  // 0.5 for Adam and Adagrad (the step is normalised by the gradient's magnitude; the square-root
  // rule, Malladi et al. 2022). Async training's async_lr "batch_staleness" uses it.
  virtual double batch_size_exponent() const = 0;

 protected:
  // A step's constants, computed once (and the state's iterations advanced) before any range is
  // updated: the rate the weight decay uses, the rate of the update and Adam's alpha.
  struct Step {
    float decay_lr = 0, lr = 0, alpha = 0;
  };
  virtual Step begin_step(OptimizerState& state, float lr_scale) const = 0;
  // The element-wise update of n elements: w, g and o at the range's start, slots[i] the state's
  // slot i there. An element's result does not depend on where its range starts.
  virtual void update(const Step& step, int64_t n, const float* w, const float* g, float* const* slots,
                      float* o) const = 0;
  virtual float weight_decay() const = 0;

 private:
  // apply()'s update of a whole range under `step` (slots from the state's start).
  void update_range(const Step& step, std::span<const float> params, std::span<const float> grads,
                    OptimizerState& state, std::span<float> out, const Prologue* prologue = nullptr) const;
  // apply_rows()'s update of `rows` of `table` under `step`; the table's slots start at
  // `slot_offset` in the state's.
  void update_rows(const Step& step, float* table, size_t dim, std::span<const uint32_t> rows, const float* grads,
                   OptimizerState& state, size_t slot_offset) const;
};

std::unique_ptr<Optimizer> make_optimizer(const OptimizerSpec& spec);

}  // namespace pstrain::optim
