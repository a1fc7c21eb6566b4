// A lost sync worker's step completed by a survivor (the essay is in takeover.cc): nothing is
// rolled back, the job re-plans from the next step with one worker fewer.
//
// Thread rules: event-loop thread only. Refers to the job's JobContext, which outlives it.
#pragma once

#include <kj/async.h>

#include <optional>

#include "coordinator/job/job_context.h"

namespace pstrain {

class Takeover {
 public:
  explicit Takeover(JobContext& job);

  // Whether worker `lost`'s step can be taken over now: a running sync job without backup
  // workers, and a live survivor with an open watch.
  bool possible(size_t lost) const;
  // Orders a survivor to compute and push the lost slice, and every server to settle at the next
  // step; resolves with that step, the one to re-plan from. Fails when that cannot work (a chunk
  // too far ahead, no survivor, JobOptions::takeover_timeout, a rollback meanwhile): the caller
  // then rolls back.
  kj::Promise<uint64_t> run(size_t lost);
  // Whether worker node `node` was ordered to take over `slice` in this generation: its data
  // stream may read that slice's examples (JobRunner::open_shard).
  bool granted(NodeId node, uint32_t slice) const {
    return grant_ && grant_->node == node && grant_->slice == slice && grant_->generation == job_.generation;
  }

 private:
  JobContext& job_;
  struct Grant {
    NodeId node;
    uint32_t slice = 0;
    uint64_t generation = 0;
  };
  std::optional<Grant> grant_;  // the last order
};

}  // namespace pstrain
