#include "server/backup_report.h"

#include <chrono>
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

enum class ReplicaSent { kWhole, kNotRead, kNotSent };

// The backup may go with a later write's pruning (BackupStore::reported), queued on the store thread.
void unpin(StoreThread& store, const std::string& job, uint64_t version) {
  store.run([job, version](BackupStore& backups) {
    backups.reported(job, version);
    return true;
  }).detach([](kj::Exception&&) {});
}

kj::Promise<ReplicaPart> read_part(StoreThread& store, const std::string& job, uint64_t version, size_t first) {
  return store.run([job, version, first](BackupStore& backups) {
    ReplicaPart out;
    out.blobs = backups.read_part(job, version, first, rpc::kMaxPartBytes, &out.total, &out.error);
    return out;
  });
}

// A connection torn down (the call never reached the coordinator, or its answer never came back),
// as opposed to the coordinator refusing the call.
bool lost(const kj::Exception& e) { return e.getType() == kj::Exception::Type::DISCONNECTED; }

// Sends the replica from chunk `first` on: read a part on the store thread, send it, and only
// once the coordinator has stored it read the next, so neither side holds more than one part
// (the last part's reply is not waited for: backupDone follows it on the same connection, so if
// the last part is lost, backupDone is too, and says so).
kj::Promise<ReplicaSent> send_replica(rpc::CoordinatorLink& link, StoreThread& store, std::string job,
                                      uint64_t version, size_t first) {
  return read_part(store, job, version, first).then([&link, &store, job, version,
                                                     first](ReplicaPart part) mutable -> kj::Promise<ReplicaSent> {
    if (!part.blobs) {
      PSLOG(kWarning) << "job " << job << ": no replica of the backup at step " << version << ": " << part.error;
      return ReplicaSent::kNotRead;
    }
    if (!link.connected()) return ReplicaSent::kNotSent;
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
      // The last part: not waited for, so a one-part replica (most models) delays backupDone no
      // more than before replicas came in parts; the coordinator has counted every part before
      // it counts the backup.
      request.send().detach([job](kj::Exception&& e) {
        PSLOG(kWarning) << "job " << job << ": could not send a backup replica: " << e.getDescription().cStr();
      });
      return ReplicaSent::kWhole;
    }
    return request.send().then(
        [&link, &store, job, version, next](auto&&) mutable -> kj::Promise<ReplicaSent> {
          return send_replica(link, store, kj::mv(job), version, next);
        },
        [job](kj::Exception&& e) {
          PSLOG(kWarning) << "job " << job << ": could not send a backup replica: " << e.getDescription().cStr();
          return ReplicaSent::kNotSent;
        });
  });
}

}  // namespace

kj::Promise<ReportOutcome> report_backup(rpc::CoordinatorLink& link, StoreThread& store, std::string job,
                                         uint64_t version, bool again) {
  // The replica goes first: by the time the coordinator counts this backup as complete it also
  // holds this server's replica of it (or this server gave up sending it).
  const auto start = std::chrono::steady_clock::now();
  return send_replica(link, store, job, version, 0).then([&link, &store, job, version, start,
                                                          again](ReplicaSent sent) -> kj::Promise<ReportOutcome> {
    if (sent == ReplicaSent::kWhole) {
      PSLOG(kInfo) << "job " << job << ": replica of the backup at step " << version << " sent in "
                   << static_cast<int>(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() * 1000)
                   << " ms";
    }
    // Unpinned on the store thread, before any later write's pruning that it must not precede.
    unpin(store, job, version);
    if (again && sent == ReplicaSent::kNotRead) {
      PSLOG(kInfo) << "job " << job << ": the backup at step " << version
                   << " is no longer held here (a rollback or pruning deleted it): not reported again";
      return ReportOutcome::kNotHeld;
    }
    if (!link.connected()) return ReportOutcome::kLost;  // as if written while disconnected
    auto done = link.client().backupDoneRequest();
    done.setNodeId(link.node_id());
    done.setIncarnation(link.incarnation());
    done.setJobId(job);
    done.setVersion(version);
    // The reply names the backups a recovery may roll back to: pruning spares them from then on.
    return done.send().then(
        [&store, job](auto&& reply) {
          std::vector<uint64_t> restorable;
          for (uint64_t v : reply.getRestorable()) restorable.push_back(v);
          store.run([job, restorable = std::move(restorable)](BackupStore& backups) mutable {
            backups.set_restorable(job, std::move(restorable));
            return true;
          }).detach([](kj::Exception&&) {});
          return ReportOutcome::kDone;
        },
        [job, version](kj::Exception&& e) {
          PSLOG(kWarning) << "job " << job << ": could not report the backup at step " << version << ": "
                          << e.getDescription().cStr();
          return lost(e) ? ReportOutcome::kLost : ReportOutcome::kDone;
        });
  });
}

void BackupReporter::attach(rpc::CoordinatorLink& link, StoreThread& store) {
  link_ = &link;
  store_ = &store;
}

void BackupReporter::detach() {
  tasks_ = std::make_unique<kj::TaskSet>(errors_);
  link_ = nullptr;
  store_ = nullptr;
}

kj::Promise<void> BackupReporter::written(const std::string& job, uint64_t version) {
  const uint64_t order = ++writes_;
  if (link_ == nullptr || !link_->connected()) {
    remember(job, {version, 0, order});
    // Unpinned: pruning may take it if three newer backups come first (they supersede it).
    if (store_ != nullptr) unpin(*store_, job, version);
    return kj::READY_NOW;
  }
  return report(job, version, 1, false, order);
}

void BackupReporter::registered() {
  if (link_ == nullptr) return;
  auto pending = std::move(unreported_);
  unreported_.clear();
  for (auto& [job, entry] : pending) {
    PSLOG(kInfo) << "job " << job << ": reporting the backup at step " << entry.version << " again";
    tasks_->add(report(job, entry.version, entry.attempts + 1, true, entry.written));
  }
}

kj::Promise<void> BackupReporter::report(std::string job, uint64_t version, int attempt, bool again,
                                         uint64_t written) {
  return report_backup(*link_, *store_, job, version, again).then([this, job, version, attempt, written](ReportOutcome out) {
    if (out == ReportOutcome::kLost) remember(job, {version, attempt, written});
  });
}

void BackupReporter::remember(const std::string& job, Unreported entry) {
  if (entry.attempts >= kAttempts) {
    PSLOG(kWarning) << "job " << job << ": the backup at step " << entry.version << " was not reported after "
                    << entry.attempts << " tries; giving up on it";
    return;
  }
  const auto at = unreported_.find(job);
  if (at == unreported_.end() || entry.written > at->second.written) unreported_[job] = entry;
}

void BackupReporter::LogErrors::taskFailed(kj::Exception&& e) {
  PSLOG(kWarning) << "could not report a backup: " << e.getDescription().cStr();
}

}  // namespace pstrain
