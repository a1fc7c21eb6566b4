// A sync cut (the essay is in sync_cut.cc): every server backs up at one step just ahead and
// holds there, so the job can be re-planned from that step with nothing replayed. Used by a
// preemption notice and by a worker joining a job that runs short of workers. The job's phase is
// kCutting while it runs.
//
// Thread rules: event-loop thread only. Refers to the job's JobContext, which outlives it.
#pragma once

#include <kj/async.h>

#include "coordinator/job/job_context.h"

namespace pstrain {

class SyncCut {
 public:
  explicit SyncCut(JobContext& job);

  // Resolves when the cut's backup is complete: a new cut if the job is running (sync), the
  // running one's if a cut is under way, at once otherwise. Fails (holds released) after
  // JobOptions::sync_cut_timeout.
  kj::Promise<void> cut();

 private:
  kj::Promise<void> run();
  // Marks a cut on every server; resolves with its step once no server is past it.
  kj::Promise<uint64_t> mark(int attempt);

  JobContext& job_;
  kj::Maybe<kj::ForkedPromise<void>> running_;  // the running cut (later callers join it)
};

}  // namespace pstrain
