// The events of a job's life, as GET /v1/jobs/{id}/events sends them (docs: the SSE contract in
// docs/REST.md, "Watching a job"): what each change of a job record means as events, their JSON,
// their Server-Sent Events frame, and their stored form. Pure functions; the JobStore numbers,
// stores and publishes the events.
//
// Event types: state, progress, epoch, checkpoint, backup, recovery, node, note, warning. Every data
// object has "job" and "time_ms" (Unix ms).
//
// Thread rules: none (pure).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/store/job_record.h"

namespace pstrain {

struct JobEventData {
  std::string type;      // "state", "progress", ...
  std::string data;      // one line of JSON
  bool terminal = false; // a state event of a finished job (SUCCEEDED, FAILED, CANCELLED)
};

// The parts of a record whose changes make events (update() keeps this, not a copy of the record).
struct RecordDigest {
  JobState state = JobState::kPending;
  std::string reason;
  size_t notes = 0;
  size_t warnings = 0;
  uint32_t recoveries = 0;
  std::optional<int64_t> last_backup_step;
  std::vector<uint32_t> workers, servers;
};
RecordDigest digest(const JobRecord& record);

// The events a change from `before` to `after` makes, in this order: nodes that left the job
// (lost) and joined it, a complete backup, a recovery, new notes (but the one a recovery has as
// its detail), new warnings ({reason, epoch, value, threshold, detail}), the new state.
std::vector<JobEventData> change_events(const RecordDigest& before, const JobRecord& after, int64_t time_ms,
                                        const NodeLookup& lookup);
JobEventData state_event(const JobRecord& record, int64_t time_ms);
JobEventData progress_event(const std::string& job, const StepMetric& m, int64_t steps_done, int64_t total_steps);
JobEventData epoch_event(const std::string& job, const EpochMetric& m);
JobEventData checkpoint_event(const std::string& job, const CheckpointInfo& c, int64_t time_ms);

// "id: <id>\nevent: <type>\ndata: <data>\n\n".
std::string event_frame(uint64_t id, const JobEventData& event);

// Stored form (RocksDB value): "<type>\n<data>".
std::string event_to_stored(const JobEventData& event);
std::optional<JobEventData> event_from_stored(const std::string& text);

}  // namespace pstrain
