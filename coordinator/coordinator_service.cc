#include "coordinator/coordinator_service.h"

#include "common/log.h"
#include "common/rpc/rpc_util.h"

namespace pstrain {

CoordinatorService::CoordinatorService(Cluster& cluster, JobManager& jobs, kj::Timer& timer, uint32_t heartbeat_ms)
    : cluster_(cluster), jobs_(jobs), timer_(timer), heartbeat_ms_(heartbeat_ms) {}

void CoordinatorService::wake_waiting_workers() {
  auto waiting = kj::mv(waiting_);
  waiting_.clear();
  for (auto& f : waiting) f->fulfill();
}

kj::Promise<void> CoordinatorService::register_(RegisterContext context) {
  const auto params = context.getParams();
  const std::string address = rpc::to_string(params.getAddress());
  const std::string name = rpc::to_string(params.getName());
  KJ_REQUIRE(name.size() <= 256 && address.size() <= 256, "name and address must be at most 256 bytes");
  if (params.getRole() == proto::Role::SERVER) {
    rpc::parse_host_port(address, 7100, "server address");  // throws on garbage
    KJ_REQUIRE(!address.empty(), "a server must give the address workers reach it on");
  }
  const uint32_t id = cluster_.register_node(params.getRole(), address, name);
  context.getResults().setNodeId(id);
  context.getResults().setHeartbeatMs(heartbeat_ms_);
  if (jobs_.schedule()) wake_waiting_workers();
  return kj::READY_NOW;
}

kj::Promise<void> CoordinatorService::heartbeat(HeartbeatContext context) {
  context.getResults().setKnown(cluster_.heartbeat(context.getParams().getNodeId()));
  return kj::READY_NOW;
}

kj::Promise<void> CoordinatorService::getAssignment(GetAssignmentContext context) {
  const uint32_t node = context.getParams().getNodeId();
  const NodeInfo* info = cluster_.find(node);
  KJ_REQUIRE(info != nullptr && info->alive, "unknown node: register first", node);
  KJ_REQUIRE(info->role == proto::Role::WORKER, "only workers get assignments", node);
  const uint32_t wait_ms = std::min<uint32_t>(context.getParams().getWaitMs(), 60000);
  return wait_for_assignment(context, node, timer_.now() + wait_ms * kj::MILLISECONDS);
}

kj::Promise<void> CoordinatorService::wait_for_assignment(GetAssignmentContext context, uint32_t node,
                                                          kj::TimePoint deadline) {
  if (JobRunner* job = jobs_.job_of_worker(node)) {
    auto results = context.getResults();
    if (job->fill_assignment(node, results.initAssignment())) {
      results.setHas(true);
      return kj::READY_NOW;
    }
  }
  if (timer_.now() >= deadline) {
    context.getResults().setHas(false);
    return kj::READY_NOW;
  }
  auto paf = kj::newPromiseAndFulfiller<void>();
  waiting_.push_back(kj::mv(paf.fulfiller));
  return paf.promise.exclusiveJoin(timer_.atTime(deadline)).then([this, context, node, deadline]() mutable {
    return wait_for_assignment(context, node, deadline);
  });
}

kj::Promise<void> CoordinatorService::openShard(OpenShardContext context) {
  const auto params = context.getParams();
  JobRunner* job = jobs_.find(rpc::to_string(params.getJobId()));
  KJ_REQUIRE(job != nullptr, "unknown job", params.getJobId());
  context.getResults().setStream(
      job->open_shard(params.getNodeId(), params.getSplit(), params.getEpoch(), params.getFromStep()));
  return kj::READY_NOW;
}

kj::Promise<void> CoordinatorService::reportProgress(ReportProgressContext context) {
  const auto params = context.getParams();
  const auto report = params.getReport();
  JobRunner* job = jobs_.find(rpc::to_string(report.getJobId()));
  KJ_REQUIRE(job != nullptr, "unknown job", report.getJobId());
  context.getResults().setKeepGoing(job->on_progress(params.getNodeId(), report));
  return kj::READY_NOW;
}

}  // namespace pstrain
