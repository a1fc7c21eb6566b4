// The trained parameters on their way from the servers to the job's model file: pulled a few
// chunks at a time in the file's order (tensor after tensor) and written piece by piece, so the
// coordinator holds a few chunks and one piece at a time, never the model; the header (piece 0)
// last.
//
// Thread rules: event-loop thread only; `job` must outlive the promises (its JobRunner owns both).
#pragma once

#include <kj/async.h>

#include <cstddef>
#include <cstdint>
#include <optional>

#include "coordinator/job/job_context.h"

namespace pstrain {

struct StoredModel {
  size_t pieces = 0;
  int64_t bytes = 0;
};

// Stores the final parameters as the job's model file; nullopt if the job stopped running
// (cancelled, failed) meanwhile.
kj::Promise<std::optional<StoredModel>> store_final_model(JobContext& job);

// Async: logs how many pushes every chunk took against the planned steps (before the end). In
// async mode a chunk's version counts the pushes it took in this timeline: more than planned
// means steps were applied twice, fewer that some were skipped.
kj::Promise<void> log_async_updates(JobContext& job);

}  // namespace pstrain
