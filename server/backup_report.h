// Telling the coordinator about a durable backup: `storeReplica` (a copy of the backup, so that
// the shard can be restored onto another server should this one never come back), then
// `backupDone` (the step may now count as a complete backup). The replica is the backup as the
// store holds it, read back on the store thread in parts of at most rpc::kMaxPartBytes,
// one part read and in flight at a time (the next is read once the coordinator has stored the
// last): a shard of any size, never more than one part in memory. backupDone goes right after
// the last part (the same connection delivers it after the parts).
//
// A report can be lost: the link is down when the backup is written, or the connection is torn
// down while the replica's last part or backupDone is in flight (a coordinator that stalled long
// enough for the node to give up on the connection). A job waiting for that backup (its final
// checkpoint) would then wait forever. BackupReporter keeps, per job, the last written backup
// whose report was lost (the last written, not the highest step: after a rollback the job's
// newest backup can be a lower step than an abandoned one) and reports it again after the link's
// next registration, kAttempts reports in all, and only if the store still holds it when the
// report is read (a rollback deletes the abandoned timeline's backups: backupDone for a backup the
// server no longer has would make a step look restorable that is not). A report the coordinator
// refused (an unknown job, another process's node id) is not sent again.
// Not covered: a rollback that deletes the backup between the read of a report and its
// backupDone; the coordinator has no timeline token to tell such a late backupDone from a
// current one (the same holds for first reports).
//
// Thread rules: the server's event-loop thread (StoreThread's `written` callback, the link's
// registration callback); the promises resolve there.
// Ownership: BackupReporter borrows the link and the store thread (attach()) until detach(),
// which drops the reports it sends again (call it before the link goes). First reports are the
// StoreThread's (its `written` promises) and hold the link until the store thread goes; nothing
// turns the loop in between.
#pragma once

#include <kj/async.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "common/rpc/coordinator_link.h"
#include "server/store_thread.h"

namespace pstrain {

// How a report ended, for BackupReporter (tests read it too).
enum class ReportOutcome {
  kDone,        // backupDone answered (or refused by the coordinator: not worth sending again)
  kLost,        // the link was down or the connection broke: send it again after registering
  kNotHeld,     // a report sent again found the backup gone from the store: nothing sent
};

// Sends the replica, then backupDone. `again`: a report sent again, which sends nothing unless the
// backup is still in the store. The promise resolves once backupDone's fate is known.
kj::Promise<ReportOutcome> report_backup(rpc::CoordinatorLink& link, StoreThread& store, std::string job,
                                         uint64_t version, bool again = false);

class BackupReporter {
 public:
  static constexpr int kAttempts = 3;  // reports of one backup in all, the first one included

  BackupReporter() = default;
  BackupReporter(const BackupReporter&) = delete;
  BackupReporter& operator=(const BackupReporter&) = delete;

  // Before attach(), written backups are remembered (reported after the first registration).
  void attach(rpc::CoordinatorLink& link, StoreThread& store);
  // Drops the reports in flight that it sends again and forgets the link and the store.
  void detach();
  // The backup at `version` of `job` is durable: reports it, or remembers it if the link is down.
  kj::Promise<void> written(const std::string& job, uint64_t version);
  // The link (re)registered: reports again what was lost.
  void registered();
  struct Unreported {
    uint64_t version = 0;
    int attempts = 0;      // reports tried so far
    uint64_t written = 0;  // the order of written() calls: the last written backup wins
  };
  // The backups waiting to be reported again, by job.
  const std::map<std::string, Unreported>& unreported() const { return unreported_; }

 private:
  // `again`: not the report made as the backup was written (the store may have lost it since).
  kj::Promise<void> report(std::string job, uint64_t version, int attempt, bool again, uint64_t written);
  void remember(const std::string& job, Unreported entry);

  struct LogErrors : kj::TaskSet::ErrorHandler {
    void taskFailed(kj::Exception&& e) override;
  };
  rpc::CoordinatorLink* link_ = nullptr;
  StoreThread* store_ = nullptr;
  std::map<std::string, Unreported> unreported_;
  uint64_t writes_ = 0;
  LogErrors errors_;
  std::unique_ptr<kj::TaskSet> tasks_ = std::make_unique<kj::TaskSet>(errors_);  // reports sent again
};

}  // namespace pstrain
