// A worker as pstrain-worker runs it: registers with the coordinator, waits for an assignment,
// trains it (TrainingSession), and waits for the next. worker_main.cc runs one per process; tests
// run several, each on a thread of its own (tests/coordinator/inprocess_cluster.h).
//
// Thread rules: run_worker_node() runs on the calling thread's event loop (the session's compute
// runs there too) and returns once the node has stopped; everything it builds lives on that
// thread and is gone when it returns.
#pragma once

#include <kj/async-io.h>

#include <cstdint>
#include <functional>
#include <string>

#include "common/rpc/rpc_util.h"
#include "worker/training_session.h"

namespace pstrain {

struct WorkerNodeConfig {
  rpc::HostPort coordinator;
  std::string name;
  SessionOptions session;  // compute threads per step, how gradients travel, the cluster credential
  // On a preemption, how long the worker trains on while the coordinator backs its job up.
  kj::Duration preemption_timeout = 30 * kj::SECONDS;
};

// Runs a worker until `stop` resolves; calls `ready(0)` once registered (a worker listens on no
// port). NodeStop::kNow stops at once (the session's waits end); kPreempted first tells the
// coordinator, which has the servers back up at the next step and hold there, and trains on
// until that backup is complete, so the job loses no step.
void run_worker_node(kj::AsyncIoContext& io, const WorkerNodeConfig& config, kj::Promise<rpc::NodeStop> stop,
                     const std::function<void(uint32_t port)>& ready);

}  // namespace pstrain
