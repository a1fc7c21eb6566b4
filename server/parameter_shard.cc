#include "server/parameter_shard.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/engine/model_spec.h"
#include "common/engine/nn/gradient_scaling.h"
#include "common/engine/nn/moving_statistics.h"
#include "common/engine/nn/row_groups.h"
#include "common/engine/simd/kernels.h"

namespace pstrain {
namespace {

// out = (s0 + s1 + ...) / examples (+ 2 * l2 * w) in one pass: the same arithmetic, in the same
// order, as summing the slices into `out` and then calling nn::scale_and_regularize (so a sync
// run stays bit-identical to the standalone trainer), without the copy and the second pass.
void sum_scale_and_regularize(const std::vector<const float*>& slices, const float* w, size_t n, int64_t examples,
                              float l2, float* out) {
  const float inv = 1.0f / static_cast<float>(examples);
  if (slices.size() == 2 && l2 == 0.0f) {
    const float* a = slices[0];
    const float* b = slices[1];
    for (size_t i = 0; i < n; ++i) out[i] = (a[i] + b[i]) * inv;
    return;
  }
  if (slices.size() == 1 && l2 == 0.0f) {
    const float* a = slices[0];
    for (size_t i = 0; i < n; ++i) out[i] = a[i] * inv;
    return;
  }
  std::copy(slices[0], slices[0] + n, out);
  for (size_t p = 1; p < slices.size(); ++p) {
    const float* g = slices[p];
    for (size_t i = 0; i < n; ++i) out[i] += g[i];
  }
  nn::scale_and_regularize(out, w, n, examples, l2);
}

// The part of a factored push's product that falls in rows [first_row, first_row + rows) of its
// kernel: `listed` rows (ascending, kernel row numbers in `rows`), each `columns` values in
// `values`. The product (deltas * inputs^T over every listed row of the push, as the worker's
// engine would have computed it) is multiplied out once, by the first chunk that asks.
struct FactorRows {
  const uint32_t* rows;
  size_t listed;
  const float* values;
};

FactorRows factor_rows(const GradientFactors& f, size_t first_row, size_t rows) {
  const auto begin = std::lower_bound(f.rows.begin(), f.rows.end(), static_cast<uint32_t>(first_row));
  const auto end = std::lower_bound(begin, f.rows.end(), static_cast<uint32_t>(first_row + rows));
  const auto listed = static_cast<size_t>(end - begin);
  if (listed == 0 || f.examples == 0) return {nullptr, 0, nullptr};
  if (!f.multiplied) {
    // As the worker's engine computes a kernel gradient (common/engine/simd/kernels.h): the same value
    // for every element whatever rows the push lists.
    const auto m = static_cast<int64_t>(f.columns), n = static_cast<int64_t>(f.rows.size());
    f.product.resize(f.rows.size() * f.columns);
    simd::product(m, n, static_cast<int64_t>(f.examples), {f.deltas.data(), 1, m}, {f.inputs.data(), 1, n}, false,
                  f.product.data(), m);
    f.multiplied = true;
  }
  const auto position = static_cast<size_t>(begin - f.rows.begin());
  return {f.rows.data() + position, listed, f.product.data() + position * f.columns};
}

// Writes (first) or adds a factored gradient into rows [first_row, first_row + rows) of a kernel,
// `out` being those rows. Unlisted rows are exact zeros, written or skipped, so sums stay what a
// dense push gives.
void accumulate_factors(const GradientFactors& f, size_t first_row, size_t rows, bool first, float* out) {
  const size_t columns = f.columns;
  const FactorRows part = factor_rows(f, first_row, rows);
  size_t next = 0;  // among the listed rows
  for (size_t r = 0; r < rows; ++r) {
    float* row = out + r * columns;
    if (next < part.listed && part.rows[next] == first_row + r) {
      const float* p = part.values + next * columns;
      if (first) {
        std::copy_n(p, columns, row);
      } else {
        for (size_t c = 0; c < columns; ++c) row[c] += p[c];
      }
      ++next;
    } else if (first) {
      std::fill_n(row, columns, 0.0f);
    }
  }
}

// One slice of a step, row by row: every row (`dense`) or the listed ones (possibly none),
// `values` holding them back to back.
struct SliceRows {
  bool dense = false;
  const uint32_t* rows = nullptr;  // kernel row numbers, ascending
  size_t listed = 0;
  const float* values = nullptr;
  size_t next = 0;  // cursor into rows
};

// out = (the slices' sum, in slice order) / examples (+ 2 * l2 * w), row by row, where a slice
// without a row adds nothing: the arithmetic of sum_scale_and_regularize on the dense forms
// (adding an absent row's zeros changes nothing), without building them.
void sum_rows_scale_and_regularize(std::vector<SliceRows>& slices, size_t first_row, size_t rows, size_t columns,
                                   const float* w, int64_t examples, float l2, float* out) {
  const float inv = 1.0f / static_cast<float>(examples);
  const float two_l2 = 2.0f * l2;
  std::vector<const float*> present(slices.size());
  for (SliceRows& s : slices) s.next = 0;
  for (size_t r = 0; r < rows; ++r) {
    size_t k = 0;
    for (SliceRows& s : slices) {
      if (s.dense) {
        present[k++] = s.values + r * columns;
      } else if (s.next < s.listed && s.rows[s.next] == first_row + r) {
        present[k++] = s.values + s.next++ * columns;
      }
    }
    float* o = out + r * columns;
    const float* wr = w + r * columns;
    if (k == 0) {
      for (size_t c = 0; c < columns; ++c) o[c] = l2 == 0.0f ? 0.0f : 0.0f * inv + two_l2 * wr[c];
    } else if (k == 1 && l2 == 0.0f) {
      const float* a = present[0];
      for (size_t c = 0; c < columns; ++c) o[c] = a[c] * inv;
    } else if (k == 2 && l2 == 0.0f) {
      const float* a = present[0];
      const float* b = present[1];
      for (size_t c = 0; c < columns; ++c) o[c] = (a[c] + b[c]) * inv;
    } else {
      std::copy_n(present[0], columns, o);
      for (size_t j = 1; j < k; ++j) {
        const float* g = present[j];
        for (size_t c = 0; c < columns; ++c) o[c] += g[c];
      }
      nn::scale_and_regularize(o, wr, columns, examples, l2);
    }
  }
}

}  // namespace

// Adding a sparse push's absent elements (exact zeros) would change nothing, so skipping them
// keeps the sum bit-identical to the dense one (0 + a == a).
void ParameterShard::accumulate(const PushRequest& push, const Chunk& chunk, bool first, float* out) {
  const size_t n = chunk.info.size;
  if (push.factors) {
    const size_t columns = push.factors->columns;
    accumulate_factors(*push.factors, chunk.info.offset / columns, n / columns, first, out);
  } else if (push.sparse) {
    if (first) std::fill(out, out + n, 0.0f);
    for (const GradientPart& part : push.parts) {
      float* o = out + part.offset;
      for (size_t i = 0; i < part.values.size(); ++i) o[i] += part.values[i];
    }
  } else if (first) {
    std::copy_n(push.gradient.data(), n, out);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] += push.gradient[i];
  }
}

ParameterShard::ParameterShard(const ShardConfig& config, std::vector<ChunkInfo> table, uint32_t server_index,
                               uint32_t workers)
    : mode_(config.mode),
      global_batch_(config.global_batch_size),
      optimizer_(optim::make_optimizer(config.optimizer)),
      rule_(std::in_place_type<SyncBarrier>, config.backup_workers) {
  if (mode_ == TrainingMode::kAsync) {
    rule_.emplace<AsyncRule>(config, workers, optimizer_->batch_size_exponent());
  }
  const ParamLayout layout = make_param_layout(config.model);
  // The same initial values as the standalone trainer: initialise the whole model, keep our part.
  std::vector<float> initial(layout.total_size());
  glorot_uniform_init(layout, config.model.seed, initial.data());
  for (const ChunkInfo& info : table) {
    if (info.server != server_index) continue;
    const ParamInfo& param = layout.params()[info.param];
    Chunk chunk;
    chunk.info = info;
    chunk.l2 = param.l2;
    chunk.moving_momentum = nn::moving_momentum(config.model, param);
    if (param.role == ParamRole::kKernel && param.shape.size() == 2 && param.shape[1] > 0) {
      const auto columns = static_cast<size_t>(param.shape[1]);
      if (info.offset % columns == 0 && info.size % columns == 0) chunk.row_columns = columns;
    }
    const float* begin = initial.data() + param.offset + info.offset;
    chunk.values.assign(begin, begin + info.size);
    chunk.initial = chunk.values;
    chunk.scratch.resize(info.size);
    chunk.previous.resize(info.size);
    chunk.optimizer_state = optimizer_->make_state(info.size);
    chunks_.emplace(info.key, std::move(chunk));
  }
}

ParameterShard::~ParameterShard() = default;

size_t ParameterShard::chunk_size(uint32_t key) const { return chunks_.at(key).info.size; }
size_t ParameterShard::row_columns(uint32_t key) const { return chunks_.at(key).row_columns; }
size_t ParameterShard::first_row(uint32_t key) const {
  const Chunk& chunk = chunks_.at(key);
  return chunk.row_columns > 0 ? chunk.info.offset / chunk.row_columns : 0;
}
uint64_t ParameterShard::version(uint32_t key) const { return chunks_.at(key).version; }
std::span<const float> ParameterShard::values(uint32_t key) const { return chunks_.at(key).values; }

void ParameterShard::partial_product(const std::vector<uint32_t>& keys, const std::vector<uint32_t>& rows,
                                     const float* inputs, size_t examples, float* result) const {
  const size_t columns = row_columns(keys.front());
  struct Span {
    size_t first, end;
    const float* values;
  };
  std::vector<Span> spans;  // the keys' rows, in row order
  for (uint32_t key : keys) {
    const Chunk& chunk = chunks_.at(key);
    spans.push_back({first_row(key), first_row(key) + chunk.info.size / columns, chunk.values.data()});
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.first < b.first; });
  row_pointers_.clear();
  size_t span = 0;
  for (uint32_t r : rows) {  // ascending, each inside a span (checked by the caller)
    while (r >= spans[span].end) ++span;
    row_pointers_.push_back(spans[span].values + (r - spans[span].first) * columns);
  }
  nn::row_group_product<float>(row_pointers_, static_cast<int64_t>(columns), inputs, static_cast<int64_t>(examples),
                               gathered_rows_, result);
}

std::optional<std::span<const float>> ParameterShard::values_at(uint32_t key, uint64_t version) const {
  const Chunk& chunk = chunks_.at(key);
  if (version >= chunk.values_since && version <= chunk.version) return std::span<const float>(chunk.values);
  if (version == chunk.previous_version) return std::span<const float>(chunk.previous);
  return std::nullopt;
}

void ParameterShard::step_values(Chunk& chunk, std::span<const float> gradient, float lr_scale) {
  optimizer_->apply(chunk.values, gradient, chunk.optimizer_state, chunk.previous, lr_scale);
  if (chunk.moving_momentum >= 0) {
    nn::moving_average(chunk.values.data(), gradient.data(), chunk.info.size, chunk.moving_momentum,
                       chunk.previous.data());
  }
  std::swap(chunk.values, chunk.previous);
  chunk.previous_version = chunk.version;
  chunk.values_since = chunk.version + 1;
}

void ParameterShard::values_replaced(Chunk& chunk) {
  chunk.previous_version = UINT64_MAX;
  chunk.values_since = chunk.version;
}

std::vector<uint32_t> ParameterShard::keys() const {
  std::vector<uint32_t> keys;
  for (const auto& [key, chunk] : chunks_) keys.push_back(key);
  return keys;
}

void ParameterShard::apply_update(Chunk& chunk, std::span<const float> summed_gradient, int64_t examples,
                                  float lr_scale) {
  if (examples > 0) {
    float* grad = chunk.scratch.data();
    if (summed_gradient.data() != grad) std::copy(summed_gradient.begin(), summed_gradient.end(), grad);
    nn::scale_and_regularize(grad, chunk.values.data(), chunk.info.size, examples, chunk.l2);
    step_values(chunk, std::span<const float>(grad, chunk.info.size), lr_scale);
  }
  ++chunk.version;
}

void ParameterShard::push(const PushRequest& request, PushDone done, std::function<bool()> alive) {
  Chunk& chunk = chunks_.at(request.key);
  if (holds_.rejects(request.generation)) {  // a push of a plan that ended
    done({chunk.version, false, true});
    return;
  }
  if (auto* async = std::get_if<AsyncRule>(&rule_)) return push_async(*async, chunk, request, std::move(done));
  push_sync(std::get<SyncBarrier>(rule_), chunk, request, std::move(done), std::move(alive));
}

void ParameterShard::push_async(AsyncRule& rule, Chunk& chunk, const PushRequest& request, PushDone done) {
  const float lr_scale = rule.admit(request, chunk.version, stats_);
  if (request.sparse || request.factors) {
    accumulate(request, chunk, /*first=*/true, chunk.scratch.data());
    apply_update(chunk, chunk.scratch, request.examples, lr_scale);
  } else {
    apply_update(chunk, request.gradient, request.examples, lr_scale);
  }
  ++stats_.pushes_applied;
  release_pulls(chunk);
  take_snapshot_if_due(chunk);
  rule.applied(request, request.key == chunks_.begin()->first,
               [&chunk, done = std::move(done)] { done({chunk.version, true}); });
}

void ParameterShard::push_sync(SyncBarrier& barrier, Chunk& chunk, const PushRequest& request, PushDone done,
                               std::function<bool()> alive) {
  if (request.step < chunk.version) {  // the step was applied without this (late) push
    ++stats_.pushes_dropped;
    done({chunk.version, false});
    return;
  }
  SyncBarrier::Pending pending{request, std::move(done), std::move(alive)};
  if (request.factors) {
    // Multiply the factors out now, while the step's other workers are still computing, rather
    // than when the last push is in: the product is most of a factored push's cost, and the end
    // of the step is where everybody waits. The push then keeps a view of its rows of the
    // product (which the factors own), and its gradient views are never read again.
    const size_t columns = chunk.row_columns;
    const FactorRows part = factor_rows(*request.factors, chunk.info.offset / columns, chunk.info.size / columns);
    pending.factor_rows = part.rows;
    pending.factor_listed = part.listed;
    pending.factor_values = part.values;
  }
  barrier.add(request.key, std::move(pending));
  apply_ready_sync_steps(chunk);
}

void ParameterShard::apply_ready_sync_steps_everywhere() {
  for (auto& [key, chunk] : chunks_) apply_ready_sync_steps(chunk);
}

void ParameterShard::apply_ready_sync_steps(Chunk& chunk) {
  auto* barrier = std::get_if<SyncBarrier>(&rule_);
  if (barrier == nullptr) return;
  while (chunk.version < holds_.limit()) {
    std::optional<SyncBarrier::Step> step = barrier->take_ready(chunk.info.key, chunk.version);
    if (!step) return;
    if (step->examples > 0) {
      reduce_step(chunk, *step);
      step_values(chunk, std::span<const float>(chunk.scratch.data(), chunk.info.size));
    }
    ++chunk.version;
    // The workers' compression states of the new version (pushed only before backup points).
    chunk.worker_state.clear();
    for (const SyncBarrier::Pending* push : step->counted) {
      const auto state = push->request.worker_state;
      if (!state.empty()) chunk.worker_state[push->request.slice].assign(state.begin(), state.end());
    }
    stats_.pushes_applied += step->pushes.size();
    take_snapshot_if_due(chunk);
    for (auto& p : step->pushes) p.done({chunk.version, true});
    release_pulls(chunk);
  }
}

void ParameterShard::reduce_step(Chunk& chunk, const SyncBarrier::Step& step) {
  float* out = chunk.scratch.data();
  const size_t n = chunk.info.size;
  if (step.all_dense) {
    std::vector<const float*> gradients;
    for (const SyncBarrier::Pending* push : step.counted) gradients.push_back(push->request.gradient.data());
    sum_scale_and_regularize(gradients, chunk.values.data(), n, step.examples, chunk.l2, out);
  } else if (!step.any_sparse) {
    // Dense and factored pushes: summed row by row from the products, none multiplied out into
    // a dense buffer.
    const size_t columns = chunk.row_columns;
    std::vector<SliceRows> slices;
    for (const SyncBarrier::Pending* push : step.counted) {
      if (push->request.factors) {
        slices.push_back({false, push->factor_rows, push->factor_listed, push->factor_values});
      } else {
        slices.push_back({true, nullptr, 0, push->request.gradient.data()});
      }
    }
    sum_rows_scale_and_regularize(slices, chunk.info.offset / columns, n / columns, columns, chunk.values.data(),
                                  step.examples, chunk.l2, out);
  } else {
    for (size_t i = 0; i < step.counted.size(); ++i) accumulate(step.counted[i]->request, chunk, i == 0, out);
    nn::scale_and_regularize(out, chunk.values.data(), n, step.examples, chunk.l2);
  }
}

void ParameterShard::set_worker_state(uint32_t key, uint32_t worker, std::span<const float> state) {
  chunks_.at(key).worker_state[worker].assign(state.begin(), state.end());
}

const std::vector<float>* ParameterShard::worker_state(uint32_t key, uint32_t worker) const {
  const Chunk& chunk = chunks_.at(key);
  const auto it = chunk.worker_state.find(worker);
  return it == chunk.worker_state.end() ? nullptr : &it->second;
}

void ParameterShard::pull(uint32_t key, uint64_t min_version, PullDone done) {
  Chunk& chunk = chunks_.at(key);
  if (chunk.version >= min_version) {
    done(chunk.version);
  } else {
    chunk.waiting_pulls.emplace_back(min_version, std::move(done));
  }
}

void ParameterShard::release_pulls(Chunk& chunk) {
  auto& waiting = chunk.waiting_pulls;
  for (size_t i = 0; i < waiting.size();) {
    if (waiting[i].first <= chunk.version) {
      auto done = std::move(waiting[i].second);
      waiting.erase(waiting.begin() + static_cast<long>(i));
      done(chunk.version);
    } else {
      ++i;
    }
  }
}

void ParameterShard::worker_finished(uint32_t worker) {
  if (auto* async = std::get_if<AsyncRule>(&rule_)) async->worker_finished(worker);
}

}  // namespace pstrain
