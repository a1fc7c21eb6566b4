// The Coordinator RPC interface: registration and heartbeats, assignments (long-polled by
// workers), data shards and progress reports, over the Cluster and the JobManager.
//
// Thread rules: event-loop thread only.
#pragma once

#include <kj/timer.h>

#include <map>
#include <vector>

#include "common/rpc/proto/pstrain.capnp.h"
#include "coordinator/cluster/cluster.h"
#include "coordinator/job/job_manager.h"

namespace pstrain {

class CoordinatorService final : public proto::Coordinator::Server {
 public:
  CoordinatorService(Cluster& cluster, JobManager& jobs, kj::Timer& timer, uint32_t heartbeat_ms,
                     uint32_t dead_after_ms);

  // Wakes every worker waiting in getAssignment so it looks again (after a job started or its
  // servers became ready).
  void wake_waiting_workers();

 protected:
  kj::Promise<void> register_(RegisterContext context) override;
  kj::Promise<void> heartbeat(HeartbeatContext context) override;
  kj::Promise<void> getAssignment(GetAssignmentContext context) override;
  kj::Promise<void> openShard(OpenShardContext context) override;
  kj::Promise<void> reportProgress(ReportProgressContext context) override;
  kj::Promise<void> served(ServedContext context) override;
  kj::Promise<void> backupDone(BackupDoneContext context) override;
  kj::Promise<void> preempted(PreemptedContext context) override;
  kj::Promise<void> watch(WatchContext context) override;
  kj::Promise<void> paused(PausedContext context) override;
  kj::Promise<void> learningRateScale(LearningRateScaleContext context) override;
  kj::Promise<void> storeReplica(StoreReplicaContext context) override;

 private:
  // Throws unless `incarnation` (0: the caller does not say) is the one `node` registered with.
  static void check_caller(const NodeInfo& node, uint64_t incarnation);
  kj::Promise<void> wait_for_assignment(GetAssignmentContext context, NodeId node, uint64_t min_generation,
                                        kj::TimePoint deadline);

  Cluster& cluster_;
  JobManager& jobs_;
  kj::Timer& timer_;
  uint32_t heartbeat_ms_;
  uint32_t dead_after_ms_;
  std::vector<kj::Own<kj::PromiseFulfiller<void>>> waiting_;
};

}  // namespace pstrain
