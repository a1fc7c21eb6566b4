// What the outside world sees of the coordinator: job records (job_record.h: spec, state,
// progress, metric history, trained model) and a snapshot of the cluster, persisted in a KvStore
// (RocksDB; in memory for the REST fuzz target) so a restarted coordinator lists every job it had.
// Its parts: the records and their durable state (here), their events (job_event_log.h), the
// jobs' files (job_files.h), async cut positions (async_cut_positions.h), backup replicas
// (replica_store.h), uploaded models (model_catalog.h); the stored form is job_codec.h.
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
// says which), queued to the writer in the same batch as the change, and visible once the writer
// has applied it (job_event_log.h).
//
// Thread rules: thread-safe. Owns its KvWriter (flushed when the store is destroyed). Writes come
// from the event-loop thread (the node lookup is called from them, under the lock); publishing to
// subscribers never waits for a client (event_stream.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/base/mutex.h"
#include "common/storage/kv_store.h"
#include "coordinator/store/async_cut_positions.h"
#include "coordinator/store/checkpoint_files.h"
#include "coordinator/base/event_stream.h"
#include "coordinator/store/job_event_log.h"
#include "coordinator/store/job_files.h"
#include "coordinator/store/job_record.h"
#include "coordinator/store/kv_writer.h"
#include "coordinator/store/model_catalog.h"
#include "coordinator/store/replica_store.h"
#include "coordinator/base/stored_file.h"

namespace pstrain {

class JobStore {
 public:
  explicit JobStore(KvStore& kv)
      : kv_(kv), replicas_(kv), uploads_(kv), writer_(kv), job_files_(kv, writer_), cuts_(writer_) {}

  // Loads every persisted record (at start-up, before anything else touches the store).
  std::vector<JobRecord> load();

  // Adds a record, or changes one under the lock and persists it. Returns false for an unknown id.
  void add(JobRecord record);
  bool update(const std::string& id, const std::function<void(JobRecord&)>& change);
  void append_step(const std::string& id, const StepMetric& metric);
  void append_epoch(const std::string& id, const EpochMetric& metric);
  // The trained model (a safetensors file) in consecutive pieces: each piece one stored value
  // (encode_safetensors_pieces keeps them at most kMaxModelPieceBytes), no copy kept in memory.
  void set_model(const std::string& id, std::vector<std::string> pieces);
  // The same for a model written piece by piece (the final parameters, streamed from the
  // servers): piece `index` of job `id`'s model file, queued (moved into the writer); `written`
  // (if given) runs on the writer thread once it is on disk. Then set_model with the pieces'
  // count and total bytes announces it (the record, synced, after every piece).
  void write_model_piece(const std::string& id, size_t index, std::string piece, std::function<void()> written = {}) {
    job_files_.write_model_piece(id, index, std::move(piece), std::move(written));
  }
  void set_model(const std::string& id, size_t pieces, int64_t bytes);

  // A checkpoint's file (pieces as for set_model), then its entry in the record (synced), then the
  // deletion of the oldest non-final checkpoints beyond `keep` (their entries and files). A
  // checkpoint at a step the record has already is replaced.
  // `also_keep(step)`: true for a checkpoint kept beyond `keep` (early stopping's best, and the
  // epochs it has not judged yet).
  using KeepAlso = std::function<bool(int64_t step)>;
  void add_checkpoint(const std::string& id, const CheckpointInfo& info, std::vector<std::string> pieces, size_t keep,
                      const KeepAlso& also_keep = {});
  // The same for a file streamed in beforehand with write_checkpoint_piece (pieces 0 .. pieces - 1,
  // info.bytes in all).
  void add_checkpoint(const std::string& id, const CheckpointInfo& info, size_t pieces, size_t keep,
                      const KeepAlso& also_keep = {});
  // Piece `index` of the file of job `id`'s checkpoint at `step`, before add_checkpoint announces
  // it: returns once the piece is written (call from a thread that may wait: CheckpointFiles').
  void write_checkpoint_piece(const std::string& id, int64_t step, size_t index, std::string piece) {
    job_files_.write_checkpoint_piece(id, step, index, std::move(piece));
  }
  // Async: the workers' positions at the consistent cut whose backup is `version`, and the
  // deletion of the cuts at `dropped`; resolves (on the caller's event loop) once written
  // (async_cut_positions.h).
  kj::Promise<void> set_async_cut(const std::string& id, uint64_t version, std::vector<WorkerPosition> positions,
                                  const std::vector<uint64_t>& dropped);
  // Deletes every stored cut of the job (it ended: nothing will resume it).
  void erase_async_cuts(const std::string& id);

  // A job's model or checkpoint file, whole (one copy, the caller's) or to be read piece by piece
  // (a download: stored_file.h), once every write queued before is durable. Blocking reads:
  // call them off every event loop.
  std::optional<std::string> model(const std::string& id) const;
  std::optional<StoredFile> model_pieces(const std::string& id) const;
  std::optional<std::string> checkpoint_file(const std::string& id, int64_t step) const;
  std::optional<StoredFile> checkpoint_pieces(const std::string& id, int64_t step) const;

  std::optional<JobRecord> get(const std::string& id) const;
  std::vector<JobRecord> list() const;  // in submission order, without the step history

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
  EventStreamStats& event_stats() { return events_.stats(); }
  // Warnings (JobRecord::warnings) added by update() since this store was made, by reason.
  WarningCounts warning_counts() const;
  // The job's events so far (visible or not), for tests.
  size_t event_count(const std::string& id) const { return events_.count(id); }

 private:
  // Queues `writes` (with events up to `upto`: visible once applied); `state`: the state to make
  // visible once durable (synced write).
  void enqueue(const std::string& id, std::vector<KvStore::Write> writes, bool sync, std::pair<uint64_t, uint64_t> upto,
               std::optional<JobState> state);
  // Queues the record's write and its events; `state_changed`: synced, and its state becomes
  // visible once durable.
  void persist_record(const JobRecord& record, bool state_changed, const std::vector<JobEventData>& events);
  void show_durable_state(JobRecord& record) const PS_REQUIRES(mutex_);  // the state readers may see
  // The record's size of its model, or of its checkpoint at `step` (nullopt: none).
  std::optional<int64_t> model_bytes(const std::string& id) const;
  std::optional<int64_t> checkpoint_bytes(const std::string& id, int64_t step) const;

  KvStore& kv_;  // read directly only by load()
  ReplicaStore replicas_;
  ModelCatalog uploads_;
  mutable Mutex mutex_;
  std::map<std::string, JobRecord> jobs_ PS_GUARDED_BY(mutex_);
  std::vector<std::string> order_ PS_GUARDED_BY(mutex_);
  std::map<std::string, JobState> durable_state_ PS_GUARDED_BY(mutex_);  // each job's last durable state
  std::vector<NodeView> nodes_ PS_GUARDED_BY(mutex_);
  NodeLookup node_lookup_ PS_GUARDED_BY(mutex_);
  WarningCounts warning_counts_ PS_GUARDED_BY(mutex_);
  JobEventLog events_;
  // Destroyed before the members above (after files_), so its final writes' callbacks still find them.
  KvWriter writer_;
  JobFiles job_files_;        // model and checkpoint pieces, through writer_
  AsyncCutPositions cuts_;    // through writer_
  // After the writer: its thread (which reads files through this store) stops first.
  CheckpointFiles files_;
};

}  // namespace pstrain
