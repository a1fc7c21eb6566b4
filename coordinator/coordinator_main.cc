// pstrain-coordinator: cluster membership, job scheduling and recovery, parameter placement, the
// data service (Cap'n Proto RPC on the event-loop thread) and the REST API (Beast, on its own
// thread). main() wires the CoordinatorNode (coordinator_node.h: everything but the REST API and
// the --job job) to the HTTP server: the only cross-thread path is KjJobCommands.
#include <kj/async-io.h>
#include <kj/async-unix.h>

#include <atomic>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <thread>

#include "common/base/error.h"
#include "common/base/flags.h"
#include "common/base/log.h"
#include "common/base/process_main.h"
#include "common/rpc/rpc_util.h"
#include "coordinator/coordinator_node.h"
#include "coordinator/http/http_server.h"
#include "coordinator/http/tls_context.h"
#include "coordinator/http/web_ui.h"
#include "coordinator/job/job_options.h"
#include "coordinator/kj_commands.h"
#include "coordinator/models/model_service.h"
#include "coordinator/openapi_document.h"

namespace {

struct CoordinatorConfig {
  pstrain::CoordinatorNodeConfig node;
  pstrain::rpc::HostPort http;
  std::string job_file, save_params;
  std::shared_ptr<boost::asio::ssl::context> tls;  // --tls-cert/--tls-key: HTTPS
  bool exit_when_done = false;
  int64_t http_read_timeout_s = 10, http_max_connections = 512;
  std::shared_ptr<const pstrain::AccessTokens> tokens;
  int64_t events_heartbeat_ms = 15000, events_queue = 1024, events_queue_bytes = int64_t{4} << 20, events_send_buffer = 0;
};

}  // namespace

int main(int argc, char** argv) {
  using namespace pstrain;
  FlagSet flags("pstrain-coordinator",
                "The coordinator of a pstrain cluster: nodes register with it; it places parameters on\n"
                "servers, assigns data shards to workers, streams the data, tracks progress, recovers jobs\n"
                "from lost nodes, and serves the REST API (submit, status, cancel, model download).");
  flags.add("listen", "PSTRAIN_COORDINATOR_LISTEN", "0.0.0.0:7000", "Address to serve RPC on (port 0: any free port).");
  flags.add("http", "PSTRAIN_HTTP_LISTEN", "0.0.0.0:8080", "Address of the REST API (port 0: any free port).");
  flags.add("tls-cert", "PSTRAIN_TLS_CERT", "",
            "PEM certificate (chain) of the REST API: with --tls-key it serves HTTPS only (TLS 1.2+,\n"
            "HTTP/1.1). Empty: plain HTTP.");
  flags.add("tls-key", "PSTRAIN_TLS_KEY", "", "PEM private key of --tls-cert.");
  flags.add("http-read-timeout-s", "PSTRAIN_HTTP_READ_TIMEOUT_S", "10",
            "Seconds a client has to send a complete request before it gets 408.");
  flags.add("http-max-connections", "PSTRAIN_HTTP_MAX_CONNECTIONS", "512", "Open HTTP connections beyond this get 503.");
  flags.add("auth-tokens-file", "PSTRAIN_AUTH_TOKENS_FILE", "",
            "Bearer tokens of the REST API, one 'TOKEN,ROLE[,NAME]' per line (roles: admin, operator,\n"
            "viewer). Empty: the API is open to anyone who can reach it (a warning says so).");
  flags.add("events-heartbeat-ms", "PSTRAIN_EVENTS_HEARTBEAT_MS", "15000",
            "How often an idle event stream (GET .../events) gets a ': keep-alive' comment line.");
  flags.add("events-queue", "PSTRAIN_EVENTS_QUEUE", "1024",
            "Events an event stream's client may fall behind by before it is dropped (disconnected).");
  flags.add("events-queue-bytes", "PSTRAIN_EVENTS_QUEUE_BYTES", std::to_string(4 << 20),
            "Bytes of events an event stream's client may fall behind by before it is dropped.");
  flags.add("events-send-buffer", "PSTRAIN_EVENTS_SEND_BUFFER", "0",
            "Socket send buffer of an event stream in bytes (0: the kernel's default, which grows).");
  flags.add("data-dir", "PSTRAIN_DATA_DIR", "data",
            "Directory of the datasets: the built-in ones' IDX files, and a directory per dropped-in\n"
            "dataset (<name>/dataset.json). May be read-only (uploads go to --datasets-dir).");
  flags.add("datasets-dir", "PSTRAIN_DATASETS_DIR", "",
            "Where uploaded datasets are stored, one directory each (dropped-in ones are read here\n"
            "too); empty: the data directory. Give a writable one when the data directory is read-only.");
  flags.add("max-upload-bytes", "PSTRAIN_MAX_UPLOAD_BYTES", std::to_string(uint64_t{4} << 30),
            "Largest dataset file accepted by PUT /v1/datasets/... (413 beyond).");
  flags.add("shard-max-examples", "PSTRAIN_SHARD_MAX_EXAMPLES", std::to_string(uint64_t{1} << 20),
            "Most examples in one shard file of a stored split (also at most 64 MiB each).");
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
  flags.add(rpc::kSecretFlag, rpc::kSecretEnv, "", rpc::kSecretHelp);
  flags.add("log-level", "PSTRAIN_LOG_LEVEL", "info", "debug, info, warning or error.");
  flags.add_switch("check-config", "", "Validate the configuration (and the --job spec) and exit.");
  if (const auto status = parse_flags(flags, argc, argv, "pstrain-coordinator")) return *status;
  CoordinatorConfig config;
  std::optional<JobSpec> job_spec;
  try {
    apply_log_level(flags);
    config.node.listen = rpc::parse_host_port(flags.get("listen"), 7000, "--listen");
    config.http = rpc::parse_host_port(flags.get("http"), 8080, "--http");
    const std::string tls_cert = flags.get("tls-cert"), tls_key = flags.get("tls-key");
    if (tls_cert.empty() != tls_key.empty()) {
      throw Error(tls_cert.empty() ? "--tls-key is given without --tls-cert" : "--tls-cert is given without --tls-key");
    }
    if (!tls_cert.empty()) config.tls = make_server_tls_context(tls_cert, tls_key);
    config.http_read_timeout_s = flags.get_int("http-read-timeout-s", 1, 3600);
    config.http_max_connections = flags.get_int("http-max-connections", 1, 100000);
    if (const std::string file = flags.get("auth-tokens-file"); !file.empty()) {
      config.tokens = std::make_shared<const AccessTokens>(AccessTokens::load(file));
    }
    config.events_heartbeat_ms = flags.get_int("events-heartbeat-ms", 10, 3600000);
    config.events_queue = flags.get_int("events-queue", 1, 1 << 20);
    config.events_queue_bytes = flags.get_int("events-queue-bytes", 1024, int64_t{1} << 32);
    config.events_send_buffer = flags.get_int("events-send-buffer", 0, 1 << 30);
    config.node.data_dir = flags.get("data-dir");
    config.node.datasets_dir = flags.get("datasets-dir");
    config.node.max_upload_bytes = static_cast<uint64_t>(flags.get_int("max-upload-bytes", 1, int64_t{1} << 50));
    config.node.shard_max_examples = static_cast<uint64_t>(flags.get_int("shard-max-examples", 1, int64_t{1} << 20));
    config.node.state_dir = flags.get("state-dir");
    config.node.cluster = rpc::ClusterCredential::from_flag(flags.get(rpc::kSecretFlag));
    config.job_file = flags.get("job");
    config.save_params = flags.get("save-params");
    config.exit_when_done = flags.get_switch("exit-when-done");
    config.node.heartbeat_ms = static_cast<uint32_t>(flags.get_int("heartbeat-ms", 50, 60000));
    config.node.dead_after_ms = static_cast<uint32_t>(flags.get_int("dead-after-ms", 100, 600000));
    for (const JobOptionFlag& option : kJobOptionFlags) {
      config.node.job.*option.member = flags.get_int(option.name, option.min_ms, 86400000) * kj::MILLISECONDS;
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
  std::unique_ptr<CoordinatorNode> node;
  try {
    node = std::make_unique<CoordinatorNode>(io, config.node);
  } catch (const Error& e) {
    std::cerr << "pstrain-coordinator: " << e.what() << "\n";
    return 1;
  }
  JobManager& jobs = node->jobs();
  JobStore& store = node->store();

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

  if (job_spec) {
    // The --job job has a fixed id, so a restarted coordinator (same flags, same state) takes
    // up the job it had instead of starting a second one.
    cli_job = "cli-job";
    const auto existing = store.get(cli_job);
    if (!existing) {
      jobs.submit(*job_spec, cli_job);
      PSLOG(kInfo) << "job " << cli_job << " ('" << job_spec->name << "') queued from " << config.job_file;
    } else if (existing->finished()) {
      PSLOG(kInfo) << "job " << cli_job << " already " << job_state_name(existing->state) << " (from " << config.node.state_dir << ")";
      if (config.exit_when_done) return existing->state == JobState::kSucceeded ? 0 : 1;
    }
  }

  KjJobCommands commands(kj::getCurrentThreadExecutor(), jobs, store, [&] { node->schedule(); });
  ModelService models(store, node->catalog());
  const WebUi web = WebUi::embedded();  // the dashboard at `/`
  RestApi api(store, commands, openapi_document(), &node->catalog(), &models, &web);
  KjStudyCommands study_commands(kj::getCurrentThreadExecutor(), node->studies(), node->study_store(), store, [&] {
    node->studies().tick();
    node->schedule();
  });
  api.set_studies(&node->study_store(), &study_commands);
  if (config.tokens) {
    PSLOG(kInfo) << "REST API: bearer tokens required (" << config.tokens->size() << " tokens)";
    api.set_access_tokens(config.tokens);
  } else {
    PSLOG(kWarning) << "REST API is OPEN: anyone who can reach " << flags.get("http")
                    << " can submit, cancel, upload and delete; give --auth-tokens-file to require tokens";
  }
  api.set_cluster_auth_refusals(&node->auth_refusals());
  api.set_event_limits({static_cast<size_t>(config.events_queue), static_cast<size_t>(config.events_queue_bytes)});
  HttpServerOptions http_options;
  http_options.host = config.http.host;
  http_options.port = static_cast<uint16_t>(config.http.port);
  http_options.read_timeout = std::chrono::seconds(config.http_read_timeout_s);
  http_options.max_connections = static_cast<size_t>(config.http_max_connections);
  http_options.event_heartbeat = std::chrono::milliseconds(config.events_heartbeat_ms);
  http_options.event_send_buffer = static_cast<int>(config.events_send_buffer);
  http_options.tls = config.tls;
  HttpServer http(api, http_options);
  uint16_t http_port = 0;
  try {
    http_port = http.start();
  } catch (const Error& e) {
    std::cerr << "pstrain-coordinator: " << e.what() << "\n";
    return 1;
  }
  std::printf("PSTRAIN_READY role=coordinator port=%u http_port=%u\n", node->port(), http_port);
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
