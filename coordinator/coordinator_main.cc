// pstrain-coordinator: cluster membership, job scheduling and recovery, parameter placement, the
// data service (Cap'n Proto RPC on the event-loop thread) and the REST API (Beast, on its own
// thread). main() wires them: the only cross-thread path is KjJobCommands.
#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>
#include <kj/async-unix.h>

#include <atomic>
#include <fstream>
#include <thread>
#include <iostream>
#include <sstream>

#include "common/compute_threads.h"
#include "common/error.h"
#include "common/flags.h"
#include "common/process_main.h"
#include "common/kv_store.h"
#include "common/log.h"
#include "common/rpc/rpc_util.h"
#include "coordinator/coordinator_service.h"
#include "coordinator/http/http_server.h"
#include "coordinator/job/job_options.h"
#include "coordinator/job_store.h"
#include "coordinator/kj_commands.h"
#include "coordinator/openapi_document.h"

namespace {

struct CoordinatorConfig {
  pstrain::rpc::HostPort listen, http;
  std::string data_dir, state_dir, job_file, save_params;
  bool exit_when_done = false;
  uint32_t heartbeat_ms = 1000, dead_after_ms = 5000;
  pstrain::JobOptions job;
  int64_t http_read_timeout_s = 10, http_max_connections = 512;
};

std::vector<pstrain::NodeView> node_views(const pstrain::Cluster& cluster) {
  using namespace std::chrono;
  const auto steady_now = steady_clock::now();
  const int64_t wall_now = pstrain::now_ms();
  auto wall = [&](steady_clock::time_point t) {
    return wall_now - duration_cast<milliseconds>(steady_now - t).count();
  };
  std::vector<pstrain::NodeView> views;
  for (const auto& [id, node] : cluster.nodes()) {
    views.push_back({id.value(), node.role == pstrain::proto::Role::SERVER ? "server" : "worker", node.name, node.address,
                     node.job, wall(node.registered_at), wall(node.last_heartbeat), node.alive});
  }
  return views;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace pstrain;
  FlagSet flags("pstrain-coordinator",
                "The coordinator of a pstrain cluster: nodes register with it; it places parameters on\n"
                "servers, assigns data shards to workers, streams the data, tracks progress, recovers jobs\n"
                "from lost nodes, and serves the REST API (submit, status, cancel, model download).");
  flags.add("listen", "PSTRAIN_COORDINATOR_LISTEN", "0.0.0.0:7000", "Address to serve RPC on (port 0: any free port).");
  flags.add("http", "PSTRAIN_HTTP_LISTEN", "0.0.0.0:8080", "Address of the REST API (port 0: any free port).");
  flags.add("http-read-timeout-s", "PSTRAIN_HTTP_READ_TIMEOUT_S", "10",
            "Seconds a client has to send a complete request before it gets 408.");
  flags.add("http-max-connections", "PSTRAIN_HTTP_MAX_CONNECTIONS", "512", "Open HTTP connections beyond this get 503.");
  flags.add("data-dir", "PSTRAIN_DATA_DIR", "data", "Directory holding the datasets' IDX files.");
  flags.add("state-dir", "PSTRAIN_STATE_DIR", "coordinator-state",
            "RocksDB directory for the coordinator's jobs, metrics and models (created if missing).");
  flags.add("job", "PSTRAIN_JOB", "",
            "A job spec file to run at start-up, as job 'cli-job' (taken up again after a restart).");
  flags.add("save-params", "", "", "Write the trained parameters of --job here (raw little-endian float32).");
  flags.add_switch("exit-when-done", "PSTRAIN_EXIT_WHEN_DONE", "Exit once the --job job has ended (status 0 if it succeeded).");
  flags.add("heartbeat-ms", "PSTRAIN_HEARTBEAT_MS", "1000", "How often nodes heartbeat.");
  flags.add("dead-after-ms", "PSTRAIN_DEAD_AFTER_MS", "5000", "A node silent this long is declared dead.");
  for (const JobOptionFlag& option : kJobOptionFlags) {
    flags.add(option.name, option.env, std::to_string((JobOptions{}.*option.member) / kj::MILLISECONDS), option.help);
  }
  flags.add("log-level", "PSTRAIN_LOG_LEVEL", "info", "debug, info, warning or error.");
  flags.add_switch("check-config", "", "Validate the configuration (and the --job spec) and exit.");
  if (const auto status = parse_flags(flags, argc, argv, "pstrain-coordinator")) return *status;
  CoordinatorConfig config;
  std::optional<JobSpec> job_spec;
  try {
    apply_log_level(flags);
    config.listen = rpc::parse_host_port(flags.get("listen"), 7000, "--listen");
    config.http = rpc::parse_host_port(flags.get("http"), 8080, "--http");
    config.http_read_timeout_s = flags.get_int("http-read-timeout-s", 1, 3600);
    config.http_max_connections = flags.get_int("http-max-connections", 1, 100000);
    config.data_dir = flags.get("data-dir");
    config.state_dir = flags.get("state-dir");
    config.job_file = flags.get("job");
    config.save_params = flags.get("save-params");
    config.exit_when_done = flags.get_switch("exit-when-done");
    config.heartbeat_ms = static_cast<uint32_t>(flags.get_int("heartbeat-ms", 50, 60000));
    config.dead_after_ms = static_cast<uint32_t>(flags.get_int("dead-after-ms", 100, 600000));
    for (const JobOptionFlag& option : kJobOptionFlags) {
      config.job.*option.member = flags.get_int(option.name, option.min_ms, 86400000) * kj::MILLISECONDS;
    }
    if (!config.job_file.empty()) job_spec = parse_job_spec(read_text_file(config.job_file, "the job spec"));
  } catch (const std::exception& e) {
    std::cerr << "pstrain-coordinator: " << e.what() << "\n";
    return 2;
  }
  if (flags.get_switch("check-config")) {
    std::cout << "pstrain-coordinator: configuration ok\n";
    return 0;
  }

  rpc::prepare_node_process(1);  // update math runs on the event-loop thread
  auto io = kj::setupAsyncIo();
  std::string error;
  std::unique_ptr<KvStore> kv = KvStore::open(config.state_dir, &error);
  if (!kv) {
    std::cerr << "pstrain-coordinator: " << error << "\n";
    return 1;
  }
  JobStore store(kv.get());
  Cluster cluster(std::chrono::milliseconds(config.dead_after_ms));
  DataService data(config.data_dir);
  JobManager jobs(cluster, data, store, *io.provider, config.job);
  // Jobs from before a restart: finished ones stay listed; unfinished ones run again.
  for (const JobRecord& record : store.load()) {
    if (record.finished()) continue;
    try {
      jobs.submit(parse_job_spec(record.spec_json), record.id);
      PSLOG(kInfo) << "job " << record.id << " re-queued after a restart";
    } catch (const SpecError& e) {
      store.update(record.id, [&](JobRecord& r) {
        r.state = JobState::kFailed;
        r.reason = std::string("stored spec no longer valid: ") + e.what();
      });
    }
  }
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
        write_floats(config.save_params, job.final_params());
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
    // The --job job has a fixed id, so a restarted coordinator (same flags, same state) takes
    // up the job it had instead of starting a second one.
    cli_job = "cli-job";
    const auto existing = store.get(cli_job);
    if (!existing) {
      jobs.submit(*job_spec, cli_job);
      PSLOG(kInfo) << "job " << cli_job << " ('" << job_spec->name << "') queued from " << config.job_file;
    } else if (existing->finished()) {
      PSLOG(kInfo) << "job " << cli_job << " already " << job_state_name(existing->state) << " (from " << config.state_dir << ")";
      if (config.exit_when_done) return existing->state == JobState::kSucceeded ? 0 : 1;
    }
  }

  // Housekeeping: declare silent nodes dead and start queued jobs.
  kj::Function<kj::Promise<void>()> tick = [&]() -> kj::Promise<void> {
    return io.provider->getTimer().afterDelay(200 * kj::MILLISECONDS).then([&]() {
      jobs.on_nodes_lost(cluster.expire(), "missed its heartbeats");
      store.set_nodes(node_views(cluster));
      if (jobs.schedule()) service.wake_waiting_workers();
      // Queued jobs first; then running jobs short of workers take the free ones.
      for (const auto& job : jobs.jobs()) job->grow();
      for (const auto& job : jobs.jobs()) {
        if (job->ready_for_workers()) service.wake_waiting_workers();
      }
      return tick();
    });
  };
  auto housekeeping = tick().eagerlyEvaluate([](kj::Exception&& e) { PSLOG(kError) << e.getDescription().cStr(); });
  KjJobCommands commands(kj::getCurrentThreadExecutor(), jobs, store, [&] {
    if (jobs.schedule()) service.wake_waiting_workers();
  });
  RestApi api(store, commands, openapi_document());
  HttpServerOptions http_options;
  http_options.host = config.http.host;
  http_options.port = static_cast<uint16_t>(config.http.port);
  http_options.read_timeout = std::chrono::seconds(config.http_read_timeout_s);
  http_options.max_connections = static_cast<size_t>(config.http_max_connections);
  HttpServer http(api, http_options);
  uint16_t http_port = 0;
  try {
    http_port = http.start();
  } catch (const Error& e) {
    std::cerr << "pstrain-coordinator: " << e.what() << "\n";
    return 1;
  }
  std::printf("PSTRAIN_READY role=coordinator port=%u http_port=%u\n", port, http_port);
  std::fflush(stdout);

  const int status = done.promise
                         .exclusiveJoin(rpc::shutdown_signal(io.unixEventPort).then([](int signal) {
                           PSLOG(kInfo) << "signal " << signal << ": shutting down";
                           return 0;
                         }))
                         .wait(io.waitScope);
  // Stop the HTTP thread while this loop keeps turning: a request in the middle of a command is
  // waiting for this loop to run it.
  std::atomic<bool> http_stopped{false};
  std::thread stopper([&] {
    http.stop();
    http_stopped = true;
  });
  while (!http_stopped) io.provider->getTimer().afterDelay(10 * kj::MILLISECONDS).wait(io.waitScope);
  stopper.join();
  return status;
}
