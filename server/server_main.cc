// pstrain-server: a parameter server. Listens for Cap'n Proto RPC, registers with the
// coordinator and holds the parameter shards the coordinator places on it.
#include <capnp/rpc-twoparty.h>
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
#include "common/kv_store.h"
#include "server/backup_report.h"
#include "server/backup_store.h"
#include "server/parameter_server.h"
#include "server/store_thread.h"

namespace {

struct ServerConfig {
  pstrain::rpc::HostPort listen;
  std::string advertise_host;
  pstrain::rpc::HostPort coordinator;
  std::string name, data_dir;
};

}  // namespace

int main(int argc, char** argv) {
  using namespace pstrain;
  FlagSet flags("pstrain-server",
                "A parameter server: holds parameter shards of training jobs, applies the optimizer,\n"
                "and enforces the sync/async update rules. Registers with the coordinator.");
  flags.add("listen", "PSTRAIN_SERVER_LISTEN", "0.0.0.0:7100", "Address to serve RPC on (port 0: any free port).");
  flags.add("advertise-host", "PSTRAIN_ADVERTISE_HOST", "127.0.0.1",
            "Host name workers use to reach this server (the port is the listening one).");
  flags.add("coordinator", "PSTRAIN_COORDINATOR", "127.0.0.1:7000", "The coordinator's RPC address.");
  flags.add("name", "PSTRAIN_NODE_NAME", "",
            "Name shown in the cluster view (default: host-pid). A restarted server keeps its name: that\n"
            "      is how the coordinator knows it is the same server with the same backups.");
  flags.add("data-dir", "PSTRAIN_SERVER_DATA_DIR", "server-data",
            "RocksDB directory for backups of this server's shards (created if missing).");
  flags.add("log-level", "PSTRAIN_LOG_LEVEL", "info", "debug, info, warning or error.");
  flags.add_switch("check-config", "", "Validate the configuration and exit.");
  if (const auto status = parse_flags(flags, argc, argv, "pstrain-server")) return *status;
  ServerConfig config;
  try {
    apply_log_level(flags);
    config.listen = rpc::parse_host_port(flags.get("listen"), 7100, "--listen");
    config.advertise_host = flags.get("advertise-host");
    config.coordinator = rpc::parse_host_port(flags.get("coordinator"), 7000, "--coordinator");
    config.name = flags.get("name").empty() ? rpc::default_node_name() : flags.get("name");
    config.data_dir = flags.get("data-dir");
  } catch (const std::exception& e) {
    std::cerr << "pstrain-server: " << e.what() << "\n";
    return 2;
  }
  if (flags.get_switch("check-config")) {
    std::cout << "pstrain-server: configuration ok\n";
    return 0;
  }

  rpc::prepare_node_process(1);  // update math runs on the event-loop thread
  auto io = kj::setupAsyncIo();
  std::string error;
  std::unique_ptr<KvStore> kv = KvStore::open(config.data_dir, &error);
  if (!kv) {
    std::cerr << "pstrain-server: " << error << "\n";
    return 1;
  }
  BackupStore backups(*kv);
  // The link to the coordinator is set up below; backups done before that are reported as soon
  // as it exists (the store thread calls back on this thread).
  rpc::CoordinatorLink* link_ptr = nullptr;
  ParameterServerImpl* server_ptr = nullptr;
  StoreThread store(backups,
                    [&](const std::string& job, uint64_t version, const KvStatus& status,
                        double seconds) -> kj::Promise<void> {
                      if (server_ptr != nullptr) server_ptr->backup_written(job, version);
                      if (!status.ok()) {
                        PSLOG(kError) << "job " << job << ": backup at step " << version << " failed: " << status.message;
                        return kj::READY_NOW;
                      }
                      PSLOG(kInfo) << "job " << job << ": backup at step " << version << " written in "
                                   << static_cast<int>(seconds * 1000) << " ms";
                      if (link_ptr == nullptr || !link_ptr->connected()) return kj::READY_NOW;
                      return report_backup(*link_ptr, store, job, version);
                    });
  auto impl = kj::heap<ParameterServerImpl>(&store);
  server_ptr = impl.get();
  capnp::TwoPartyServer rpc_server(kj::mv(impl));
  auto address = io.provider->getNetwork().parseAddress(config.listen.host, config.listen.port).wait(io.waitScope);
  auto listener = address->listen();
  const uint32_t port = listener->getPort();
  auto serving = rpc::serve(rpc_server, *listener).eagerlyEvaluate(
      [](kj::Exception&& e) { PSLOG(kError) << "listener failed: " << e.getDescription().cStr(); });
  PSLOG(kInfo) << "serving parameter-server RPC on " << config.listen.host << ":" << port;

  rpc::CoordinatorLink link(*io.provider, config.coordinator, proto::Role::SERVER,
                            config.advertise_host + ":" + std::to_string(port), config.name);
  link_ptr = &link;
  auto registered = link.start().eagerlyEvaluate(nullptr);
  rpc::print_ready("server", port);

  const int signal = rpc::shutdown_signal(io.unixEventPort).wait(io.waitScope);
  PSLOG(kInfo) << "signal " << signal << ": shutting down";
  if (signal == SIGTERM && link.connected()) {
    // Preemption notice: the coordinator has every server of our jobs back up at the next step;
    // we wait for our own part of it (the store thread reports it) before leaving.
    auto request = link.client().preemptedRequest();
    request.setNodeId(link.node_id());
    auto arranged = request.send().ignoreResult().catch_([](kj::Exception&& e) {
      PSLOG(kWarning) << "preemption notice failed: " << e.getDescription().cStr();
    });
    io.provider->getTimer().timeoutAfter(20 * kj::SECONDS, kj::mv(arranged)).wait(io.waitScope);
  }
  return 0;
}
