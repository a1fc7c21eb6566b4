// pstrain-server: a parameter server. Listens for Cap'n Proto RPC, registers with the
// coordinator and holds the parameter shards the coordinator places on it. main() turns the flags
// into a ServerNodeConfig and runs the node (server_node.h) until SIGINT or SIGTERM.
#include <kj/async-io.h>

#include <iostream>

#include "common/base/error.h"
#include "common/base/flags.h"
#include "common/base/process_main.h"
#include "common/rpc/rpc_util.h"
#include "server/server_node.h"

int main(int argc, char** argv) {
  using namespace pstrain;
  FlagSet flags("pstrain-server",
                "A parameter server: holds parameter shards of training jobs, applies the optimizer,\n"
                "and enforces the sync/async update rules. Registers with the coordinator.");
  flags.add("listen", "PSTRAIN_SERVER_LISTEN", "0.0.0.0:7100", "Address to serve RPC on (port 0: any free port).");
  flags.add("advertise-host", "PSTRAIN_ADVERTISE_HOST", "127.0.0.1",
            "Host name workers use to reach this server (the port is the listening one).");
  flags.add_switch("same-host-socket", "PSTRAIN_SERVER_SAME_HOST_SOCKET",
                   "Also listen (on a loopback or wildcard address) on a Unix socket named after the TCP address,\n"
                   "      which peers of the same user in the same network namespace use instead of loopback TCP\n"
                   "      (docs/DESIGN-NOTES.md, \"Same-host sockets\").",
                   /*on_by_default=*/true);
  flags.add("coordinator", "PSTRAIN_COORDINATOR", "127.0.0.1:7000", "The coordinator's RPC address.");
  flags.add("name", "PSTRAIN_NODE_NAME", "",
            "Name shown in the cluster view (default: host-pid). A restarted server keeps its name: that\n"
            "      is how the coordinator knows it is the same server with the same backups.");
  flags.add("data-dir", "PSTRAIN_SERVER_DATA_DIR", "server-data",
            "RocksDB directory for backups of this server's shards (created if missing).");
  flags.add("log-level", "PSTRAIN_LOG_LEVEL", "info", "debug, info, warning or error.");
  flags.add(rpc::kSecretFlag, rpc::kSecretEnv, "", rpc::kSecretHelp);
  flags.add_switch("check-config", "", "Validate the configuration and exit.");
  if (const auto status = parse_flags(flags, argc, argv, "pstrain-server")) return *status;
  ServerNodeConfig config;
  try {
    apply_log_level(flags);
    config.listen = rpc::parse_host_port(flags.get("listen"), 7100, "--listen");
    config.advertise_host = flags.get("advertise-host");
    config.coordinator = rpc::parse_host_port(flags.get("coordinator"), 7000, "--coordinator");
    config.name = flags.get("name").empty() ? rpc::default_node_name() : flags.get("name");
    config.data_dir = flags.get("data-dir");
    config.cluster = rpc::ClusterCredential::from_flag(flags.get(rpc::kSecretFlag));
    config.same_host_socket = flags.get_switch("same-host-socket");
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
  try {
    run_server_node(io, config, rpc::stop_on_signal(io.unixEventPort),
                    [](uint32_t port) { rpc::print_ready("server", port); });
  } catch (const Error& e) {
    std::cerr << "pstrain-server: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
