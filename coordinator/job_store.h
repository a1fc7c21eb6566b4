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
// Events: every change of a job (state, progress, epoch metrics, checkpoints, complete backups,
// recoveries, nodes joining and leaving, notes) becomes a numbered event of the job (job_events.h
// says which), stored beside the job (job/<id>/event/<seq>) and queued to the writer in the same
// call as the change; state events also go to the global sequence (events/<seq>) that
// GET /v1/events streams. An event becomes visible (sent to subscribers, replayed to new ones)
// once the writer has applied it, so a crash of the process never takes back an event a client
// saw and the numbering a client resumes from holds across restarts.
//
// Thread rules: thread-safe. Owns its KvWriter (flushed when the store is destroyed). Writes come
// from the event-loop thread (the node lookup is called from them, under the lock); publishing to
// subscribers never waits for a client (event_stream.h).
#pragma once

#include <cstdint>
#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/kv_store.h"
#include "coordinator/checkpoint_files.h"
#include "coordinator/event_stream.h"
#include "coordinator/job_state.h"
#include "coordinator/kv_writer.h"
#include "coordinator/model_catalog.h"
#include "coordinator/replica_store.h"
#include "coordinator/worker_position.h"
#include "coordinator/stored_file.h"

namespace pstrain {

struct StepMetric {
  uint32_t worker = 0;
  uint32_t epoch = 0;        // 1-based
  uint64_t step = 0;         // steps this worker has done in the job
  double loss = 0, accuracy = 0, samples_per_second = 0;
  int64_t time_ms = 0;       // wall clock, Unix milliseconds
  // Payload bytes on the wire per step since the worker's previous report: gradients (or their
  // compressed form, or factors) pushed, values (or partial products) received.
  double bytes_pushed_per_step = 0, bytes_pulled_per_step = 0;
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

// A sign that the job's training went wrong (the divergence guard, coordinator/job/divergence_guard.h),
// with its figures. Each one is also a "warning" event and counts in /metrics
// (pstrain_divergence_total{reason}).
struct JobWarning {
  std::string reason;     // loss_not_finite | loss_above_start | chance_accuracy
  uint32_t epoch = 0;     // 1-based
  double value = 0;       // the figure (lowest training loss of the epoch, test accuracy)
  double threshold = 0;   // what it was compared with (starting loss, chance level + margin)
  std::string detail;     // one sentence with the figures
  int64_t time_ms = 0;
};

// Warnings recorded by this store's process, by reason (counters for /metrics).
struct WarningCounts {
  std::map<std::string, uint64_t> by_reason;
};

struct JobRecord {
  std::string id, name, spec_json;
  JobState state = JobState::kPending;
  std::string reason;             // why it FAILED, was CANCELLED or is RECOVERING
  std::vector<std::string> notes; // things worth knowing that happened (recoveries, skipped backups)
  std::vector<JobWarning> warnings;  // the divergence guard's findings, oldest first
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
  // By worker index, from each worker's latest report: payload bytes pushed and pulled per step.
  std::vector<double> bytes_pushed_per_step, bytes_pulled_per_step;
  std::vector<StepMetric> steps;
  std::vector<EpochMetric> epoch_history;
  bool has_model = false;
  int64_t model_bytes = 0;
  std::vector<CheckpointInfo> checkpoints;  // ascending step
  // Async: each worker's position at the job's latest consistent cuts, by the cut's backup
  // version (stored as job/<id>/cut/<version>, not in the record's JSON): where a restarted
  // coordinator resumes the workers (DESIGN-NOTES "Async state across a coordinator restart").
  std::map<uint64_t, std::vector<WorkerPosition>> async_cuts;

  bool finished() const { return is_finished(state); }
};

struct NodeView {
  uint32_t id = 0;
  std::string role, name, address, job;
  int64_t registered_ms = 0, last_heartbeat_ms = 0;  // wall clock
  bool alive = true;
  std::string cpu;  // what it computes with, as it registered (empty: not said)
  uint64_t progress = 0;  // its heartbeats' progress counter (a worker's steps, a server's updates)
  bool stalled = false;   // alive, in a job, and not advancing (cluster.h)
};

int64_t now_ms();

struct JobEventData;  // job_events.h

// A node's role and name, for node events (nullopt: unknown).
using NodeLookup = std::function<std::optional<NodeView>(uint32_t)>;

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
  // The same for a model written piece by piece (the final parameters, streamed from the
  // servers): piece `index` of job `id`'s model file, queued (moved into the writer); `written`
  // (if given) runs on the writer thread once it is on disk. Then set_model with the pieces'
  // count and total bytes announces it (the record, synced, after every piece).
  void write_model_piece(const std::string& id, size_t index, std::string piece, std::function<void()> written = {});
  void set_model(const std::string& id, size_t pieces, int64_t bytes);

  // A checkpoint's file (pieces as for set_model), then its entry in the record (synced), then the
  // deletion of the oldest non-final checkpoints beyond `keep` (their entries and files). A
  // checkpoint at a step the record has already is replaced.
  void add_checkpoint(const std::string& id, const CheckpointInfo& info, std::vector<std::string> pieces, size_t keep);
  // Async: the workers' positions at the consistent cut whose backup is `version`, and the
  // deletion of the cuts at `dropped`. Resolves (on the caller's event loop) once written: the
  // caller asks the servers to back up only then, so after a kill of the process every backup of
  // a cut has its positions on disk.
  kj::Promise<void> set_async_cut(const std::string& id, uint64_t version, std::vector<WorkerPosition> positions,
                                  const std::vector<uint64_t>& dropped);
  // Deletes every stored cut of the job (it ended: nothing will resume it).
  void erase_async_cuts(const std::string& id);
  // The same for a file streamed in beforehand with write_checkpoint_piece (pieces 0 .. pieces - 1,
  // info.bytes in all).
  void add_checkpoint(const std::string& id, const CheckpointInfo& info, size_t pieces, size_t keep);
  // Piece `index` of the file of job `id`'s checkpoint at `step`, before add_checkpoint announces
  // it: returns once the piece is written (call from a thread that may wait: CheckpointFiles'), so
  // a streamed file holds one piece in memory at a time.
  void write_checkpoint_piece(const std::string& id, int64_t step, size_t index, std::string piece);
  // The file of the job's checkpoint at `step`, read from disk like model().
  std::optional<std::string> checkpoint_file(const std::string& id, int64_t step) const;
  // The same two, to be read piece by piece (a download: stored_file.h), once every write
  // queued before is durable.
  std::optional<StoredFile> checkpoint_pieces(const std::string& id, int64_t step) const;
  std::optional<StoredFile> model_pieces(const std::string& id) const;

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

  // Names the nodes of node events (the owner's Cluster; called on the thread that writes, under
  // the store's lock). Set before the first write.
  void set_node_lookup(NodeLookup lookup);

  // Streams job `id`'s events after `after` to `subscriber` (empty id: every job's state events,
  // numbered globally): the visible ones at once (replay), then each new one as it becomes
  // visible. A finished job's stream ends after its history. False for an unknown job.
  bool subscribe(const std::string& id, uint64_t after, const std::shared_ptr<EventSubscriber>& subscriber);
  EventStreamStats& event_stats() { return event_stats_; }
  // Warnings (JobRecord::warnings) added by update() since this store was made, by reason.
  WarningCounts warning_counts() const;
  // The job's events so far (visible or not), for tests.
  size_t event_count(const std::string& id) const;

 private:
  // One sequence of events (a job's, or the global one of state changes) and its subscribers.
  struct EventLog {
    std::vector<EventFrame> frames;   // frames[i] is event i + 1
    std::vector<bool> terminal;       // frames[i] ends a job's stream
    uint64_t visible = 0;             // events 1..visible are applied by the writer
    bool ended = false;               // a job's: its terminal event is visible (or it was finished when loaded)
    std::vector<std::weak_ptr<EventSubscriber>> subscribers;
  };
  // Numbers `events` of job `id` (state events in the global log too) and adds their writes.
  // Returns the last sequence numbers of the job's log and the global log (0: none).
  std::pair<uint64_t, uint64_t> record_events(const std::string& id, const std::vector<JobEventData>& events,
                                              std::vector<KvStore::Write>& writes);
  // Makes the events up to these numbers visible, publishing them (under mutex_).
  void show_events(const std::string& id, uint64_t job_upto, uint64_t global_upto);
  void publish_upto(EventLog& log, uint64_t upto);
  // Queues `writes` (with events up to `upto`: visible once applied); `state`: the state to make
  // visible once durable (synced write).
  void enqueue(const std::string& id, std::vector<KvStore::Write> writes, bool sync, std::pair<uint64_t, uint64_t> upto,
               std::optional<JobState> state);
  // Queues the record's write and its events; `state_changed`: synced, and its state becomes
  // visible once durable.
  void persist_record(const JobRecord& record, bool state_changed, const std::vector<JobEventData>& events);
  void show_durable_state(JobRecord& record) const;  // the state readers may see (under mutex_)

  KvStore* kv_;  // read directly only by load() and model() (models of an earlier run)
  ReplicaStore replicas_;
  ModelCatalog uploads_;
  mutable std::mutex mutex_;
  std::map<std::string, JobRecord> jobs_;  // guarded by mutex_
  std::vector<std::string> order_;          // guarded by mutex_
  std::map<std::string, JobState> durable_state_;  // guarded by mutex_: each job's last durable state
  std::vector<NodeView> nodes_;             // guarded by mutex_
  NodeLookup node_lookup_;                   // guarded by mutex_
  std::map<std::string, EventLog> logs_;     // guarded by mutex_: each job's events
  EventLog global_;                          // guarded by mutex_: every job's state events
  EventStreamStats event_stats_;
  WarningCounts warning_counts_;             // guarded by mutex_
  std::map<std::string, std::vector<std::string>> models_;  // guarded by mutex_: only without kv_ (no disk)
  std::map<std::string, std::vector<std::string>> staged_models_;  // likewise: pieces not yet announced
  std::map<std::pair<std::string, int64_t>, std::vector<std::string>> checkpoint_files_;  // likewise
  std::map<std::pair<std::string, int64_t>, std::vector<std::string>> staged_checkpoints_;  // likewise: not yet added
  // Reads the pieces under `prefix` (0, 1, ...) until one is missing; nullopt unless they add up
  // to `bytes`.
  std::optional<std::string> read_pieces(const std::string& prefix, int64_t bytes) const;
  // Destroyed before the members above (after files_), so its final writes' callbacks still find them.
  mutable KvWriter writer_;  // mutable: model() flushes it
  // After the writer: its thread (which reads files through this store) stops first.
  CheckpointFiles files_;
};

}  // namespace pstrain
