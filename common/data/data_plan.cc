#include "common/data/data_plan.h"

#include <algorithm>

#include "common/base/rng.h"
#include "common/data/job_spec.h"

namespace pstrain {

DataPlan::DataPlan(ShardPolicy policy, TrainingMode mode, uint32_t examples, int64_t global_batch, uint32_t workers,
                   uint64_t shuffle_seed)
    : policy_(policy),
      mode_(mode),
      examples_(examples),
      global_batch_(global_batch),
      workers_(std::max<uint32_t>(1, workers)),
      seed_(shuffle_seed) {}

DataPlan::DataPlan(const JobSpec& spec, uint32_t examples, uint32_t workers)
    : DataPlan(spec.dataset.shard_policy, spec.training.mode, examples, spec.training.global_batch_size, workers,
               spec.dataset.shuffle_seed) {}

int64_t DataPlan::per_worker_batch() const { return (global_batch_ + workers_ - 1) / workers_; }

uint64_t DataPlan::sequence_length(uint32_t worker) const {
  switch (policy_) {
    case ShardPolicy::kData:
      return examples_ > worker ? (examples_ - worker + workers_ - 1) / workers_ : 0;
    case ShardPolicy::kFile:
      return uint64_t{examples_} * (worker + 1) / workers_ - uint64_t{examples_} * worker / workers_;
    case ShardPolicy::kOff:
      return examples_;
  }
  return 0;
}

int64_t DataPlan::steps_per_epoch(uint32_t worker) const {
  if (mode_ == TrainingMode::kSync && policy_ == ShardPolicy::kData) {
    return (examples_ + global_batch_ - 1) / global_batch_;
  }
  const int64_t b = per_worker_batch();
  if (mode_ == TrainingMode::kSync) {
    uint64_t longest = 0;
    for (uint32_t w = 0; w < workers_; ++w) longest = std::max(longest, sequence_length(w));
    return static_cast<int64_t>((longest + b - 1) / b);
  }
  return static_cast<int64_t>((sequence_length(worker) + b - 1) / b);
}

std::vector<uint32_t> DataPlan::sequence(uint32_t epoch, uint32_t worker) const {
  switch (policy_) {
    case ShardPolicy::kData: {
      const std::vector<uint32_t> order = epoch_order(examples_, seed_, epoch);
      std::vector<uint32_t> mine;
      for (uint64_t i = worker; i < order.size(); i += workers_) mine.push_back(order[i]);
      return mine;
    }
    case ShardPolicy::kFile: {
      const uint32_t begin = static_cast<uint32_t>(uint64_t{examples_} * worker / workers_);
      const auto local = epoch_order(static_cast<uint32_t>(sequence_length(worker)), mix_seed(seed_, worker), epoch);
      std::vector<uint32_t> mine(local.size());
      for (size_t i = 0; i < local.size(); ++i) mine[i] = begin + local[i];
      return mine;
    }
    case ShardPolicy::kOff:
      return epoch_order(examples_, mix_seed(seed_, worker), epoch);
  }
  return {};
}

DataPlan::EpochShard DataPlan::shard(uint32_t epoch, uint32_t worker) const {
  EpochShard shard;
  shard.worker_ = worker;
  shard.workers_ = workers_;
  shard.steps_ = steps_per_epoch(worker);
  if (mode_ == TrainingMode::kSync && policy_ == ShardPolicy::kData) {
    shard.global_slicing_ = true;
    shard.sequence_ = epoch_order(examples_, seed_, epoch);
    shard.batch_ = global_batch_;
  } else {
    shard.sequence_ = sequence(epoch, worker);
    shard.batch_ = per_worker_batch();
  }
  return shard;
}

std::vector<uint32_t> DataPlan::EpochShard::batch(int64_t step) const {
  const auto n = static_cast<int64_t>(sequence_.size());
  const int64_t first = std::min(step * batch_, n);
  const int64_t len = std::min(batch_, n - first);
  int64_t begin = first, end = first + len;
  if (global_slicing_) {
    begin = first + len * worker_ / workers_;
    end = first + len * (worker_ + 1) / workers_;
  }
  return {sequence_.begin() + begin, sequence_.begin() + end};
}

}  // namespace pstrain
