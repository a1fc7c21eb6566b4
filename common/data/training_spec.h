// A job spec's `training` and `backup` sections as typed structs (parsed with the rest of the spec
// in job_spec.h): what the servers' shards and the workers' sessions read of a job besides its
// model and optimizer, apart from the spec's other sections (dataset, preprocessing, early
// stopping, checkpoints), so the code that reads only these does not rebuild when those change.
#pragma once

#include <cstdint>
#include <string>

#include "common/data/class_weight.h"

namespace pstrain {

enum class ShardPolicy { kData, kFile, kOff };

// The default `dataset.shuffle_window`: 2^20 examples (4 MiB of ids per reader of the order).
inline constexpr uint64_t kDefaultShuffleWindow = uint64_t{1} << 20;

// The spec's `dataset`: here rather than in job_spec.h because a worker's session plans its data
// from it (common/data/data_plan.h) when it reads its own examples.
struct DatasetSpec {
  std::string name;                          // a built-in (mnist10k, fashion, fashion-mnist) or catalog dataset
  ShardPolicy shard_policy = ShardPolicy::kData;
  uint64_t shuffle_seed = 0;
  // The epoch order's shuffle window, in examples (common/data/windowed_order.h): a split of at
  // most this many examples is in a full permutation.
  uint64_t shuffle_window = kDefaultShuffleWindow;
};

enum class TrainingMode { kSync, kAsync };
enum class CompressionKind { kNone, kFp16, kTopk, kPowerSgd, kBf16 };
// Async: the learning rate of each push (DESIGN-NOTES "Staleness-aware async"): the optimizer's
// own (constant), or divided by max(1, staleness), the versions the chunk moved on since the
// values the push was computed on (staleness; Zhang et al., IJCAI 2016), or that times
// (push examples / global_batch_size)^e, e the optimizer's batch-size exponent: the rate that
// gives the push's examples the progress a sync step would (batch_staleness, the default).
enum class AsyncLr { kConstant, kStaleness, kBatchStaleness };
// What the divergence guard does with a loss that stays above its start for an epoch or a test
// accuracy at chance (coordinator/job/divergence_guard.h): warn (the job goes on) or fail the job.
// A loss that is NaN or infinite fails the job either way.
enum class OnDivergence { kWarn, kFail };

const char* training_mode_name(TrainingMode mode);
const char* compression_kind_name(CompressionKind kind);
const char* async_lr_name(AsyncLr lr);
const char* on_divergence_name(OnDivergence action);

// How a job's gradients (and values) travel between workers and servers (spec
// `training.compression`: "none" | "fp16" | "bf16" | "topk" | "powersgd", or {"kind": ..., "fraction": f}
// (topk) / {"kind": "powersgd", "rank": r}; see
// docs/DESIGN-NOTES.md "Gradient compression". Servers always accumulate and store float32.
// - kFp16: pushed gradients and replied values in IEEE half precision (common/engine/compression.h);
// - kBf16: pushed gradients in bfloat16 (float32's range, 8 significant bits);
//   values come back whole, in float32 (PyTorch DDP's bf16_compress_hook compresses the same way);
// - kTopk: per chunk, the ceil(fraction * size) entries of largest magnitude of (gradient +
//   the worker's residual) pushed as (index, value) pairs; what is not sent stays in the
//   residual (error feedback). Values come back whole, in float32.
// - kPowerSgd: per chunk of whole rows of a kernel (rows x its last dimension), rank-r factors
//   P and Q of (gradient + residual), Q warm-started from the worker's previous step; the rest
//   stays in the residual. Biases (1-D) and chunks the factors would not shrink go dense.
// With any compression the worker uses the dense exchange (the row-sparse, factored and forward
// exchanges are off).
struct CompressionSpec {
  CompressionKind kind = CompressionKind::kNone;
  float fraction = 0.01f;  // topk: of each chunk's entries, in (0, 1]
  uint32_t rank = 4;       // powersgd: of the factors, 1 to 64

  // Whether the codec keeps state on each worker between steps (topk's and powersgd's residual,
  // powersgd's warm-start Q), which the backups hold (DESIGN-NOTES "Gradient compression").
  bool keeps_worker_state() const { return kind == CompressionKind::kTopk || kind == CompressionKind::kPowerSgd; }
};

struct TrainingSpec {
  TrainingMode mode = TrainingMode::kSync;
  int64_t global_batch_size = 0;  // examples per step over all workers
  int64_t epochs = 1;
  int64_t workers = 1;
  int64_t servers = 1;
  int64_t max_staleness = -1;     // async: -1 means unbounded
  int64_t backup_workers = 0;     // sync: apply after workers - backup_workers pushes
  int64_t metrics_every_steps = 10;
  CompressionSpec compression;
  AsyncLr async_lr = AsyncLr::kBatchStaleness;  // async only (the measured default: docs/BENCHMARKS.md)
  OnDivergence on_divergence = OnDivergence::kWarn;
  // The part of the training split held out for validation (common/data/validation_split.h),
  // evaluated after every epoch as the `val_*` figures; 0: none. In [0, 0.9].
  double validation_fraction = 0;
  // Spec `class_weight` (class_weight.h): "balanced", weights by class, or the resolved list,
  // which parse copies into JobSpec::loss.class_weights.
  ClassWeightSpec class_weight;
};

struct BackupSpec {
  enum class Frequency { kNone, kEpoch, kSteps };
  Frequency frequency = Frequency::kNone;
  int64_t steps = 0;  // for kSteps
};

// Spec `precision` (Keras' policy names): float32, or mixed_bfloat16, the convolutions' products
// in bfloat16 where the CPU computes them natively (nn/onednn_conv.h: AVX512-BF16 or AMX),
// float32 master weights, optimizer slots, losses and everything else; on another CPU the job runs
// in float32 and its workers say so. Exported models and :predict run float32.
enum class Precision { kFloat32, kMixedBfloat16 };
const char* precision_name(Precision p);

}  // namespace pstrain
