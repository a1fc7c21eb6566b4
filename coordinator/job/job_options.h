// Every timeout and delay the coordinator's jobs use, in one place (flags of
// pstrain-coordinator, see coordinator_main.cc; defaults below).
//
// Thread rules: a plain value, copied into each job.
#pragma once

#include <kj/time.h>

#include <cstddef>
#include <string>

#include "common/rpc/cluster_auth.h"

namespace pstrain {

struct JobOptions {
  // Each call to a parameter server (configure, restore, settle, list backups, adopt a backup,
  // pull the trained parameters, ...): one that does not answer in time fails the step of the
  // job that made it (a recovery, or the job).
  kj::Duration server_call_timeout = 60 * kj::SECONDS;
  // Recovery asks every server where it stands; one silent this long is treated as lost.
  kj::Duration server_probe_timeout = 3 * kj::SECONDS;
  // A lost server must be back (a restart under its name, or a move) within this, or the job fails.
  kj::Duration server_return_timeout = 120 * kj::SECONDS;
  // A lost server that has not come back after this long is replaced by a free server, which
  // takes over its shard from the replica of its latest complete backup.
  kj::Duration move_lost_server_after = 10 * kj::SECONDS;
  // A move of a shard to a free server (connect, configure, adopt the replica).
  kj::Duration server_move_timeout = 30 * kj::SECONDS;
  // A survivor computing a lost worker's slice, and every server settling at the next step.
  kj::Duration takeover_timeout = 30 * kj::SECONDS;
  // A sync cut (backup just ahead, then hold): abandoned, and its holds released, after this.
  kj::Duration sync_cut_timeout = 30 * kj::SECONDS;
  // An async cut waits this long for every worker to pause, then is abandoned.
  kj::Duration async_cut_timeout = 10 * kj::SECONDS;
  // How often a recovery looks again for servers or workers coming back.
  kj::Duration recovery_poll = 200 * kj::MILLISECONDS;

  // Not a timeout: the pieces (RocksDB values) the coordinator cuts a job's model and checkpoint
  // files into (kMaxModelPieceBytes, stored_file.h); also how much of such a file it holds at a
  // time while writing it. Tests make it small, so that a small model's files have many.
  size_t file_piece_bytes = size_t{16} << 20;

  // Not a timeout: how long an async cut waits between storing its workers' positions and asking
  // the servers to back up (async_cuts.cc). 0 in use; tests widen the window to land a fault in it.
  kj::Duration async_cut_backup_delay = 0 * kj::SECONDS;

  // Not a timeout either, but what every job's calls to servers carry (set by CoordinatorNode): the
  // cluster credential proved on each connection, and the coordinator's own key from which each
  // job's worker-token key derives (rpc::job_key; empty: an open cluster, no worker tokens).
  rpc::ClusterCredential cluster;
  std::string coordinator_key;
};

// Each option as a flag of pstrain-coordinator, in milliseconds (--NAME-ms, env PSTRAIN_...;
// the default is JobOptions{}'s).
struct JobOptionFlag {
  const char* name;  // without "--"
  const char* env;
  kj::Duration JobOptions::*member;
  int64_t min_ms;
  const char* help;
};
inline constexpr JobOptionFlag kJobOptionFlags[] = {
    {"move-server-after-ms", "PSTRAIN_MOVE_SERVER_AFTER_MS", &JobOptions::move_lost_server_after, 0,
     "A lost server not back this long after its loss is replaced by a free server, from its latest backup."},
    {"server-call-timeout-ms", "PSTRAIN_SERVER_CALL_TIMEOUT_MS", &JobOptions::server_call_timeout, 100,
     "Each call to a parameter server (configure, restore, settle, ...) fails after this long."},
    {"server-probe-timeout-ms", "PSTRAIN_SERVER_PROBE_TIMEOUT_MS", &JobOptions::server_probe_timeout, 10,
     "A recovery treats a server that does not answer its probe in this long as lost."},
    {"server-return-timeout-ms", "PSTRAIN_SERVER_RETURN_TIMEOUT_MS", &JobOptions::server_return_timeout, 100,
     "A lost server must be back (restarted under its name, or moved) within this, or its job fails."},
    {"server-move-timeout-ms", "PSTRAIN_SERVER_MOVE_TIMEOUT_MS", &JobOptions::server_move_timeout, 100,
     "Moving a lost server's shard to a free server (connect, configure, adopt the backup) fails after this long."},
    {"takeover-timeout-ms", "PSTRAIN_TAKEOVER_TIMEOUT_MS", &JobOptions::takeover_timeout, 100,
     "A survivor completing a lost sync worker's step gives way to a rollback after this long."},
    {"sync-cut-timeout-ms", "PSTRAIN_SYNC_CUT_TIMEOUT_MS", &JobOptions::sync_cut_timeout, 100,
     "A sync cut (preemption, a worker joining) is abandoned and its holds released after this long."},
    {"async-cut-timeout-ms", "PSTRAIN_ASYNC_CUT_TIMEOUT_MS", &JobOptions::async_cut_timeout, 100,
     "An async backup cut is abandoned if the workers have not all paused within this."},
    {"recovery-poll-ms", "PSTRAIN_RECOVERY_POLL_MS", &JobOptions::recovery_poll, 1,
     "How often a recovery looks again for servers or workers coming back."},
};

}  // namespace pstrain
