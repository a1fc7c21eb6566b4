// A restarted coordinator going on from its servers' state (sync), instead of from the last
// complete backup (the essay is in adoption.cc).
//
// Thread rules: event-loop thread only.
#pragma once

#include <kj/async.h>

#include "coordinator/job/job_context.h"

namespace pstrain {

// Checks that every chunk of the job stands at one step v on every server, fences off the old
// plan's pushes at v (settle with the job's current generation) and lifts any hold the old
// coordinator left; resolves with v. Fails if the servers do not hold the job or are not at one
// step (the caller then configures them afresh).
kj::Promise<uint64_t> adopt_servers_state(JobContext& job);

}  // namespace pstrain
