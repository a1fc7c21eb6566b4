#include "server/server_node.h"

#include <capnp/rpc-twoparty.h>

#include <memory>

#include "common/base/error.h"
#include "common/storage/kv_store.h"
#include "common/base/log.h"
#include "common/rpc/coordinator_link.h"
#include "server/backup_report.h"
#include "server/backup_store.h"
#include "server/parameter_server.h"
#include "server/store_thread.h"

namespace pstrain {

void run_server_node(kj::AsyncIoContext& io, const ServerNodeConfig& config, kj::Promise<rpc::NodeStop> stop,
                     const std::function<void(uint32_t port)>& ready) {
  std::string error;
  std::unique_ptr<KvStore> kv = KvStore::open(config.data_dir, &error);
  if (!kv) throw Error(error);
  BackupStore backups(*kv);
  ParameterServerImpl* server_ptr = nullptr;
  // Reports each durable backup to the coordinator, and again after the next registration one
  // whose report a broken connection lost (backup_report.h). The link is attached below; backups
  // written before that are reported after its first registration (the store thread calls back
  // on this thread).
  BackupReporter reporter;
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
                      return reporter.written(job, version);
                    });
  auto impl = kj::heap<ParameterServerImpl>(&store);
  server_ptr = impl.get();
  capnp::TwoPartyServer rpc_server(kj::mv(impl));
  auto address = io.provider->getNetwork().parseAddress(config.listen.host, config.listen.port).wait(io.waitScope);
  auto listener = address->listen();
  const uint32_t port = listener->getPort();
  rpc::warn_if_open(config.cluster, "parameter server");
  rpc::AuthRefusals refusals;
  const rpc::ListenerAuth auth{config.cluster, io.provider->getTimer(), refusals, "parameter server"};
  auto serving = rpc::serve(rpc_server, *listener, auth).eagerlyEvaluate(
      [](kj::Exception&& e) { PSLOG(kError) << "listener failed: " << e.getDescription().cStr(); });
  kj::Own<kj::ConnectionReceiver> same_host;  // dropped before `listener` (declared after it)
  kj::Promise<void> serving_same_host = kj::READY_NOW;
  if (config.same_host_socket) {
    same_host = rpc::listen_same_host(io.provider->getNetwork(), *listener);  // throws if its name is taken
    if (!same_host) {
      PSLOG(kInfo) << "no same-host socket: " << config.listen.host
                   << " is neither a loopback nor a wildcard address, so no peer would use one; TCP only";
    }
    if (same_host) {
      serving_same_host = rpc::serve(rpc_server, *same_host, auth, rpc::Transport::kSameHost)
                              .eagerlyEvaluate([](kj::Exception&& e) {
                                PSLOG(kError) << "same-host listener failed: " << e.getDescription().cStr();
                              });
    }
  }
  PSLOG(kInfo) << "serving parameter-server RPC on " << config.listen.host << ":" << port
               << (same_host ? " and its same-host socket" : "");

  rpc::CoordinatorLink link(*io.provider, config.coordinator, proto::Role::SERVER,
                            config.advertise_host + ":" + std::to_string(port), config.name, config.cluster,
                            &server_ptr->progress());
  reporter.attach(link, store);
  KJ_DEFER(reporter.detach());  // before the link goes
  link.on_registered([&reporter](uint32_t) { reporter.registered(); });
  auto registered = link.start().eagerlyEvaluate(nullptr);
  ready(port);

  if (stop.wait(io.waitScope) == rpc::NodeStop::kPreempted && link.connected()) {
    // Preemption notice: the coordinator has every server of our jobs back up at the next step;
    // we wait for our own part of it (the store thread reports it) before leaving.
    auto request = link.client().preemptedRequest();
    request.setNodeId(link.node_id());
    auto arranged = request.send().ignoreResult().catch_([](kj::Exception&& e) {
      PSLOG(kWarning) << "preemption notice failed: " << e.getDescription().cStr();
    });
    io.provider->getTimer().timeoutAfter(config.preemption_timeout, kj::mv(arranged)).wait(io.waitScope);
  }
}

}  // namespace pstrain
