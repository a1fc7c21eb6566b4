// Every timeout and delay the coordinator's jobs use, in one place (flags of
// pstrain-coordinator, see coordinator_main.cc; defaults below).
//
// Thread rules: a plain value, copied into each job.
#pragma once

#include <kj/time.h>

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
};

}  // namespace pstrain
