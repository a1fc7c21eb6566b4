// Telling the coordinator about a durable backup: `storeReplica` (a copy of the backup, so that
// the shard can be restored onto another server should this one never come back), then
// `backupDone` (the step may now count as a complete backup). The replica is the backup as the
// store holds it, read back on the store thread in parts of at most rpc::kMaxPartBytes,
// one part read and in flight at a time (the next is read once the coordinator has stored the
// last): a shard of any size, never more than one part in memory. backupDone goes right after
// the last part (the same connection delivers it after the parts).
//
// Thread rules: the server's event-loop thread (StoreThread's `written` callback); the promise
// resolves there once the replica is sent (or given up, logged) and backupDone is sent.
// Ownership: borrows the link and the store thread, which must outlive the promise.
#pragma once

#include <kj/async.h>

#include <cstdint>
#include <functional>
#include <string>

#include "common/rpc/coordinator_link.h"
#include "server/store_thread.h"

namespace pstrain {

// `unreported` (may be empty) is called when the report did not get through: the link was down,
// or the replica's last part or backupDone failed (a connection torn down mid-report). The server
// reports such a backup again after its next registration (server_node.cc), so a job waiting for
// that backup (its final checkpoint) is not left waiting for a report that was lost.
kj::Promise<void> report_backup(rpc::CoordinatorLink& link, StoreThread& store, std::string job, uint64_t version,
                                std::function<void()> unreported = {});

}  // namespace pstrain
