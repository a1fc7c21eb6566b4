#include "server/parameter_shard.h"

#include <algorithm>

#include "common/engine/model_spec.h"
#include "common/engine/nn/gradient_clipping.h"
#include "common/engine/nn/gradient_scaling.h"
#include "common/engine/nn/moving_statistics.h"
#include "server/step_reduction.h"

namespace pstrain {

ParameterShard::ParameterShard(const ShardConfig& config, std::vector<ChunkInfo> table, uint32_t server_index,
                               uint32_t workers)
    : mode_(config.mode),
      global_batch_(config.global_batch_size),
      layout_(make_param_layout(config.model)),
      seed_(config.model.seed),
      lazy_tables_(config.optimizer.sparse_updates == OptimizerSpec::SparseUpdates::kLazy),
      clips_(config.optimizer.clips() && config.mode == TrainingMode::kSync),
      optimizer_(optim::make_optimizer(config.optimizer)),
      rule_(std::in_place_type<SyncBarrier>, config.backup_workers) {
  if (mode_ == TrainingMode::kAsync) {
    rule_.emplace<AsyncRule>(config, workers, optimizer_->batch_size_exponent());
  }
  const ParamLayout& layout = layout_;
  // The same initial values as the standalone trainer: initialise the whole dense model, keep our
  // part; a table piece makes its own rows.
  std::vector<float> initial(layout.dense_size());
  dense_glorot_uniform_init(layout, config.model.seed, initial.data());
  for (const ChunkInfo& info : table) {
    if (info.server != server_index) continue;
    const ParamInfo& param = layout.params()[info.param];
    ShardChunk chunk;
    chunk.info = info;
    if (info.is_table_piece()) {
      init_table_piece(layout, seed_, chunk);
      if (!lazy_tables_) {
        chunk.scratch.resize(info.size);
        chunk.previous.resize(info.size);
      }
      chunk.optimizer_state = optimizer_->make_state(info.size);
      chunks_.emplace(info.key, std::move(chunk));
      continue;
    }
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

std::vector<uint32_t> ParameterShard::keys() const {
  std::vector<uint32_t> keys;
  for (const auto& [key, chunk] : chunks_) keys.push_back(key);
  return keys;
}

void ParameterShard::apply_update(ShardChunk& chunk, std::span<const float> summed_gradient, int64_t examples,
                                  float lr_scale) {
  if (examples > 0) {
    float* grad = chunk.scratch.data();
    if (summed_gradient.data() != grad) std::copy(summed_gradient.begin(), summed_gradient.end(), grad);
    nn::scale_and_regularize(grad, chunk.values.data(), chunk.info.size, examples, chunk.l2);
    chunk.step(*optimizer_, std::span<const float>(grad, chunk.info.size), lr_scale);
  }
  ++chunk.version;
}

void ParameterShard::apply_table_update(ShardChunk& chunk, std::span<const PushRequest* const> pushes,
                                        int64_t examples, float lr_scale) {
  if (examples > 0) {
    reduce_table_step(chunk, pushes, examples, table_step_);
    apply_table_step(*optimizer_, lazy_tables_, chunk, table_step_, lr_scale,
                     /*keep_rows=*/std::holds_alternative<SyncBarrier>(rule_));
  }
  ++chunk.version;
}

void ParameterShard::push(const PushRequest& request, PushDone done, std::function<bool()> alive) {
  ShardChunk& chunk = chunks_.at(request.key);
  if (holds_.rejects(request.generation)) {  // a push of a plan that ended
    done({chunk.version, false, true});
    return;
  }
  if (auto* async = std::get_if<AsyncRule>(&rule_)) return push_async(*async, chunk, request, std::move(done));
  push_sync(std::get<SyncBarrier>(rule_), chunk, request, std::move(done), std::move(alive));
}

void ParameterShard::push_async(AsyncRule& rule, ShardChunk& chunk, const PushRequest& request, PushDone done) {
  const float lr_scale = rule.admit(request, chunk.version, stats_);
  if (chunk.info.is_table_piece()) {
    const PushRequest* pushes[] = {&request};
    apply_table_update(chunk, pushes, request.examples, lr_scale);
  } else if (request.sparse || request.factors) {
    accumulate_push(request, chunk, /*first=*/true, chunk.scratch.data());
    apply_update(chunk, chunk.scratch, request.examples, lr_scale);
  } else {
    apply_update(chunk, request.gradient, request.examples, lr_scale);
  }
  ++stats_.pushes_applied;
  chunk.release_pulls();
  snapshots_.offer(chunk, chunks_.size());
  rule.applied(request, request.key == chunks_.begin()->first,
               [&chunk, done = std::move(done)] { done({chunk.version, true}); });
}

void ParameterShard::push_sync(SyncBarrier& barrier, ShardChunk& chunk, const PushRequest& request, PushDone done,
                               std::function<bool()> alive) {
  if (request.step < chunk.version) {  // the step was applied without this (late) push
    ++stats_.pushes_dropped;
    // Clipping: the pusher adds this chunk's sum into its norm (its other chunks may still be
    // held), so a push of the step just applied gets that step's sum too.
    if (clips_ && request.step + 1 == chunk.version) {
      done({chunk.version, false, false, true, chunk.held_sum_squares});
    } else {
      done({chunk.version, false});
    }
    return;
  }
  if (chunk.held_examples >= 0 && request.step == chunk.version) {  // late for a held step: summed without it
    ++stats_.pushes_dropped;
    done({chunk.version, false, false, true, chunk.held_sum_squares});
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

namespace {

// A sync step's learning-rate multiplier: its pushes carry the same one (reduce_on_plateau).
float lr_scale_of(const SyncBarrier::Step& step) {
  return step.counted.empty() ? 1.0f : step.counted.front()->request.lr_scale;
}

}  // namespace

void ParameterShard::apply_ready_sync_steps_everywhere() {
  for (auto& [key, chunk] : chunks_) apply_ready_sync_steps(chunk);
}

void ParameterShard::apply_ready_sync_steps(ShardChunk& chunk) {
  auto* barrier = std::get_if<SyncBarrier>(&rule_);
  if (barrier == nullptr) return;
  while (chunk.version < holds_.limit()) {
    if (chunk.held_examples >= 0) {  // clipping: applied once a pull has brought the factor
      if (!chunk.held_factor) return;
      apply_held_step(chunk);
      continue;
    }
    std::optional<SyncBarrier::Step> step = barrier->take_ready(chunk.info.key, chunk.version);
    if (!step) return;
    if (chunk.info.is_table_piece()) {
      std::vector<const PushRequest*> pushes;
      for (const SyncBarrier::Pending* push : step->counted) pushes.push_back(&push->request);
      apply_table_update(chunk, pushes, step->examples, lr_scale_of(*step));
    } else if (clips_) {
      hold_sync_step(chunk, *step);
      continue;
    } else {
      if (step->examples > 0) {
        reduce_step(chunk, *step);
        chunk.step(*optimizer_, std::span<const float>(chunk.scratch.data(), chunk.info.size), lr_scale_of(*step));
      }
      ++chunk.version;
    }
    // The workers' compression states of the new version (pushed only before backup points).
    chunk.worker_state.clear();
    for (const SyncBarrier::Pending* push : step->counted) {
      const auto state = push->request.worker_state;
      if (!state.empty()) chunk.worker_state[push->request.slice].assign(state.begin(), state.end());
    }
    stats_.pushes_applied += step->pushes.size();
    snapshots_.offer(chunk, chunks_.size());
    for (auto& p : step->pushes) p.done({chunk.version, true});
    chunk.release_pulls();
  }
}

void ParameterShard::hold_sync_step(ShardChunk& chunk, SyncBarrier::Step& step) {
  double sum_squares = 0;
  if (step.examples > 0) {
    reduce_step(chunk, step);
    if (chunk.moving_momentum < 0) sum_squares = nn::sum_of_squares(chunk.scratch.data(), chunk.info.size);
  }
  chunk.held_examples = step.examples;
  chunk.held_sum_squares = sum_squares;
  chunk.held_lr_scale = lr_scale_of(step);
  stats_.pushes_applied += step.pushes.size();
  for (auto& p : step.pushes) p.done({chunk.version, true, false, true, sum_squares});
}

void ParameterShard::apply_held_step(ShardChunk& chunk) {
  if (chunk.held_examples > 0) {
    if (chunk.moving_momentum < 0) nn::scale_gradient(chunk.scratch.data(), chunk.info.size, *chunk.held_factor);
    chunk.step(*optimizer_, std::span<const float>(chunk.scratch.data(), chunk.info.size), chunk.held_lr_scale);
  }
  chunk.held_examples = -1;
  chunk.held_factor.reset();
  ++chunk.version;
  snapshots_.offer(chunk, chunks_.size());
  chunk.release_pulls();
}

void ParameterShard::set_worker_state(uint32_t key, uint32_t worker, std::span<const float> state) {
  chunks_.at(key).worker_state[worker].assign(state.begin(), state.end());
}

void ParameterShard::pull(uint32_t key, uint64_t min_version, ShardChunk::PullDone done,
                          std::optional<float> clip_factor) {
  ShardChunk& chunk = chunks_.at(key);
  if (clip_factor && chunk.held_examples >= 0 && min_version > chunk.version && !chunk.held_factor) {
    chunk.held_factor = *clip_factor;
    apply_ready_sync_steps(chunk);  // (not beyond a hold's limit: then when it is lifted)
  }
  if (chunk.version >= min_version) {
    done(chunk.version);
  } else {
    chunk.waiting_pulls.emplace_back(min_version, std::move(done));
  }
}

void ParameterShard::worker_finished(uint32_t worker) {
  if (auto* async = std::get_if<AsyncRule>(&rule_)) async->worker_finished(worker);
}

}  // namespace pstrain
