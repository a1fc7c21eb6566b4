#include "common/data/data_plan.h"

#include <algorithm>

#include "common/base/rng.h"
#include "common/data/job_spec.h"

namespace pstrain {

DataPlan::DataPlan(ShardPolicy policy, TrainingMode mode, uint32_t examples, int64_t global_batch, uint32_t workers,
                   uint64_t shuffle_seed, uint64_t shuffle_window)
    : policy_(policy),
      mode_(mode),
      examples_(examples),
      global_batch_(global_batch),
      workers_(std::max<uint32_t>(1, workers)),
      seed_(shuffle_seed),
      window_(shuffle_window) {}

DataPlan::DataPlan(const JobSpec& spec, uint32_t examples, uint32_t workers)
    : DataPlan(spec.dataset.shard_policy, spec.training.mode, examples, spec.training.global_batch_size, workers,
               spec.dataset.shuffle_seed, spec.dataset.shuffle_window) {}

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

DataPlan::EpochShard DataPlan::shard(uint32_t epoch, uint32_t worker) const {
  EpochShard shard;
  shard.worker_ = worker;
  shard.workers_ = workers_;
  shard.steps_ = steps_per_epoch(worker);
  shard.epoch_ = epoch;
  shard.window_ = window_;
  shard.length_ = examples_;
  shard.seed_ = seed_;
  shard.batch_ = per_worker_batch();
  if (policy_ == ShardPolicy::kData) {
    shard.cut_ = mode_ == TrainingMode::kSync ? EpochShard::Cut::kGlobal : EpochShard::Cut::kStrided;
    if (mode_ == TrainingMode::kSync) shard.batch_ = global_batch_;
  } else {
    // FILE: the worker's block of the stored order; OFF: the whole split. Each in its own order.
    shard.cut_ = EpochShard::Cut::kOwn;
    shard.seed_ = mix_seed(seed_, worker);
    if (policy_ == ShardPolicy::kFile) {
      shard.base_ = static_cast<uint32_t>(uint64_t{examples_} * worker / workers_);
      shard.length_ = static_cast<uint32_t>(sequence_length(worker));
    }
  }
  return shard;
}

uint32_t DataPlan::EpochShard::at(uint64_t position) const {
  if (!order_ || order_->position() > position) order_.emplace(length_, seed_, epoch_, window_);
  order_->skip(position - order_->position());
  return base_ + order_->next();
}

std::vector<uint32_t> DataPlan::EpochShard::batch(int64_t step) const {
  std::vector<uint32_t> ids;
  if (cut_ == Cut::kGlobal) {
    const int64_t n = length_;
    const int64_t first = std::min(step * batch_, n);
    const int64_t len = std::min(batch_, n - first);
    const int64_t begin = first + len * worker_ / workers_, end = first + len * (worker_ + 1) / workers_;
    ids.reserve(static_cast<size_t>(end - begin));
    for (int64_t p = begin; p < end; ++p) ids.push_back(at(static_cast<uint64_t>(p)));
    return ids;
  }
  // The worker's sequence: positions worker, worker + N, ... of the order (strided), or all of
  // its own order; step's batch is the sequence's [step*b, (step+1)*b).
  const uint64_t stride = cut_ == Cut::kStrided ? workers_ : 1, offset = cut_ == Cut::kStrided ? worker_ : 0;
  const uint64_t length = length_ > offset ? (length_ - offset + stride - 1) / stride : 0;
  const uint64_t first = std::min<uint64_t>(static_cast<uint64_t>(step * batch_), length);
  const uint64_t end = std::min<uint64_t>(first + static_cast<uint64_t>(batch_), length);
  ids.reserve(static_cast<size_t>(end - first));
  for (uint64_t k = first; k < end; ++k) ids.push_back(at(offset + k * stride));
  return ids;
}

}  // namespace pstrain
