// Checkpoints (DESIGN-NOTES "Checkpoints"): the job's backups turned into files a user can list,
// download, evaluate and start other jobs from, and the start of a job from such a file.
//
// - A backup whose replicas are whole on every server (the coordinator then holds the job's whole
//   state at that step: parameters, optimizer slots, update count) becomes a checkpoint when the
//   spec keeps any (`checkpoint.keep`); the JobStore keeps the newest `keep` of them. One is made
//   at a time; a backup completed meanwhile waits, and only the newest waiting one is made (at
//   the end too: the one being made and the newest waiting one go before the final one).
// - At the end of a job, every server backs up its final state (unless the last backup is at the
//   last step already) and that becomes the final checkpoint, kept whatever `keep` says.
// - A job with `init_from` starts from a file (a checkpoint of another job, or a model): the file
//   is cut into the new job's shards (CheckpointFiles), each server adopts its own as a backup at
//   the starting step (0 for a fine-tune, the checkpoint's step to resume), all restore it, and
//   the ledger and the replica store hold it like any backup, so a recovery before the job's
//   first own backup goes back to it rather than to freshly initialised parameters.
//
// Thread rules: event-loop thread only. Refers to the job's JobContext, which outlives it.
#pragma once

#include <kj/async.h>

#include <cstdint>
#include <deque>
#include <optional>

#include "coordinator/job/early_stop.h"
#include "coordinator/job/job_context.h"

namespace pstrain {

class Checkpointer {
 public:
  // With early stopping (`early_stop` enabled), every backup is made a checkpoint (none skipped)
  // and the store keeps the ones early_stop->keeps() names beyond checkpoint.keep.
  Checkpointer(JobContext& job, const EarlyStop& early_stop);
  ~Checkpointer();  // unpins the waiting backups' replicas

  // The replicas of the backup at `version` may have become whole (called after each part).
  void on_replica(uint64_t version);
  // The final checkpoint at `version` (the job's last step): resolves once it is stored, or once
  // it could not be made (a note on the job says why; the job still succeeds).
  kj::Promise<void> final_checkpoint(uint64_t version);
  // Whether the job starts from a file and has not started yet (no backup of its own).
  bool starts_from_file() const;
  // Cuts the file into the servers' shards, has each server adopt its own and every server
  // restore it; resolves with the starting version. Fails with the reason (the job fails).
  kj::Promise<uint64_t> start_from_file();

 private:
  // Reads every server's replica of `version` and stores it as a checkpoint.
  kj::Promise<void> capture(uint64_t version, bool final);
  // Captures the waiting backup, then the one that became waiting meanwhile, and so on (task_);
  // then the final one, if its replicas are whole.
  void capture_next();
  kj::Promise<void> capture_waiting();
  // The final checkpoint (final_task_), once.
  void start_final();
  kj::Promise<void> adopt(size_t index, uint64_t version, std::vector<std::string> blobs, size_t first);
  Metadata file_metadata(uint64_t version, bool final) const;

  JobContext& job_;
  bool capturing_ = false;           // task_ runs intermediate captures
  const EarlyStop& early_stop_;
  // The backups to capture next, oldest first (their replicas pinned): the newest one only,
  // unless early stopping needs every one.
  std::deque<uint64_t> waiting_;
  std::optional<uint64_t> final_version_;
  bool final_ready_ = false;         // the final version's replicas are whole
  bool final_started_ = false;
  kj::Own<kj::PromiseFulfiller<void>> final_done_;
  kj::Promise<void> task_ = nullptr;
  kj::Promise<void> final_backup_ = nullptr;  // the servers' final backup
  kj::Promise<void> final_task_ = nullptr;    // the final checkpoint's capture
};

}  // namespace pstrain
