// A job's early stopping (spec `early_stopping`, common/data/early_stopping.h for the rule).
//
// How a job ends early, exactly:
// - The job backs up at every epoch end (the spec's parser sees to it) and every one of those
//   backups becomes a checkpoint (the Checkpointer makes each one, none skipped), and the store
//   keeps, beyond `checkpoint.keep`, the best epoch's and those of epochs not judged yet.
// - Each time an epoch is recorded, the rule runs over the job's recorded epochs (by epoch number,
//   the newest record of each: a rollback redoes epochs) and its standing goes into the record.
// - When it says stop after epoch s, the workers stop (no further epoch is recorded), and once the
//   checkpoint of the model's epoch (s, or the best with restore_best) is stored, its parameters
//   become the job's model: the job SUCCEEDS, saying why and where it stopped.
// In sync training every epoch's figures are the same bit for bit whatever the worker count and
// faults, so the epoch it stops at and the model it ends with are too.
//
// Thread rules: event-loop thread only. Refers to the job's JobContext, which outlives it.
#pragma once

#include <kj/async.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/data/early_stopping.h"
#include "coordinator/job/job_context.h"

namespace pstrain {

// A job record's epochs' `monitor` figures (early_stopping_metrics()) by 0-based epoch number,
// the newest record of each (a rollback records redone epochs again); seen[e]: epoch e has one.
std::vector<std::optional<double>> recorded_figures(const JobRecord& record, const std::string& monitor,
                                                    std::vector<bool>& seen);

class EarlyStop {
 public:
  explicit EarlyStop(JobContext& job) : job_(job) {}

  bool enabled() const { return job_.spec.early_stopping.enabled; }
  // After an epoch is recorded: runs the rule, records its standing; true the first time it says
  // stop (stopping() from then on).
  bool epoch_recorded();
  bool stopping() const { return stopping_; }
  // At the end of a job that ran every epoch: with restore_best and a best epoch before the last,
  // true, and stopping() from then on (the model is the best epoch's; stopped_epochs() all).
  bool ends_with_best();
  // Whether the checkpoint at `step` must be kept beyond checkpoint.keep.
  bool keeps(int64_t step) const;
  // Once stopping: waits for the model epoch's checkpoint (up to the job's server move timeout),
  // then writes its parameters as the job's model (with the metadata collect_parameters writes);
  // resolves with the model's size in bytes.
  kj::Promise<int64_t> write_model();
  // The job's last-epoch figures in `r` become the model epoch's (what the model scores), once
  // stopping.
  void set_model_figures(JobRecord& r) const;
  // Why the job ended ("early stopping: ...").
  std::string reason() const;
  // Epochs the job ran (the one it stopped after, 1-based), once stopping.
  uint64_t stopped_epochs() const { return static_cast<uint64_t>(*decision_.stopped_epoch + 1); }
  // The model's epoch (1-based) and step, once stopping.
  int64_t model_epoch() const { return *decision_.model_epoch(job_.spec.early_stopping) + 1; }
  uint64_t model_step() const { return static_cast<uint64_t>(model_epoch()) * job_.steps_per_epoch(); }

 private:
  kj::Promise<int64_t> wait_and_write(int64_t deadline_ms);
  // The rule's standing into the record.
  void record_standing();

  JobContext& job_;
  EarlyStoppingDecision decision_;
  int64_t judged_ = 0;  // epochs the rule has looked at
  bool stopping_ = false;
};

}  // namespace pstrain
