// What the parts of a training session share (training_session.h): the assignment's fixed facts,
// and the session's waits, which end when the worker must stop or the coordinator re-planned the
// job.
//
// Thread rules: one thread, the session's (the one whose event loop the waits use).
// Ownership: SessionWaits refers to the stop promise, which outlives it.
#pragma once

#include <kj/async.h>

#include <cstdint>
#include <memory>
#include <string>

#include "common/data/training_spec.h"
#include "common/engine/model_spec.h"
#include "common/engine/optim/optimizer_spec.h"
#include "common/rpc/proto/pstrain.capnp.h"
#include "worker/stoppable_wait.h"
#include "worker/store_stream.h"

namespace pstrain {

// What a session reads of its job: narrowed from the job spec where the worker receives it (the
// session's constructor, the one worker file of the distributed path that reads specs).
struct SessionSpec {
  DatasetSpec dataset;  // the plan's shard policy and shuffle seed
  ModelSpec model;
  LossSpec loss;
  TrainingSpec training;
  BackupSpec backup;
  OptimizerSpec optimizer;  // the servers apply it; the worker reads its gradient clipping
  bool reduce_on_plateau = false;  // each epoch's learning-rate multiplier comes from the coordinator
  Precision precision = Precision::kFloat32;  // worker/precision.h
};

// The assignment's facts, fixed for the session's life.
struct SessionFacts {
  mutable proto::Coordinator::Client coordinator;  // (a handle: making a request changes no fact)
  uint32_t node_id = 0;
  std::string job_id;
  SessionSpec spec;
  uint32_t worker_index = 0, worker_count = 1;  // this worker's slice, and the job's slices
  uint64_t steps_per_epoch = 0;
  uint64_t generation = 0;  // of the plan (a recovery makes a new one)
  // The training split's shards when this worker reads its examples itself (store_stream.h);
  // null: the coordinator streams them.
  std::shared_ptr<WorkerStore> store;
  std::shared_ptr<WorkerStore> test_store;  // the test split's, the same way
  std::shared_ptr<WorkerStore> validation_store;  // a hold-out's validation part, the same way
  bool sync() const { return spec.training.mode == TrainingMode::kSync; }

  // A data stream of `split` for this worker, of `epoch` from `from_step`: its own slice (slice
  // -1), an extra one, or one it was ordered to take over.
  proto::DataStream::Client open_shard(proto::Split split, uint32_t epoch, uint64_t from_step, int64_t slice) const {
    const uint32_t whose = slice < 0 ? worker_index : static_cast<uint32_t>(slice);
    if (split == proto::Split::TRAIN && store) return store->open_train(epoch, whose, from_step);
    const int64_t block_batch = (spec.training.global_batch_size + worker_count - 1) / worker_count;
    if (split == proto::Split::TEST && test_store) return test_store->open_block(whose, worker_count, block_batch);
    if (split == proto::Split::VALIDATION && validation_store) {
      return validation_store->open_block(whose, worker_count, block_batch);
    }
    auto request = coordinator.openShardRequest();
    request.setJobId(job_id);
    request.setNodeId(node_id);
    request.setSplit(split);
    request.setEpoch(epoch);
    request.setFromStep(from_step);
    request.setSlice(static_cast<int32_t>(slice));
    return request.send().getStream();
  }
};

class SessionWaits {
 public:
  explicit SessionWaits(kj::ForkedPromise<void>& stop) : stop_(stop) {}

  // The coordinator answered the watch call with an error: the job was re-planned (a recovery)
  // and this session is stale. Every wait() then fails, so a session blocked on a call that will
  // never be answered (a server that lost the connection without the reset reaching us: a
  // partition, a reboot) ends and asks for the new plan.
  void replanned() { replanned_.fulfiller->fulfill(); }

  // Waits for `promise` unless the worker must stop (throws DISCONNECTED) or the job was
  // re-planned (throws FAILED) first.
  template <typename T>
  T wait(kj::WaitScope& wait_scope, kj::Promise<T>&& promise) {
    auto unless_replanned = promise.exclusiveJoin(replanned_signal_.addBranch().then([]() -> kj::Promise<T> {
      return KJ_EXCEPTION(FAILED, "the coordinator re-planned the job: this session is stale");
    }));
    return wait_unless_stopped(kj::mv(unless_replanned), stop_, wait_scope);
  }
  kj::ForkedPromise<void>& stop() { return stop_; }

 private:
  kj::ForkedPromise<void>& stop_;
  kj::PromiseFulfillerPair<void> replanned_ = kj::newPromiseAndFulfiller<void>();
  kj::ForkedPromise<void> replanned_signal_ = replanned_.promise.fork();
};

}  // namespace pstrain
