// pstrain-worker: registers with the coordinator, waits for an assignment, trains it, and waits
// for the next. Needs no inbound port and no shared filesystem: data comes from the coordinator.
#include <kj/async-io.h>
#include <kj/async-unix.h>
#include <unistd.h>

#include <iostream>

#include "common/compute_threads.h"
#include "common/error.h"
#include "common/flags.h"
#include "common/log.h"
#include "common/rpc/coordinator_link.h"
#include "common/rpc/rpc_util.h"
#include "worker/training_session.h"

int main(int argc, char** argv) {
  using namespace pstrain;
  FlagSet flags("pstrain-worker",
                "A training worker: gets its assignment and data from the coordinator, pulls parameters\n"
                "from the parameter servers, computes gradients and pushes them back.");
  flags.add("coordinator", "PSTRAIN_COORDINATOR", "127.0.0.1:7000", "The coordinator's RPC address.");
  flags.add("threads", "PSTRAIN_THREADS", "1", "Compute threads (each takes a slice of the batch); 0: one per core.");
  flags.add("name", "PSTRAIN_NODE_NAME", "", "Name shown in the cluster view (default: host-pid).");
  flags.add("log-level", "PSTRAIN_LOG_LEVEL", "info", "debug, info, warning or error.");
  flags.add_switch("check-config", "", "Validate the configuration and exit.");
  switch (flags.parse(argc, argv)) {
    case FlagSet::Outcome::kHelpShown:
      std::cout << flags.help();
      return 0;
    case FlagSet::Outcome::kError:
      std::cerr << "pstrain-worker: " << flags.error() << "\n";
      return 2;
    case FlagSet::Outcome::kRun:
      break;
  }
  rpc::HostPort coordinator;
  std::string name;
  int threads = 1;
  try {
    LogLevel level;
    if (!parse_log_level(flags.get("log-level"), &level)) throw Error("--log-level must be debug, info, warning or error");
    set_log_level(level);
    coordinator = rpc::parse_host_port(flags.get("coordinator"), 7000, "--coordinator");
    threads = static_cast<int>(flags.get_int("threads", 0, 256));
    name = flags.get("name");
    if (name.empty()) {
      char host[256] = {};
      gethostname(host, sizeof host - 1);
      name = std::string(host) + "-" + std::to_string(getpid());
    }
  } catch (const std::exception& e) {
    std::cerr << "pstrain-worker: " << e.what() << "\n";
    return 2;
  }
  if (flags.get_switch("check-config")) {
    std::cout << "pstrain-worker: configuration ok\n";
    return 0;
  }

  rpc::capture_shutdown_signals();
  threads = set_compute_threads(threads);
  keep_freed_memory();
  auto io = kj::setupAsyncIo();
  auto& ws = io.waitScope;
  bool stopping = false;
  auto signal = rpc::shutdown_signal(io.unixEventPort).then([&stopping](int s) {
    PSLOG(kInfo) << "signal " << s << ": stopping";
    stopping = true;
  }).eagerlyEvaluate(nullptr);
  auto should_stop = [&] {
    signal.poll(ws);
    return stopping;
  };

  rpc::CoordinatorLink link(*io.provider, coordinator, proto::Role::WORKER, "", name);
  auto registered = link.start();
  while (!registered.poll(ws)) {
    if (should_stop()) return 0;
    io.provider->getTimer().afterDelay(20 * kj::MILLISECONDS).wait(ws);
  }
  registered.wait(ws);
  rpc::print_ready("worker", 0);

  while (!should_stop()) {
    try {
      auto request = link.client().getAssignmentRequest();
      request.setNodeId(link.node_id());
      request.setWaitMs(1000);
      auto response = request.send().wait(ws);
      if (!response.getHas()) continue;
      const uint32_t node_id = link.node_id();
      const std::string job_id = rpc::to_string(response.getAssignment().getJobId());
      try {
        TrainingSession session(*io.provider, ws, link.client(), node_id, response.getAssignment(),
                                SessionOptions{threads});
        session.run(should_stop);
      } catch (const std::exception& e) {
        PSLOG(kError) << "job " << job_id << ": " << e.what();
        auto report = link.client().reportProgressRequest();
        report.setNodeId(node_id);
        report.initReport().setJobId(job_id);
        report.getReport().setKind(proto::Progress::Kind::FAILED);
        report.getReport().setMessage(e.what());
        report.send().ignoreResult().catch_([](kj::Exception&&) {}).wait(ws);
      } catch (const kj::Exception& e) {
        PSLOG(kError) << "job " << job_id << ": " << e.getDescription().cStr();
        auto report = link.client().reportProgressRequest();
        report.setNodeId(node_id);
        report.initReport().setJobId(job_id);
        report.getReport().setKind(proto::Progress::Kind::FAILED);
        report.getReport().setMessage(e.getDescription().cStr());
        report.send().ignoreResult().catch_([](kj::Exception&&) {}).wait(ws);
      }
    } catch (const kj::Exception& e) {
      PSLOG(kWarning) << "waiting for work: " << e.getDescription().cStr();
      io.provider->getTimer().afterDelay(500 * kj::MILLISECONDS).wait(ws);
    }
  }
  return 0;
}
