#include "worker/worker_node.h"

#include "common/base/error.h"
#include "common/base/log.h"
#include "common/rpc/coordinator_link.h"

namespace pstrain {

void run_worker_node(kj::AsyncIoContext& io, const WorkerNodeConfig& config, kj::Promise<rpc::NodeStop> stop_request,
                     const std::function<void(uint32_t port)>& ready) {
  auto& ws = io.waitScope;

  // Stopping: kNow stops at once. kPreempted first tells the coordinator, which has the servers
  // back up at the next step and hold there; the worker trains on until that backup is
  // complete, so the job loses no step, then stops.
  auto stop_paf = kj::newPromiseAndFulfiller<void>();
  auto stop = stop_paf.promise.fork();
  rpc::warn_if_open(config.session.cluster, "worker");
  // Steps and evaluation batches done, in every session: what this node's heartbeats carry.
  std::atomic<uint64_t> progress{0};
  SessionOptions session_options = config.session;
  session_options.progress = &progress;
  rpc::CoordinatorLink link(*io.provider, config.coordinator, proto::Role::WORKER, "", config.name,
                            config.session.cluster, &progress);
  auto on_stop = stop_request
                     .then([&](rpc::NodeStop how) -> kj::Promise<void> {
                       if (how != rpc::NodeStop::kPreempted || !link.connected()) return kj::READY_NOW;
                       PSLOG(kInfo) << "preempted: handing back this worker's work, then stopping";
                       auto request = link.client().preemptedRequest();
                       request.setNodeId(link.node_id());
                       return io.provider->getTimer()
                           .timeoutAfter(config.preemption_timeout, request.send().ignoreResult())
                           .catch_([](kj::Exception&& e) {
                             PSLOG(kWarning) << "preemption notice: " << e.getDescription().cStr();
                           });
                     })
                     .then([&] { stop_paf.fulfiller->fulfill(); })
                     .eagerlyEvaluate(nullptr);
  auto stopped = stop.addBranch();
  auto should_stop = [&] { return stopped.poll(ws); };

  auto registered = link.start();
  while (!registered.poll(ws)) {
    if (should_stop()) return;
    io.provider->getTimer().afterDelay(20 * kj::MILLISECONDS).wait(ws);
  }
  registered.wait(ws);
  ready(0);

  uint64_t min_generation = 0;  // after a broken session: wait for a newer plan of that job
  std::string broken_job;
  int transient_failures = 0;
  while (!should_stop()) {
    try {
      auto request = link.client().getAssignmentRequest();
      request.setNodeId(link.node_id());
      request.setIncarnation(link.incarnation());
      request.setWaitMs(1000);
      request.setMinGeneration(min_generation);
      request.setBrokenJobId(broken_job);
      auto response = request.send().wait(ws);
      if (!response.getHas()) continue;
      const uint32_t node_id = link.node_id();
      const auto assignment = response.getAssignment();
      const std::string job_id = rpc::to_string(assignment.getJobId());
      std::string fatal;
      bool diverged = false;
      try {
        TrainingSession session(*io.provider, link.client(), node_id, assignment, session_options, stop);
        session.run(ws, should_stop);
        min_generation = 0;
        broken_job.clear();
        transient_failures = 0;
      } catch (const kj::Exception& e) {
        // A server or the plan went away under us: not this job's fault. Ask for the next plan.
        if (should_stop()) break;
        PSLOG(kWarning) << "job " << job_id << ": session ended (" << e.getDescription().cStr()
                        << "); waiting for a new plan";
        min_generation = assignment.getGeneration() + 1;
        broken_job = job_id;
        if (++transient_failures >= 20) fatal = std::string("20 sessions in a row failed; last: ") + e.getDescription().cStr();
      } catch (const LossNotFinite& e) {
        fatal = e.what();  // the job diverged
        diverged = true;
      } catch (const std::exception& e) {
        fatal = e.what();  // the job itself is broken (bad spec, data)
      }
      if (!fatal.empty()) {
        PSLOG(kError) << "job " << job_id << ": " << fatal;
        auto report = link.client().reportProgressRequest();
        report.setNodeId(node_id);
        report.initReport().setJobId(job_id);
        report.getReport().setKind(proto::Progress::Kind::FAILED);
        report.getReport().setMessage(fatal);
        report.getReport().setDiverged(diverged);
        report.send().ignoreResult().catch_([](kj::Exception&&) {}).wait(ws);
        min_generation = 0;
        broken_job.clear();
        transient_failures = 0;
      }
    } catch (const kj::Exception& e) {
      if (should_stop()) break;
      PSLOG(kWarning) << "waiting for work: " << e.getDescription().cStr();
      io.provider->getTimer().afterDelay(500 * kj::MILLISECONDS).wait(ws);
    }
  }
}

}  // namespace pstrain
