// What a parameter shard reads of its job: the update rule's settings, the optimizer and the
// model (its layout, seed and moving statistics), narrowed from the job spec where the server
// receives it (ParameterServerImpl::configure, the one server file that reads specs), so the
// shard and its rules do not depend on the spec's other sections.
//
// Thread rules: a value; no shared state.
#pragma once

#include <cstdint>

#include "common/data/training_spec.h"
#include "common/engine/model_spec.h"
#include "common/engine/optim/optimizer_spec.h"

namespace pstrain {

struct JobSpec;

struct ShardConfig {
  TrainingMode mode = TrainingMode::kSync;
  int64_t global_batch_size = 0;
  int64_t backup_workers = 0;  // sync: apply after workers - backup_workers pushes
  int64_t max_staleness = -1;  // async: -1 means unbounded
  AsyncLr async_lr = AsyncLr::kBatchStaleness;
  OptimizerSpec optimizer;
  ModelSpec model;
};

// The shard's part of `spec`.
ShardConfig shard_config_of(const JobSpec& spec);

}  // namespace pstrain
