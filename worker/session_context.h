// What the parts of a training session share (training_session.h): the assignment's fixed facts,
// and the session's waits, which end when the worker must stop or the coordinator re-planned the
// job.
//
// Thread rules: one thread, the session's (the one whose event loop the waits use).
// Ownership: SessionWaits refers to the stop promise, which outlives it.
#pragma once

#include <kj/async.h>

#include <cstdint>
#include <string>

#include "common/data/job_spec.h"
#include "common/rpc/proto/pstrain.capnp.h"
#include "worker/stoppable_wait.h"

namespace pstrain {

// The assignment's facts, fixed for the session's life.
struct SessionFacts {
  mutable proto::Coordinator::Client coordinator;  // (a handle: making a request changes no fact)
  uint32_t node_id = 0;
  std::string job_id;
  JobSpec spec;
  uint32_t worker_index = 0, worker_count = 1;  // this worker's slice, and the job's slices
  uint64_t steps_per_epoch = 0;
  uint64_t generation = 0;  // of the plan (a recovery makes a new one)
  bool sync() const { return spec.training.mode == TrainingMode::kSync; }
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
