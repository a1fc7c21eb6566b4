// Runs the studies (docs/STUDIES.md): turns each study's trials into jobs through the one job
// queue, reads their figures from the jobs' records, and decides what runs next: the grid's next
// point, the next random draw, or (ASHA, Li et al. 2020, asynchronous successive halving) the
// promotion of a paused trial in the top 1/reduction_factor of its rung, which continues from its
// job's final checkpoint with the optimizer's state (init_from, bit for bit as if it had run on).
//
// Everything a study decides is recorded in its jobs: trial N's job for rung k is
// `<study>-t<N>` (grid, random) or `<study>-t<N>-r<k>` (ASHA), so a restarted coordinator adopts
// every trial job it finds and never starts one twice; a trial's parameters are a function of
// the request and N (study_spec.h).
//
// Thread rules: event-loop thread only (the REST API reaches it through KjJobCommands).
#pragma once

#include <optional>
#include <string>

#include "coordinator/job/job_manager.h"
#include "coordinator/store/job_store.h"
#include "coordinator/study/study_store.h"

namespace pstrain {

class StudyManager {
 public:
  StudyManager(JobManager& jobs, JobStore& job_store, StudyStore& store);

  // Loads the stored studies and adopts the trial jobs each one's record does not know yet (call
  // once at start, after the unfinished jobs are re-queued).
  void load();
  // A new study (the spec was checked by parse_study_spec); returns its id. Its first trials are
  // queued by the next tick().
  std::string create(StudySpec spec);
  enum class CancelResult { kCancelled, kNotFound, kAlreadyFinished };
  // Cancels the study and every unfinished trial job (their nodes are free at once).
  CancelResult cancel(const std::string& id);
  // Advances every running study; true if it queued or cancelled a job.
  bool tick();

 private:
  // Refreshes trial figures and states from the jobs' records; returns the study's new record.
  void refresh(StudyRecord& study) const;
  // Queues the next trial or promotion while the study has room; true if it queued any.
  bool advance(StudyRecord& study);
  // ASHA: the paused trial to promote (in the top 1/factor of its rung), if any.
  std::optional<size_t> promotion(const StudyRecord& study) const;
  // Queues the trial's job for rung `rung` (0: a new trial) with its id; adopts one that exists.
  void queue_rung(StudyRecord& study, TrialRecord& trial, size_t rung);
  void adopt_jobs(StudyRecord& study);
  void finish(StudyRecord& study);

  JobManager& jobs_;
  JobStore& job_store_;
  StudyStore& store_;
  uint64_t next_id_ = 1;
};

// The id of trial `number`'s job for ASHA rung `rung` (-1: grid or random, one job).
std::string trial_job_id(const std::string& study, int64_t number, int rung);

}  // namespace pstrain
