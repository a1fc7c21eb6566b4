// One chunk of a parameter shard (parameter_shard.h): its values at its version, the values
// before the last update, the optimizer's slots, the workers' compression states and the pulls
// that wait for a newer version. ParameterShard decides when a chunk steps; the chunk knows how.
//
// Thread rules: owned by its ParameterShard, used on the server's event-loop thread only. Callers
// outside the shard see chunks read-only (ParameterShard::chunk()).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "common/base/aligned.h"
#include "common/engine/chunk_plan.h"
#include "common/engine/optim/optimizer.h"
#include "common/storage/chunk_snapshot.h"

namespace pstrain {

struct ShardChunk {
  using PullDone = std::function<void(uint64_t version)>;

  ChunkInfo info;
  // The columns of the kernel whose whole rows the chunk holds, or 0 if it is not such a chunk (a
  // bias, a conv kernel, a cut inside a row): only such chunks take factored pushes.
  size_t row_columns = 0;
  // > 0: a sparse table's piece (info.is_table_piece(); table_piece.h), rows of this width.
  size_t table_dim = 0;
  float l2 = 0;
  float moving_momentum = -1;  // >= 0: a batch_norm moving statistic (nn/moving_statistics.h)
  AlignedFloats values;
  // The values before the last update (the optimizer writes the new ones here, then the two
  // swap: no copy), valid for version previous_version; the current values are valid from
  // values_since (steps without examples do not change them) to `version`.
  // A lazy table piece (table_piece.h) keeps no whole `previous` (it stays empty): the rows its
  // last update changed (piece-local, ascending) and their values before it, for previous_version.
  AlignedFloats previous;
  uint64_t previous_version = UINT64_MAX;
  std::vector<uint32_t> previous_rows;
  AlignedFloats previous_row_values;
  uint64_t values_since = 0;
  AlignedFloats scratch;  // summed gradient
  // Clipping (sync): the step's examples while its summed gradient waits in `scratch` for a
  // clip factor (ParameterShard::pull); -1 when none waits.
  int64_t held_examples = -1;
  double held_sum_squares = 0;  // of that gradient: the held step's push replies carry it, and a late push of the step applied last
  float held_lr_scale = 1.0f;   // the held step's learning-rate multiplier (PushRequest::lr_scale)
  std::optional<float> held_factor;  // the clip factor a pull brought, until the step is applied
  optim::OptimizerState optimizer_state;
  uint64_t version = 0;
  // Sync: by slice, the compression state (residual, warm-start factors) that slice pushed with
  // the step that made `version`, or that the restored backup of that version held. Async: the
  // state each worker last put as it paused for a cut.
  std::map<uint32_t, std::vector<float>> worker_state;
  std::vector<std::pair<uint64_t, PullDone>> waiting_pulls;
  AlignedFloats initial;  // for reset() (empty for a table piece: its owner makes the values again)

  size_t size() const { return info.size; }
  // The chunk's first kernel row (when row_columns > 0).
  size_t first_row() const { return row_columns > 0 ? info.offset / row_columns : 0; }
  // The values at exactly version `at`: the current ones, or those before the last update (a
  // takeover computes on the step's version after some of its chunks moved on); nullopt when the
  // chunk no longer has them.
  std::optional<std::span<const float>> values_at(uint64_t at) const;
  // worker_state's entry for `worker`, or nullptr.
  const std::vector<float>* state_of(uint32_t worker) const;
  ChunkSnapshot snapshot() const { return {info.key, version, values, optimizer_state, worker_state}; }

  // The optimizer step on a finished gradient (scaled and regularised), keeping the old values.
  void step(optim::Optimizer& optimizer, std::span<const float> gradient, float lr_scale = 1.0f);
  // The state of a backup (restore) or the initial one (reset): no older version is held.
  void restore(const ChunkSnapshot& snapshot);
  void reset(const optim::Optimizer& optimizer);
  // Answers the pulls that wait for a version this chunk has reached.
  void release_pulls();
};

}  // namespace pstrain
