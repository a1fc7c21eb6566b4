// Telling the coordinator about a durable backup: `storeReplica` (a copy of the backup, so that
// the shard can be restored onto another server should this one never come back), then
// `backupDone` (the step may now count as a complete backup). The replica is the backup as the
// store holds it, read back and encoded on the store thread.
//
// Thread rules: the server's event-loop thread (StoreThread's `written` callback); the promise
// resolves there once both calls are sent. Ownership: borrows the link and the store thread,
// which must outlive the promise.
#pragma once

#include <kj/async.h>

#include <cstdint>
#include <string>

#include "common/rpc/coordinator_link.h"
#include "server/store_thread.h"

namespace pstrain {

kj::Promise<void> report_backup(rpc::CoordinatorLink& link, StoreThread& store, std::string job, uint64_t version);

}  // namespace pstrain
