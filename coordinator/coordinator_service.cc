#include "coordinator/coordinator_service.h"

#include "common/base/log.h"
#include "common/rpc/rpc_util.h"

namespace pstrain {

CoordinatorService::CoordinatorService(Cluster& cluster, JobManager& jobs, kj::Timer& timer, uint32_t heartbeat_ms,
                                       uint32_t dead_after_ms)
    : cluster_(cluster), jobs_(jobs), timer_(timer), heartbeat_ms_(heartbeat_ms), dead_after_ms_(dead_after_ms) {}

void CoordinatorService::wake_waiting_workers() {
  auto waiting = kj::mv(waiting_);
  waiting_.clear();
  for (auto& f : waiting) f->fulfill();
}

kj::Promise<void> CoordinatorService::register_(RegisterContext context) {
  const auto params = context.getParams();
  const std::string address = rpc::to_string(params.getAddress());
  const std::string name = rpc::to_string(params.getName());
  const std::string cpu = rpc::to_string(params.getCpu());
  KJ_REQUIRE(name.size() <= 256 && address.size() <= 256, "name and address must be at most 256 bytes");
  KJ_REQUIRE(cpu.size() <= 512, "cpu must be at most 512 bytes");
  // The same process connecting again (its connection broke, or this coordinator stalled long
  // enough for it to give up on the old one): it keeps its id and its place in its jobs.
  if (NodeInfo* same = cluster_.reconnecting(params.getRole(), name, params.getIncarnation(), address)) {
    context.getResults().setNodeId(same->id.value());
    context.getResults().setHeartbeatMs(heartbeat_ms_);
    context.getResults().setDeadAfterMs(dead_after_ms_);
    return kj::READY_NOW;
  }
  if (params.getRole() == proto::Role::SERVER) {
    rpc::parse_host_port(address, 7100, "server address");  // throws on garbage
    KJ_REQUIRE(!address.empty(), "a server must give the address workers reach it on");
  }
  // A server registering under the name of a server that jobs use is that server restarted: the
  // old registration is dead (even if its heartbeats have not timed out yet).
  std::vector<NodeId> replaced;
  if (params.getRole() == proto::Role::SERVER) {
    for (const auto& [id, node] : cluster_.nodes()) {
      if (node.role == proto::Role::SERVER && node.alive && node.name == name) replaced.push_back(id);
    }
    for (NodeId id : replaced) cluster_.find(id)->alive = false;
  }
  const NodeId id = cluster_.register_node(params.getRole(), address, name, cpu, params.getIncarnation());
  jobs_.on_nodes_lost(replaced, "restarted (registered again)");
  if (params.getRole() == proto::Role::SERVER) jobs_.on_server_registered(id);
  context.getResults().setNodeId(id.value());
  context.getResults().setHeartbeatMs(heartbeat_ms_);
  context.getResults().setDeadAfterMs(dead_after_ms_);
  if (jobs_.schedule()) wake_waiting_workers();
  return kj::READY_NOW;
}

void CoordinatorService::check_caller(const NodeInfo& node, uint64_t incarnation) {
  KJ_REQUIRE(incarnation == 0 || node.incarnation == 0 || node.incarnation == incarnation,
             "this node id is another process's (a restarted coordinator numbered the nodes anew): register again",
             node.id.value());
}

kj::Promise<void> CoordinatorService::heartbeat(HeartbeatContext context) {
  const auto params = context.getParams();
  context.getResults().setKnown(cluster_.heartbeat(NodeId{params.getNodeId()}, params.getProgress()));
  return kj::READY_NOW;
}

kj::Promise<void> CoordinatorService::getAssignment(GetAssignmentContext context) {
  const NodeId node{context.getParams().getNodeId()};
  const NodeInfo* info = cluster_.find(node);
  KJ_REQUIRE(info != nullptr && info->alive, "unknown node: register first", node);
  KJ_REQUIRE(info->role == proto::Role::WORKER, "only workers get assignments", node);
  check_caller(*info, context.getParams().getIncarnation());
  const uint32_t wait_ms = std::min<uint32_t>(context.getParams().getWaitMs(), 60000);
  if (context.getParams().getBrokenJobId().size() > 0 && context.getParams().getMinGeneration() > 0) {
    cluster_.find(node)->ended_session_of = rpc::to_string(context.getParams().getBrokenJobId());
    cluster_.find(node)->ended_generation = context.getParams().getMinGeneration() - 1;
  }
  // A minimum generation only means something for the job whose session broke.
  JobRunner* current = jobs_.job_of_worker(node);
  const bool same_job = current != nullptr && current->id() == rpc::to_string(context.getParams().getBrokenJobId());
  const uint64_t min_generation = same_job ? context.getParams().getMinGeneration() : 0;
  if (JobRunner* job = current; same_job && job->generation() < min_generation && job->state() == JobState::kRunning &&
                                 job->phase() != JobPhase::kTakingOver) {
    // The worker's session broke (a server vanished, a push failed) before we noticed: re-plan.
    job->faults().recover("worker node " + std::to_string(node.value()) + " lost its session");
  }
  return wait_for_assignment(context, node, min_generation, timer_.now() + wait_ms * kj::MILLISECONDS);
}

kj::Promise<void> CoordinatorService::wait_for_assignment(GetAssignmentContext context, NodeId node,
                                                          uint64_t min_generation, kj::TimePoint deadline) {
  if (JobRunner* job = jobs_.job_of_worker(node); job != nullptr && job->generation() >= min_generation) {
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
  return paf.promise.exclusiveJoin(timer_.atTime(deadline)).then([this, context, node, min_generation, deadline]() mutable {
    return wait_for_assignment(context, node, min_generation, deadline);
  });
}

kj::Promise<void> CoordinatorService::openShard(OpenShardContext context) {
  const auto params = context.getParams();
  JobRunner* job = jobs_.find(rpc::to_string(params.getJobId()));
  KJ_REQUIRE(job != nullptr, "unknown job", params.getJobId());
  context.getResults().setStream(
      job->open_shard(NodeId{params.getNodeId()}, params.getSplit(), params.getEpoch(), params.getFromStep(),
                      params.getSlice()));
  return kj::READY_NOW;
}

kj::Promise<void> CoordinatorService::served(ServedContext context) {
  const auto params = context.getParams();
  JobRunner* job = jobs_.find(rpc::to_string(params.getJobId()));
  KJ_REQUIRE(job != nullptr, "unknown job", params.getJobId());
  const auto counts = params.getCounts();
  const auto sums = params.getSums();
  KJ_REQUIRE(counts.size() == sums.size(), "as many counts as sums");
  std::vector<ExampleDigest> digests(counts.size());
  for (unsigned i = 0; i < counts.size(); ++i) digests[i] = {counts[i], sums[i]};
  job->on_served(NodeId{params.getNodeId()}, params.getGeneration(), params.getEpoch(), params.getSlice(),
                 params.getFromStep(), digests);
  return kj::READY_NOW;
}

kj::Promise<void> CoordinatorService::reportProgress(ReportProgressContext context) {
  const auto params = context.getParams();
  const auto report = params.getReport();
  JobRunner* job = jobs_.find(rpc::to_string(report.getJobId()));
  KJ_REQUIRE(job != nullptr, "unknown job", report.getJobId());
  context.getResults().setKeepGoing(job->on_progress(NodeId{params.getNodeId()}, report));
  return kj::READY_NOW;
}

}  // namespace pstrain

namespace pstrain {

kj::Promise<void> CoordinatorService::backupDone(BackupDoneContext context) {
  const auto params = context.getParams();
  JobRunner* job = jobs_.find(rpc::to_string(params.getJobId()));
  KJ_REQUIRE(job != nullptr, "unknown job", params.getJobId());
  if (const NodeInfo* info = cluster_.find(NodeId{params.getNodeId()})) check_caller(*info, params.getIncarnation());
  const std::vector<uint64_t> restorable = job->faults().on_backup_done(NodeId{params.getNodeId()}, params.getVersion());
  auto out = context.getResults().initRestorable(static_cast<unsigned>(restorable.size()));
  for (unsigned i = 0; i < restorable.size(); ++i) out.set(i, restorable[i]);
  return kj::READY_NOW;
}

kj::Promise<void> CoordinatorService::watch(WatchContext context) {
  const auto params = context.getParams();
  JobRunner* job = jobs_.find(rpc::to_string(params.getJobId()));
  KJ_REQUIRE(job != nullptr, "unknown job", params.getJobId());
  return job->watch(NodeId{params.getNodeId()}, params.getGeneration()).then([context](WorkerOrder order) mutable {
    if (order.pause_cut > 0) {
      context.getResults().setPauseCut(order.pause_cut);
      return;
    }
    auto out = context.getResults().initTakeover();
    out.setStep(order.step);
    out.setSlice(order.slice);
    out.setSliceCount(order.slice_count);
  });
}

kj::Promise<void> CoordinatorService::learningRateScale(LearningRateScaleContext context) {
  const auto params = context.getParams();
  JobRunner* job = jobs_.find(rpc::to_string(params.getJobId()));
  KJ_REQUIRE(job != nullptr, "unknown job", params.getJobId());
  return job->learning_rate_scale(params.getEpoch()).then([context](float scale) mutable {
    context.getResults().setScale(scale);
  });
}

kj::Promise<void> CoordinatorService::storeReplica(StoreReplicaContext context) {
  const auto params = context.getParams();
  JobRunner* job = jobs_.find(rpc::to_string(params.getJobId()));
  KJ_REQUIRE(job != nullptr, "unknown job", params.getJobId());
  std::vector<std::string> chunks;
  for (capnp::Data::Reader blob : params.getChunks()) chunks.emplace_back(reinterpret_cast<const char*>(blob.begin()), blob.size());
  return job->faults().on_replica(NodeId{params.getNodeId()}, params.getVersion(), params.getFirst(), params.getTotal(),
                         std::move(chunks));
}

kj::Promise<void> CoordinatorService::paused(PausedContext context) {
  const auto params = context.getParams();
  JobRunner* job = jobs_.find(rpc::to_string(params.getJobId()));
  KJ_REQUIRE(job != nullptr, "unknown job", params.getJobId());
  return job->paused(NodeId{params.getNodeId()}, params.getCut(), {params.getEpoch(), params.getStep(), params.getStepsDone()});
}

kj::Promise<void> CoordinatorService::preempted(PreemptedContext context) {
  const NodeId node{context.getParams().getNodeId()};
  PSLOG(kInfo) << "node " << node << " announced it is going away (SIGTERM)";
  kj::Vector<kj::Promise<void>> backups;
  for (JobRunner* job : jobs_.jobs_using(node)) {
    backups.add(job->faults().preempt(node).catch_([job](kj::Exception&& e) {
      PSLOG(kWarning) << "job " << job->id() << ": preemption backup failed: " << e.getDescription().cStr();
    }));
  }
  return kj::joinPromises(backups.releaseAsArray());
}

}  // namespace pstrain
