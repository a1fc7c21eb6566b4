#include "server/backup_report.h"

#include <optional>
#include <vector>

#include "common/log.h"

namespace pstrain {
namespace {

// A backup read back from the store, encoded for the wire: its chunks' blobs, or why it cannot
// be read.
struct Replica {
  std::optional<std::vector<std::string>> blobs;
  std::string error;
};

}  // namespace

kj::Promise<void> report_backup(rpc::CoordinatorLink& link, StoreThread& store, std::string job, uint64_t version) {
  auto replica = store.run([job, version](BackupStore& backups) {
    Replica out;
    if (const auto chunks = backups.load(job, version, &out.error, /*exact_versions=*/false)) {
      out.blobs.emplace();
      for (const auto& [key, chunk] : *chunks) out.blobs->push_back(encode_snapshot(chunk));
    }
    return out;
  });
  return replica.then([&link, job = std::move(job), version](Replica replica) {
    if (!link.connected()) return;  // as if the backup had been written while disconnected
    // The replica goes first: calls on one connection arrive in order, so by the time the
    // coordinator counts this backup as complete it also holds its replica.
    if (replica.blobs) {
      auto request = link.client().storeReplicaRequest();
      request.setNodeId(link.node_id());
      request.setJobId(job);
      request.setVersion(version);
      auto list = request.initChunks(static_cast<unsigned>(replica.blobs->size()));
      for (unsigned i = 0; i < replica.blobs->size(); ++i) {
        const std::string& blob = (*replica.blobs)[i];
        list.set(i, capnp::Data::Reader(reinterpret_cast<const kj::byte*>(blob.data()), blob.size()));
      }
      request.send().detach([job](kj::Exception&& e) {
        PSLOG(kWarning) << "job " << job << ": could not send a backup replica: " << e.getDescription().cStr();
      });
    } else {
      PSLOG(kWarning) << "job " << job << ": no replica of the backup at step " << version << ": " << replica.error;
    }

    auto done = link.client().backupDoneRequest();
    done.setNodeId(link.node_id());
    done.setJobId(job);
    done.setVersion(version);
    done.send().detach([](kj::Exception&& e) {
      PSLOG(kWarning) << "could not report a backup: " << e.getDescription().cStr();
    });
  });
}

}  // namespace pstrain
