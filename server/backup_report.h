// Telling the coordinator about a durable backup: `backupDone` (the step may now count as a
// complete backup) and `storeReplica` (a copy of the backup, so that the shard can be restored
// onto another server should this one never come back).
//
// Thread rules: the server's event-loop thread (the backup writer's completion callback).
#pragma once

#include <cstdint>
#include <string>

#include "common/rpc/coordinator_link.h"
#include "server/backup_store.h"

namespace pstrain {

void report_backup(rpc::CoordinatorLink& link, const BackupStore& store, const std::string& job, uint64_t version);

}  // namespace pstrain
