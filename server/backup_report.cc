#include "server/backup_report.h"

#include "common/log.h"

namespace pstrain {

void report_backup(rpc::CoordinatorLink& link, const BackupStore& store, const std::string& job, uint64_t version) {
  // The replica goes first: calls on one connection arrive in order, so by the time the
  // coordinator counts this backup as complete it also holds its replica.
  std::string error;
  if (const auto chunks = store.load(job, version, &error, /*exact_versions=*/false)) {
    auto replica = link.client().storeReplicaRequest();
    replica.setNodeId(link.node_id());
    replica.setJobId(job);
    replica.setVersion(version);
    auto list = replica.initChunks(static_cast<unsigned>(chunks->size()));
    unsigned i = 0;
    for (const auto& [key, chunk] : *chunks) {
      const std::string blob = encode_snapshot(chunk);
      list.set(i++, capnp::Data::Reader(reinterpret_cast<const kj::byte*>(blob.data()), blob.size()));
    }
    replica.send().detach([job](kj::Exception&& e) {
      PSLOG(kWarning) << "job " << job << ": could not send a backup replica: " << e.getDescription().cStr();
    });
  } else {
    PSLOG(kWarning) << "job " << job << ": no replica of the backup at step " << version << ": " << error;
  }

  auto done = link.client().backupDoneRequest();
  done.setNodeId(link.node_id());
  done.setJobId(job);
  done.setVersion(version);
  done.send().detach([](kj::Exception&& e) {
    PSLOG(kWarning) << "could not report a backup: " << e.getDescription().cStr();
  });
}

}  // namespace pstrain
