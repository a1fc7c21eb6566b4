// The submit-time check of a job spec's `init_from` against what the coordinator has: the source
// exists (a job with a checkpoint or a model, at the step asked for, or an uploaded model), and
// its model has exactly the new model's tensors, names and shapes (from the source job's spec or
// the uploaded model's record: no file is read), and
// to resume, the same optimizer. The job checks the file itself again when it starts.
//
// Thread rules: reads the store (thread-safe); any thread.
#pragma once

#include "common/base/error.h"
#include "common/data/job_spec.h"
#include "coordinator/store/job_store.h"

namespace pstrain {

// Throws SpecError naming the field (/init_from/job, /init_from/checkpoint, /init_from/model,
// /init_from/optimizer_state, or /init_from with the tensor at fault).
void check_init_from(const JobSpec& spec, const JobStore& store);

}  // namespace pstrain
