// pstrain-coordinator: cluster membership, job scheduling, parameter placement and the data
// service. Takes a job from a spec file (--job) until the REST API takes submissions.
#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>
#include <kj/async-unix.h>

#include <fstream>
#include <iostream>
#include <sstream>

#include "common/compute_threads.h"
#include "common/error.h"
#include "common/flags.h"
#include "common/log.h"
#include "common/rpc/rpc_util.h"
#include "coordinator/coordinator_service.h"

namespace {

struct CoordinatorConfig {
  pstrain::rpc::HostPort listen;
  std::string data_dir, job_file, save_params;
  bool exit_when_done = false;
  uint32_t heartbeat_ms = 1000, dead_after_ms = 5000;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw pstrain::Error(path + ": cannot open the job spec");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_params(const std::string& path, const std::vector<float>& params) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(params.data()), static_cast<std::streamsize>(params.size() * sizeof(float)));
  if (!out) throw pstrain::Error(path + ": cannot write the parameters");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace pstrain;
  FlagSet flags("pstrain-coordinator",
                "The coordinator of a pstrain cluster: nodes register with it; it places parameters on\n"
                "servers, assigns data shards to workers, streams the data, and tracks progress.");
  flags.add("listen", "PSTRAIN_COORDINATOR_LISTEN", "0.0.0.0:7000", "Address to serve RPC on (port 0: any free port).");
  flags.add("data-dir", "PSTRAIN_DATA_DIR", "data", "Directory holding the datasets' IDX files.");
  flags.add("job", "PSTRAIN_JOB", "", "A job spec file to run at start-up.");
  flags.add("save-params", "", "", "Write the trained parameters of --job here (raw little-endian float32).");
  flags.add_switch("exit-when-done", "PSTRAIN_EXIT_WHEN_DONE", "Exit once the --job job has ended (status 0 if it succeeded).");
  flags.add("heartbeat-ms", "PSTRAIN_HEARTBEAT_MS", "1000", "How often nodes heartbeat.");
  flags.add("dead-after-ms", "PSTRAIN_DEAD_AFTER_MS", "5000", "A node silent this long is declared dead.");
  flags.add("log-level", "PSTRAIN_LOG_LEVEL", "info", "debug, info, warning or error.");
  flags.add_switch("check-config", "", "Validate the configuration (and the --job spec) and exit.");
  switch (flags.parse(argc, argv)) {
    case FlagSet::Outcome::kHelpShown:
      std::cout << flags.help();
      return 0;
    case FlagSet::Outcome::kError:
      std::cerr << "pstrain-coordinator: " << flags.error() << "\n";
      return 2;
    case FlagSet::Outcome::kRun:
      break;
  }
  CoordinatorConfig config;
  std::optional<JobSpec> job_spec;
  try {
    LogLevel level;
    if (!parse_log_level(flags.get("log-level"), &level)) throw Error("--log-level must be debug, info, warning or error");
    set_log_level(level);
    config.listen = rpc::parse_host_port(flags.get("listen"), 7000, "--listen");
    config.data_dir = flags.get("data-dir");
    config.job_file = flags.get("job");
    config.save_params = flags.get("save-params");
    config.exit_when_done = flags.get_switch("exit-when-done");
    config.heartbeat_ms = static_cast<uint32_t>(flags.get_int("heartbeat-ms", 50, 60000));
    config.dead_after_ms = static_cast<uint32_t>(flags.get_int("dead-after-ms", 100, 600000));
    if (!config.job_file.empty()) job_spec = parse_job_spec(read_file(config.job_file));
  } catch (const std::exception& e) {
    std::cerr << "pstrain-coordinator: " << e.what() << "\n";
    return 2;
  }
  if (flags.get_switch("check-config")) {
    std::cout << "pstrain-coordinator: configuration ok\n";
    return 0;
  }

  rpc::capture_shutdown_signals();
  // Update math runs on the event-loop thread; idle OpenMP threads would spin on cores the
  // workers need (measured: 4x slower steps with 5 processes on 2 cores).
  set_compute_threads(1);
  keep_freed_memory();
  auto io = kj::setupAsyncIo();
  Cluster cluster(std::chrono::milliseconds(config.dead_after_ms));
  DataService data(config.data_dir);
  JobManager jobs(cluster, data, *io.provider);
  auto service_owner = kj::heap<CoordinatorService>(cluster, jobs, io.provider->getTimer(), config.heartbeat_ms);
  CoordinatorService& service = *service_owner;
  capnp::TwoPartyServer rpc_server(kj::mv(service_owner));

  auto done = kj::newPromiseAndFulfiller<int>();
  std::string cli_job;
  jobs.on_job_finished([&](JobRunner& job) {
    if (job.id() != cli_job) return;
    int status = job.state() == JobState::kSucceeded ? 0 : 1;
    if (job.state() == JobState::kSucceeded && !config.save_params.empty()) {
      try {
        write_params(config.save_params, job.final_params());
      } catch (const Error& e) {
        PSLOG(kError) << e.what();
        status = 1;
      }
    }
    if (job.state() != JobState::kSucceeded) std::printf("job %s %s: %s\n", job.id().c_str(), job_state_name(job.state()), job.failure().c_str());
    if (config.exit_when_done && done.fulfiller->isWaiting()) done.fulfiller->fulfill(kj::cp(status));
  });

  auto address = io.provider->getNetwork().parseAddress(config.listen.host, config.listen.port).wait(io.waitScope);
  auto listener = address->listen();
  const uint32_t port = listener->getPort();
  auto serving = rpc::serve(rpc_server, *listener).eagerlyEvaluate(
      [](kj::Exception&& e) { PSLOG(kError) << "listener failed: " << e.getDescription().cStr(); });
  PSLOG(kInfo) << "serving coordinator RPC on " << config.listen.host << ":" << port << ", datasets from " << config.data_dir;

  if (job_spec) {
    cli_job = jobs.submit(*job_spec);
    PSLOG(kInfo) << "job " << cli_job << " ('" << job_spec->name << "') queued from " << config.job_file;
  }

  // Housekeeping: declare silent nodes dead and start queued jobs.
  kj::Function<kj::Promise<void>()> tick = [&]() -> kj::Promise<void> {
    return io.provider->getTimer().afterDelay(200 * kj::MILLISECONDS).then([&]() {
      cluster.expire();
      if (jobs.schedule()) service.wake_waiting_workers();
      for (const auto& job : jobs.jobs()) {
        if (job->ready_for_workers()) service.wake_waiting_workers();
      }
      return tick();
    });
  };
  auto housekeeping = tick().eagerlyEvaluate([](kj::Exception&& e) { PSLOG(kError) << e.getDescription().cStr(); });
  rpc::print_ready("coordinator", port);

  const int status = done.promise
                         .exclusiveJoin(rpc::shutdown_signal(io.unixEventPort).then([](int signal) {
                           PSLOG(kInfo) << "signal " << signal << ": shutting down";
                           return 0;
                         }))
                         .wait(io.waitScope);
  return status;
}
