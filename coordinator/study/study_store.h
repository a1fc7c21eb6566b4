// The coordinator's studies (docs/STUDIES.md): each study's request, state and trials, kept in
// memory and persisted in the coordinator's KvStore (RocksDB) as `study/<id>`, so a restarted
// coordinator goes on with every study it had. A trial's parameters are not stored: they are a
// function of the request and the trial's number (study_spec.h); its figures come from its jobs'
// records (study_manager.h).
//
// Thread rules: thread-safe. The event-loop thread writes (StudyManager); the HTTP thread reads.
// Writes change the in-memory copy at once and reach RocksDB through a KvWriter thread of its own
// (synced); flush() waits for them (the REST API answers a submit or cancel only once durable).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/base/mutex.h"
#include "common/storage/kv_store.h"
#include "coordinator/store/kv_writer.h"
#include "coordinator/study/study_spec.h"

namespace pstrain {

enum class StudyState { kRunning, kSucceeded, kFailed, kCancelled };
// PENDING: its job is queued; RUNNING: training; PAUSED: ASHA has its rung's figure and has not
// promoted it yet; COMPLETED: trained to its last epoch; STOPPED: ASHA did not promote it (or the
// study ended first); FAILED / CANCELLED: its job did.
enum class TrialState { kPending, kRunning, kPaused, kCompleted, kStopped, kFailed, kCancelled };

const char* study_state_name(StudyState s);
const char* trial_state_name(TrialState s);
std::optional<StudyState> parse_study_state(const std::string& name);

// One job of a trial: grid and random trials have one; an ASHA trial one per rung it reached,
// each going on from the previous one's final checkpoint.
struct TrialRung {
  int64_t epochs = 0;           // training.epochs of the job (the total so far)
  std::string job;              // the job's id
  std::optional<double> metric; // the study's metric at its last epoch, once it succeeded
  // The trial's seconds before this rung's job (its earlier rungs').
  double node_seconds_before = 0, worker_seconds_before = 0;
};

struct TrialRecord {
  int64_t number = 0;  // 0-based
  TrialState state = TrialState::kPending;
  std::string reason;  // why it FAILED, was CANCELLED or STOPPED
  std::vector<TrialRung> rungs;
  double node_seconds = 0, worker_seconds = 0;  // over its jobs (nodes x seconds running)
  bool finished() const {
    return state == TrialState::kCompleted || state == TrialState::kStopped || state == TrialState::kFailed ||
           state == TrialState::kCancelled;
  }
};

struct StudyRecord {
  std::string id;
  StudySpec spec;
  StudyState state = StudyState::kRunning;
  std::string reason;
  int64_t created_ms = 0, finished_ms = 0;
  std::vector<TrialRecord> trials;  // by number
  bool finished() const { return state != StudyState::kRunning; }
};

// The stored form (and the REST view's core): JSON text, and back (nullopt: unreadable).
std::string study_to_json(const StudyRecord& study);
std::optional<StudyRecord> study_from_json(const std::string& text);

class StudyStore {
 public:
  explicit StudyStore(KvStore& kv) : kv_(kv), writer_(kv) {}
  // Every stored study (at start-up, before anything else touches the store), in id order.
  std::vector<StudyRecord> load();
  void add(StudyRecord study);
  // Changes a study under the lock and persists it (`durable`: else in memory only, for figures
  // that change every moment); false for an unknown id.
  bool update(const std::string& id, const std::function<void(StudyRecord&)>& change, bool durable = true);
  std::optional<StudyRecord> get(const std::string& id) const;
  std::vector<StudyRecord> list() const;  // in creation order
  void flush() { writer_.flush(); }

 private:
  void persist(const StudyRecord& study);
  KvStore& kv_;  // read only by load()
  mutable Mutex mutex_;
  std::map<std::string, StudyRecord> studies_ PS_GUARDED_BY(mutex_);
  std::vector<std::string> order_ PS_GUARDED_BY(mutex_);
  KvWriter writer_;
};

}  // namespace pstrain
