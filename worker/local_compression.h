// The standalone trainer's stand-in for a sync cluster's compressed pushes (training.compression),
// so that `pstrain-train --threads N --servers S` ends as the sync cluster of N workers and S
// servers does, bit for bit, with compression too: each slice's gradient is replaced, chunk by
// chunk of the cluster's plan (plan_chunks with S servers), by what the servers decode from the
// push that slice's worker sends (push_compression.h): fp16 and bf16 rounded; topk's entries and
// powersgd's factors' product, with the slice's own residual and warm-start factors kept from step
// to step as that worker keeps them. With fp16 the step computes on the values rounded to half,
// as the workers' replies bring them, and evaluates on them as the workers do. Sparse tables' rows
// and batch_norm's moving statistics go exact, as on the wire.
//
// A batch shorter than the slices leaves some empty, in the trainer (DataParallelModel) as in the
// cluster, and an empty slice's zero gradient still goes through its codec (a residual), as an
// idle worker's push does. Limit: a resumed run (InitialState) starts from zero residuals and the
// first warm-start factors, where a cluster's rollback restores them from its backups.
//
// Thread rules: one thread (the trainer's step loop). Ownership: owns the slices' residuals,
// factors and scratch.
#pragma once

#include <cstdint>
#include <vector>

#include "common/base/aligned.h"
#include "common/data/training_spec.h"
#include "common/engine/param_layout.h"
#include "worker/compression_chunks.h"

namespace pstrain {

class LocalCompression {
 public:
  // `servers`: the cluster's (0 counts as 1); `slices`: its workers (the trainer's replicas).
  LocalCompression(const CompressionSpec& compression, uint64_t seed, const ParamLayout& layout, uint32_t servers,
                   int slices);

  bool active() const { return spec_.kind != CompressionKind::kNone; }
  // Slice `slice`'s summed gradient (the flat dense buffer) replaced, in place, by what the
  // servers decode from its pushes.
  void decode_as_pushed(int slice, float* gradient);
  // The values a step computes and an evaluation runs on: `params` itself, or (fp16) a copy whose
  // first `dense` values are rounded to half precision (the rest, sparse tables' rows, copied as
  // they are: an evaluation reads them from the flat buffer). Valid until the next call.
  const float* values_for_step(const float* params, size_t dense, size_t total);

 private:
  CompressionSpec spec_;
  std::vector<std::vector<CompressionChunk>> chunks_;  // by slice: the table, with its factors
  std::vector<AlignedFloats> residual_;                // by slice (topk, powersgd)
  std::vector<uint32_t> indices_;
  std::vector<float> values_, scratch_, p_, q_, encoded_;
  AlignedFloats rounded_;
};

}  // namespace pstrain
