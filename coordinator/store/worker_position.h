// Where an async worker stands between two steps: what a consistent cut records for each worker
// (coordinator/job/async_cuts.h) and the JobStore keeps with the cut, so a restarted coordinator
// resumes each worker there. A plain value.
#pragma once

#include <cstdint>

namespace pstrain {

struct WorkerPosition {
  uint32_t epoch = 0;
  uint64_t step = 0;        // within the epoch
  uint64_t steps_done = 0;  // the worker's steps in the job
  bool operator==(const WorkerPosition&) const = default;
};

}  // namespace pstrain
