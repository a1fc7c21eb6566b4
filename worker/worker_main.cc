// pstrain-worker: registers with the coordinator, waits for an assignment, trains it, and waits
// for the next. Needs no inbound port and no shared filesystem: data comes from the coordinator.
#include <kj/async-io.h>
#include <kj/async-unix.h>
#include <unistd.h>

#include <iostream>

#include "common/compute_threads.h"
#include "common/error.h"
#include "common/flags.h"
#include "common/process_main.h"
#include "common/log.h"
#include "common/rpc/coordinator_link.h"
#include "common/rpc/rpc_util.h"
#include "worker/training_session.h"

namespace {

struct WorkerConfig {
  pstrain::rpc::HostPort coordinator;
  std::string name;
  int threads = 1;  // compute threads; 0: one per core
  pstrain::Exchange exchange = pstrain::Exchange::kForward;
};

pstrain::Exchange parse_exchange(const std::string& mode) {
  using pstrain::Exchange;
  if (mode == "forward") return Exchange::kForward;
  if (mode == "factored") return Exchange::kFactored;
  if (mode == "sparse") return Exchange::kSparse;
  if (mode == "dense") return Exchange::kDense;
  throw pstrain::Error("--exchange must be forward, factored, sparse or dense (got '" + mode + "')");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace pstrain;
  FlagSet flags("pstrain-worker",
                "A training worker: gets its assignment and data from the coordinator, pulls parameters\n"
                "from the parameter servers, computes gradients and pushes them back.");
  flags.add("coordinator", "PSTRAIN_COORDINATOR", "127.0.0.1:7000", "The coordinator's RPC address.");
  flags.add("threads", "PSTRAIN_THREADS", "1", "Compute threads (each takes a slice of the batch); 0: one per core.");
  flags.add("name", "PSTRAIN_NODE_NAME", "", "Name shown in the cluster view (default: host-pid).");
  flags.add("log-level", "PSTRAIN_LOG_LEVEL", "info", "debug, info, warning or error.");
  flags.add("exchange", "PSTRAIN_EXCHANGE", "forward",
            "How gradients and parameters travel: 'forward' (the servers compute the first layer's\n"
            "product for the next batch and reply with it instead of its values; and 'factored'\n"
            "besides), 'factored' (dense kernels pushed as factors where that is smaller, and 'sparse'\n"
            "besides), 'sparse' (only the first layer's rows the batch touches), or 'dense' (every\n"
            "chunk whole). The last three are for comparisons.");
  flags.add_switch("check-config", "", "Validate the configuration and exit.");
  if (const auto status = parse_flags(flags, argc, argv, "pstrain-worker")) return *status;
  WorkerConfig config;
  try {
    apply_log_level(flags);
    config.coordinator = rpc::parse_host_port(flags.get("coordinator"), 7000, "--coordinator");
    config.threads = static_cast<int>(flags.get_int("threads", 0, 256));
    config.exchange = parse_exchange(flags.get("exchange"));
    config.name = flags.get("name").empty() ? rpc::default_node_name() : flags.get("name");
  } catch (const std::exception& e) {
    std::cerr << "pstrain-worker: " << e.what() << "\n";
    return 2;
  }
  if (flags.get_switch("check-config")) {
    std::cout << "pstrain-worker: configuration ok\n";
    return 0;
  }

  const int threads = rpc::prepare_node_process(config.threads);
  auto io = kj::setupAsyncIo();
  auto& ws = io.waitScope;

  // Stopping: SIGINT stops at once. SIGTERM (preemption) first tells the coordinator, which has
  // the servers back up at the next step and hold there; the worker trains on until that backup
  // is complete, so the job loses no step, then stops.
  auto stop_paf = kj::newPromiseAndFulfiller<void>();
  auto stop = stop_paf.promise.fork();
  bool stopping = false;
  rpc::CoordinatorLink link(*io.provider, config.coordinator, proto::Role::WORKER, "", config.name);
  auto on_signal = rpc::shutdown_signal(io.unixEventPort)
                       .then([&](int s) -> kj::Promise<void> {
                         stopping = true;
                         if (s != SIGTERM || !link.connected()) {
                           PSLOG(kInfo) << "signal " << s << ": stopping";
                           return kj::READY_NOW;
                         }
                         PSLOG(kInfo) << "SIGTERM: handing back this worker's work, then stopping";
                         auto request = link.client().preemptedRequest();
                         request.setNodeId(link.node_id());
                         return io.provider->getTimer()
                             .timeoutAfter(30 * kj::SECONDS, request.send().ignoreResult())
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
    if (should_stop()) return 0;
    io.provider->getTimer().afterDelay(20 * kj::MILLISECONDS).wait(ws);
  }
  registered.wait(ws);
  rpc::print_ready("worker", 0);

  uint64_t min_generation = 0;  // after a broken session: wait for a newer plan of that job
  std::string broken_job;
  int transient_failures = 0;
  while (!should_stop()) {
    try {
      auto request = link.client().getAssignmentRequest();
      request.setNodeId(link.node_id());
      request.setWaitMs(1000);
      request.setMinGeneration(min_generation);
      request.setBrokenJobId(broken_job);
      auto response = request.send().wait(ws);
      if (!response.getHas()) continue;
      const uint32_t node_id = link.node_id();
      const auto assignment = response.getAssignment();
      const std::string job_id = rpc::to_string(assignment.getJobId());
      std::string fatal;
      try {
        TrainingSession session(*io.provider, link.client(), node_id, assignment,
                                SessionOptions{threads, config.exchange}, stop);
        session.run(ws, should_stop);
        min_generation = 0;
        transient_failures = 0;
      } catch (const kj::Exception& e) {
        // A server or the plan went away under us: not this job's fault. Ask for the next plan.
        if (should_stop()) break;
        PSLOG(kWarning) << "job " << job_id << ": session ended (" << e.getDescription().cStr()
                        << "); waiting for a new plan";
        min_generation = assignment.getGeneration() + 1;
        broken_job = job_id;
        if (++transient_failures >= 20) fatal = std::string("20 sessions in a row failed; last: ") + e.getDescription().cStr();
      } catch (const std::exception& e) {
        fatal = e.what();  // the job itself is broken (loss became NaN, bad spec)
      }
      if (!fatal.empty()) {
        PSLOG(kError) << "job " << job_id << ": " << fatal;
        auto report = link.client().reportProgressRequest();
        report.setNodeId(node_id);
        report.initReport().setJobId(job_id);
        report.getReport().setKind(proto::Progress::Kind::FAILED);
        report.getReport().setMessage(fatal);
        report.send().ignoreResult().catch_([](kj::Exception&&) {}).wait(ws);
        min_generation = 0;
        transient_failures = 0;
      }
    } catch (const kj::Exception& e) {
      if (should_stop()) break;
      PSLOG(kWarning) << "waiting for work: " << e.getDescription().cStr();
      io.provider->getTimer().afterDelay(500 * kj::MILLISECONDS).wait(ws);
    }
  }
  return 0;
}
