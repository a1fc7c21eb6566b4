// What the outside world sees of the coordinator: job records (spec, state, progress, metric
// history, trained model) and a snapshot of the cluster, persisted in RocksDB so a restarted
// coordinator lists every job it had.
//
// The event-loop thread writes (JobRunner, on every event); the HTTP thread reads. Reads never
// wait for the event loop: they copy what is here under the mutex. Writes change the in-memory
// copy at once and reach RocksDB through a KvWriter thread, so no caller waits for the disk:
// state changes and models are queued as synced writes, progress as plain ones. A reader sees a
// job's new state only once it is durable (so a client never sees SUCCEEDED, or a model, that a
// crash could take back); everything else at once.
//
// Thread rules: thread-safe. Owns its KvWriter (flushed when the store is destroyed).
#pragma once

#include <cstdint>
#include <algorithm>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/kv_store.h"
#include "coordinator/checkpoint_files.h"
#include "coordinator/job_state.h"
#include "coordinator/kv_writer.h"
#include "coordinator/model_catalog.h"
#include "coordinator/replica_store.h"

namespace pstrain {

struct StepMetric {
  uint32_t worker = 0;
  uint32_t epoch = 0;        // 1-based
  uint64_t step = 0;         // steps this worker has done in the job
  double loss = 0, accuracy = 0, samples_per_second = 0;
  int64_t time_ms = 0;       // wall clock, Unix milliseconds
};

struct EpochMetric {
  uint32_t epoch = 0;  // 1-based
  double train_loss = 0, train_accuracy = 0, test_loss = 0, test_accuracy = 0, samples_per_second = 0;
  int64_t time_ms = 0;
};

// A checkpoint a user can list, download and start jobs from: a complete backup of the job's
// parameters with the optimizer's slots, as a safetensors file in the store (checkpoints.h).
struct CheckpointInfo {
  int64_t step = 0;        // sync steps done (async: pushes applied by the job's workers)
  int64_t epoch = 0;       // epochs completed at that step
  int64_t time_ms = 0;     // when the backup was complete
  int64_t bytes = 0;       // of the file, with the optimizer state
  bool final = false;      // the state at the end of a job that succeeded
  // The newest figures at that point (a step's training loss and accuracy; the last epoch's test).
  std::optional<double> train_loss, train_accuracy, test_loss, test_accuracy;
};

struct JobRecord {
  std::string id, name, spec_json;
  JobState state = JobState::kPending;
  std::string reason;             // why it FAILED, was CANCELLED or is RECOVERING
  std::vector<std::string> notes; // things worth knowing that happened (recoveries, skipped backups)
  std::string mode;               // sync | async
  int64_t submitted_ms = 0, started_ms = 0, finished_ms = 0;
  int64_t epochs = 0, steps_per_epoch = 0, total_steps = 0, steps_done = 0;
  uint32_t current_epoch = 0;  // 1-based, 0 before the first step
  double samples_per_second = 0;
  std::optional<double> train_loss, train_accuracy, test_loss, test_accuracy;
  std::vector<uint32_t> workers, servers;  // node ids
  std::vector<std::string> server_names;   // by server index (a restarted coordinator matches them)
  uint64_t generation = 0;                 // of the current plan (a restarted coordinator goes past it)
  std::optional<int64_t> last_backup_step;
  uint32_t recoveries = 0;
  std::vector<int64_t> replayed_steps;  // per recovery
  std::vector<StepMetric> steps;
  std::vector<EpochMetric> epoch_history;
  bool has_model = false;
  int64_t model_bytes = 0;
  std::vector<CheckpointInfo> checkpoints;  // ascending step

  bool finished() const { return is_finished(state); }
};

struct NodeView {
  uint32_t id = 0;
  std::string role, name, address, job;
  int64_t registered_ms = 0, last_heartbeat_ms = 0;  // wall clock
  bool alive = true;
};

int64_t now_ms();

// A model is stored in pieces of at most this many bytes (one RocksDB value each).
inline constexpr size_t kMaxModelPieceBytes = size_t{16} << 20;

class JobStore {
 public:
  // kv may be null: nothing is persisted.
  explicit JobStore(KvStore* kv) : kv_(kv), replicas_(kv), uploads_(kv), writer_(kv) {}

  // Loads every persisted record (at start-up, before anything else touches the store).
  std::vector<JobRecord> load();

  // Adds a record, or changes one under the lock and persists it. Returns false for an unknown id.
  void add(JobRecord record);
  bool update(const std::string& id, const std::function<void(JobRecord&)>& change);
  void append_step(const std::string& id, const StepMetric& metric);
  void append_epoch(const std::string& id, const EpochMetric& metric);
  // The trained model (a safetensors file) in consecutive pieces: each piece one RocksDB value
  // (encode_safetensors_pieces keeps them at most kMaxModelPieceBytes), no copy kept in memory.
  void set_model(const std::string& id, std::vector<std::string> pieces);

  // A checkpoint's file (pieces as for set_model), then its entry in the record (synced), then the
  // deletion of the oldest non-final checkpoints beyond `keep` (their entries and files). A
  // checkpoint at a step the record has already is replaced.
  void add_checkpoint(const std::string& id, const CheckpointInfo& info, std::vector<std::string> pieces, size_t keep);
  // The file of the job's checkpoint at `step`, read from disk like model().
  std::optional<std::string> checkpoint_file(const std::string& id, int64_t step) const;

  std::optional<JobRecord> get(const std::string& id) const;
  std::vector<JobRecord> list() const;  // in submission order, without the step history
  // The whole file, read from disk (one copy, the caller's), once every write queued before is
  // durable.
  std::optional<std::string> model(const std::string& id) const;

  // Returns once every change made before the call is on disk (tests, shutdown).
  void flush() { writer_.flush(); }

  // The servers' backup replicas (on disk: replica_store.h).
  ReplicaStore& replicas() { return replicas_; }
  // Checkpoints made from replicas, and the starting shards of jobs that start from a file.
  CheckpointFiles& files() { return files_; }
  // Models users uploaded (model_catalog.h).
  ModelCatalog& uploads() { return uploads_; }
  const ModelCatalog& uploads() const { return uploads_; }

  void set_nodes(std::vector<NodeView> nodes);
  std::vector<NodeView> nodes() const;

 private:
  // Queues the record's write; `state_changed`: synced, and its state becomes visible once durable.
  void persist_record(const JobRecord& record, bool state_changed);
  void show_durable_state(JobRecord& record) const;  // the state readers may see (under mutex_)

  KvStore* kv_;  // read directly only by load() and model() (models of an earlier run)
  ReplicaStore replicas_;
  ModelCatalog uploads_;
  mutable std::mutex mutex_;
  std::map<std::string, JobRecord> jobs_;  // guarded by mutex_
  std::vector<std::string> order_;          // guarded by mutex_
  std::map<std::string, JobState> durable_state_;  // guarded by mutex_: each job's last durable state
  std::vector<NodeView> nodes_;             // guarded by mutex_
  std::map<std::string, std::vector<std::string>> models_;  // guarded by mutex_: only without kv_ (no disk)
  std::map<std::pair<std::string, int64_t>, std::vector<std::string>> checkpoint_files_;  // likewise
  // Reads the pieces under `prefix` (0, 1, ...) until one is missing; nullopt unless they add up
  // to `bytes`.
  std::optional<std::string> read_pieces(const std::string& prefix, int64_t bytes) const;
  // Destroyed before the members above (after files_), so its final writes' callbacks still find them.
  mutable KvWriter writer_;  // mutable: model() flushes it
  // After the writer: its thread (which reads files through this store) stops first.
  CheckpointFiles files_;
};

}  // namespace pstrain
