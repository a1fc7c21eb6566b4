// Async mode's backups by consistent cut (the essay is in async_cuts.cc): pausing every worker
// between two steps through its watch call, backing every server up as it stands, letting the
// workers go on; the positions kept with each cut, which a rollback restarts the workers from;
// and a free worker taking a lost one's place.
//
// Thread rules: event-loop thread only. Refers to the job's JobContext, which outlives it.
#pragma once

#include <kj/async.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "coordinator/job/job_context.h"

namespace pstrain {

class AsyncCuts {
 public:
  explicit AsyncCuts(JobContext& job);

  // After a progress report: starts a cut when the job's steps passed the next backup point.
  void maybe_start();
  // A worker stands between steps at `position` for cut `cut`; resolves when it may go on.
  kj::Promise<void> paused(NodeId node, uint64_t cut, WorkerPosition position);
  // A worker of a running cut will not pause (finished or lost).
  void expects_no_more(NodeId node);
  // Ends the running cut, if any: paused workers go on.
  void end();
  // A recovery ends the running cut, if any: each paused worker's call fails (its session ends
  // and it asks for the new plan) instead of going on, so no worker pushes another step of the
  // old plan into a server that may still be writing the cut's backup.
  void abandon(const std::string& why);
  // A rollback restored the backup of the cut at `version`, to run with `workers`: sets the
  // job's resume_positions and returns the first epoch whose metrics start over.
  size_t resume(const std::vector<NodeId>& workers, uint64_t version);
  // Whether a rollback can go back to the backup at `version` (its workers' positions are known).
  bool has_positions(uint64_t version) const { return positions_.count(version) != 0; }
  // A restarted coordinator: the positions of the cuts the one before stored (JobRecord::async_cuts).
  void load(std::map<uint64_t, std::vector<WorkerPosition>> stored) { positions_ = std::move(stored); }

  // A free worker takes the place of each lost one, from the lost one's last reported step.
  void replace_lost_workers();

 private:
  kj::Promise<void> run();
  WorkerPosition position_of(size_t worker) const;  // from its last reported step

  JobContext& job_;
  struct Cut {
    uint64_t id = 0;
    std::set<NodeId> expected;                  // worker nodes still to pause
    std::map<NodeId, WorkerPosition> positions;  // by worker node
    std::vector<kj::Own<kj::PromiseFulfiller<void>>> resumes;
    kj::Own<kj::PromiseFulfiller<void>> all_paused;
  };
  std::optional<Cut> cut_;
  uint64_t cuts_started_ = 0;
  uint64_t next_cut_at_ = 0;                               // job steps (sum over workers)
  std::map<uint64_t, std::vector<WorkerPosition>> positions_;  // backup version -> by worker index
  kj::Promise<void> task_ = nullptr;
};

}  // namespace pstrain
