#include "server/backup_report.h"

#include <chrono>
#include <functional>
#include <optional>
#include <vector>

#include "common/base/log.h"
#include "common/rpc/rpc_util.h"

namespace pstrain {
namespace {

// Part of a backup read back from the store, as stored (encoded chunk snapshots): its chunks'
// blobs and the backup's chunk count, or why it cannot be read.
struct ReplicaPart {
  std::optional<std::vector<std::string>> blobs;
  size_t total = 0;
  std::string error;
};

kj::Promise<ReplicaPart> read_part(StoreThread& store, const std::string& job, uint64_t version, size_t first) {
  return store.run([job, version, first](BackupStore& backups) {
    ReplicaPart out;
    out.blobs = backups.read_part(job, version, first, rpc::kMaxPartBytes, &out.total, &out.error);
    return out;
  });
}

// Sends the replica from chunk `first` on: read a part on the store thread, send it, and only
// once the coordinator has stored it read the next, so neither side holds more than one part
// (the last part's reply is not waited for).
// Resolves with false (logged) if a part could not be read or sent.
kj::Promise<bool> send_replica(rpc::CoordinatorLink& link, StoreThread& store, std::string job, uint64_t version,
                               size_t first, std::function<void()> unreported) {
  return read_part(store, job, version, first).then([&link, &store, job, version, first,
                                                     unreported](ReplicaPart part) mutable -> kj::Promise<bool> {
    if (!part.blobs) {
      PSLOG(kWarning) << "job " << job << ": no replica of the backup at step " << version << ": " << part.error;
      return false;
    }
    if (!link.connected()) return false;
    auto request = link.client().storeReplicaRequest();
    request.setNodeId(link.node_id());
    request.setJobId(job);
    request.setVersion(version);
    request.setFirst(static_cast<uint32_t>(first));
    request.setTotal(static_cast<uint32_t>(part.total));
    auto list = request.initChunks(static_cast<unsigned>(part.blobs->size()));
    for (unsigned i = 0; i < part.blobs->size(); ++i) {
      const std::string& blob = (*part.blobs)[i];
      list.set(i, capnp::Data::Reader(reinterpret_cast<const kj::byte*>(blob.data()), blob.size()));
    }
    const size_t next = first + part.blobs->size();
    if (next >= part.total) {
      // The last part: not waited for. backupDone follows on the same connection, so the
      // coordinator has counted every part before it counts the backup, and a one-part replica
      // (most models) delays backupDone no more than before replicas came in parts.
      request.send().detach([job, unreported](kj::Exception&& e) {
        PSLOG(kWarning) << "job " << job << ": could not send a backup replica: " << e.getDescription().cStr();
        if (unreported) unreported();
      });
      return true;
    }
    return request.send().then(
        [&link, &store, job, version, next, unreported](auto&&) mutable -> kj::Promise<bool> {
          return send_replica(link, store, kj::mv(job), version, next, kj::mv(unreported));
        },
        [job](kj::Exception&& e) {
          PSLOG(kWarning) << "job " << job << ": could not send a backup replica: " << e.getDescription().cStr();
          return false;
        });
  });
}

}  // namespace

kj::Promise<void> report_backup(rpc::CoordinatorLink& link, StoreThread& store, std::string job, uint64_t version,
                                std::function<void()> unreported) {
  // The replica goes first: by the time the coordinator counts this backup as complete it also
  // holds this server's replica of it (or this server gave up sending it).
  const auto start = std::chrono::steady_clock::now();
  return send_replica(link, store, job, version, 0, unreported).then([&link, &store, job, version, start,
                                                                      unreported](bool sent) {
    if (sent) {
      PSLOG(kInfo) << "job " << job << ": replica of the backup at step " << version << " sent in "
                   << static_cast<int>(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() * 1000)
                   << " ms";
    }
    // Unpinned on the store thread, before any later write's pruning that it must not precede.
    store.run([job, version](BackupStore& backups) {
      backups.reported(job, version);
      return true;
    }).detach([](kj::Exception&&) {});
    if (!link.connected()) {  // as if the backup had been written while disconnected
      if (unreported) unreported();
      return;
    }
    auto done = link.client().backupDoneRequest();
    done.setNodeId(link.node_id());
    done.setIncarnation(link.incarnation());
    done.setJobId(job);
    done.setVersion(version);
    // The reply names the backups a recovery may roll back to: pruning spares them from then on.
    done.send()
        .then([&store, job](auto&& reply) {
          std::vector<uint64_t> restorable;
          for (uint64_t v : reply.getRestorable()) restorable.push_back(v);
          return store.run([job, restorable = std::move(restorable)](BackupStore& backups) mutable {
            backups.set_restorable(job, std::move(restorable));
            return true;
          }).ignoreResult();
        })
        .detach([unreported](kj::Exception&& e) {
          PSLOG(kWarning) << "could not report a backup: " << e.getDescription().cStr();
          if (unreported) unreported();
        });
  });
}

}  // namespace pstrain
