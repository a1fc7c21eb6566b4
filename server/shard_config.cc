#include "server/shard_config.h"

#include "common/data/job_spec.h"

namespace pstrain {

ShardConfig shard_config_of(const JobSpec& spec) {
  ShardConfig config;
  config.mode = spec.training.mode;
  config.global_batch_size = spec.training.global_batch_size;
  config.backup_workers = spec.training.backup_workers;
  config.max_staleness = spec.training.max_staleness;
  config.async_lr = spec.training.async_lr;
  config.optimizer = spec.optimizer;
  config.model = spec.model;
  return config;
}

}  // namespace pstrain
