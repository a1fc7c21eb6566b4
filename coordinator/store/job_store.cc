#include "coordinator/store/job_store.h"

#include <algorithm>
#include <memory>

#include "common/base/log.h"
#include "coordinator/store/job_codec.h"
#include "coordinator/store/job_events.h"

namespace pstrain {
namespace {

// Keys: job/<id>/record, job/<id>/step/<seq>, job/<id>/epoch/<n>, job/<id>/event/<seq>,
// job/<id>/cut/<version> (async positions), events/<seq> (the global sequence of state events);
// the files' keys are job_files.cc's. Sequence numbers are zero-padded so key order is numeric order.
std::string padded(uint64_t n) { return key_number(n, 12); }
std::string record_key(const std::string& id) { return "job/" + id + "/record"; }

}  // namespace

std::vector<JobRecord> JobStore::load() {
  std::vector<JobRecord> loaded;
  std::map<std::string, JobRecord> by_id;
  std::map<std::string, JobEventLog::Stored> events;
  for (const auto& entry : kv_.scan("job/")) {
    const std::string rest = entry.key.substr(4);
    const auto slash = rest.find('/');
    if (slash == std::string::npos) continue;
    const std::string id = rest.substr(0, slash), kind = rest.substr(slash + 1);
    if (entry.corrupt) {
      PSLOG(kError) << "job store: " << entry.key << " failed its checksum; skipped";
      continue;
    }
    if (kind == "record") {
      if (auto record = record_from_json(entry.value)) {
        auto steps = std::move(by_id[id].steps);
        auto epochs = std::move(by_id[id].epoch_history);
        auto cuts = std::move(by_id[id].async_cuts);
        by_id[id] = std::move(*record);
        by_id[id].steps = std::move(steps);
        by_id[id].epoch_history = std::move(epochs);
        by_id[id].async_cuts = std::move(cuts);
      }
    } else if (kind.starts_with("step/")) {
      if (auto m = step_from_json(entry.value)) by_id[id].steps.push_back(*m);
    } else if (kind.starts_with("epoch/")) {
      if (auto m = epoch_from_json(entry.value)) by_id[id].epoch_history.push_back(*m);
    } else if (const auto version = AsyncCutPositions::version_of(kind)) {
      if (auto p = positions_from_json(entry.value)) by_id[id].async_cuts[*version] = std::move(*p);
    } else if (kind.starts_with("event/")) {
      if (auto e = event_from_stored(entry.value)) events[id].emplace_back(std::stoull(kind.substr(6)), std::move(*e));
    }
  }
  JobEventLog::Stored global;
  for (const auto& entry : kv_.scan("events/")) {
    if (entry.corrupt) continue;
    if (auto e = event_from_stored(entry.value)) global.emplace_back(std::stoull(entry.key.substr(7)), std::move(*e));
  }
  MutexLock lock(mutex_);
  events_.restore("", global);
  for (auto& [id, list] : events) {
    if (by_id.count(id) != 0 && !by_id[id].id.empty()) events_.restore(id, list);
  }
  for (auto& [id, record] : by_id) {
    if (record.id.empty()) continue;  // metrics without a record: ignore
    loaded.push_back(record);
    order_.push_back(id);
    if (record.finished()) events_.end(id);  // (also a job stored before events were)
    durable_state_[id] = record.state;
    jobs_[id] = std::move(record);
  }
  std::sort(order_.begin(), order_.end(), [this](const std::string& a, const std::string& b) PS_REQUIRES(mutex_) {
    return jobs_[a].submitted_ms != jobs_[b].submitted_ms ? jobs_[a].submitted_ms < jobs_[b].submitted_ms : a < b;
  });
  std::sort(loaded.begin(), loaded.end(), [](const JobRecord& a, const JobRecord& b) {
    return a.submitted_ms != b.submitted_ms ? a.submitted_ms < b.submitted_ms : a.id < b.id;
  });
  return loaded;
}

void JobStore::enqueue(const std::string& id, std::vector<KvStore::Write> writes, bool sync,
                       std::pair<uint64_t, uint64_t> upto, std::optional<JobState> state) {
  std::function<void()> applied;
  if (state || upto.first != 0 || upto.second != 0) {
    applied = [this, id, state, upto] {
      MutexLock lock(mutex_);
      if (state) durable_state_[id] = *state;
      events_.show(id, upto.first, upto.second);
    };
  }
  writer_.enqueue(std::move(writes), sync, std::move(applied));
}

void JobStore::persist_record(const JobRecord& record, bool state_changed, const std::vector<JobEventData>& events) {
  std::vector<KvStore::Write> writes;
  writes.push_back({record_key(record.id), record_to_json(record)});
  const auto upto = events_.record(record.id, events, writes);
  enqueue(record.id, std::move(writes), state_changed, upto,
          state_changed ? std::optional<JobState>(record.state) : std::nullopt);
}

void JobStore::show_durable_state(JobRecord& record) const {
  if (const auto it = durable_state_.find(record.id); it != durable_state_.end()) record.state = it->second;
}

void JobStore::add(JobRecord record) {
  MutexLock lock(mutex_);
  persist_record(record, true, {state_event(record, record.submitted_ms != 0 ? record.submitted_ms : now_ms())});
  if (jobs_.count(record.id) == 0) order_.push_back(record.id);
  jobs_[record.id] = std::move(record);
}

bool JobStore::update(const std::string& id, const std::function<void(JobRecord&)>& change) {
  MutexLock lock(mutex_);
  const auto it = jobs_.find(id);
  if (it == jobs_.end()) return false;
  const RecordDigest before = digest(it->second);
  change(it->second);
  for (size_t i = before.warnings; i < it->second.warnings.size(); ++i) {
    ++warning_counts_.by_reason[it->second.warnings[i].reason];
  }
  // State changes are made durable at once; progress can lose its last moments in a crash.
  persist_record(it->second, it->second.state != before.state,
                 change_events(before, it->second, now_ms(), node_lookup_));
  return true;
}

WarningCounts JobStore::warning_counts() const {
  MutexLock lock(mutex_);
  return warning_counts_;
}

void JobStore::append_step(const std::string& id, const StepMetric& metric) {
  MutexLock lock(mutex_);
  const auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  std::vector<KvStore::Write> writes;
  writes.push_back({"job/" + id + "/step/" + padded(it->second.steps.size()), step_to_json(metric)});
  const auto upto =
      events_.record(id, {progress_event(id, metric, it->second.steps_done, it->second.total_steps)}, writes);
  enqueue(id, std::move(writes), false, upto, std::nullopt);
  it->second.steps.push_back(metric);
}

void JobStore::append_epoch(const std::string& id, const EpochMetric& metric) {
  MutexLock lock(mutex_);
  const auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  std::vector<KvStore::Write> writes;
  writes.push_back({"job/" + id + "/epoch/" + padded(metric.epoch), epoch_to_json(metric)});
  const auto upto = events_.record(id, {epoch_event(id, metric)}, writes);
  enqueue(id, std::move(writes), false, upto, std::nullopt);
  it->second.epoch_history.push_back(metric);
}

kj::Promise<void> JobStore::set_async_cut(const std::string& id, uint64_t version, std::vector<WorkerPosition> positions,
                                          const std::vector<uint64_t>& dropped) {
  MutexLock lock(mutex_);
  const auto it = jobs_.find(id);
  if (it == jobs_.end()) return kj::READY_NOW;
  return cuts_.set(id, it->second.async_cuts, version, std::move(positions), dropped);
}

void JobStore::erase_async_cuts(const std::string& id) {
  MutexLock lock(mutex_);
  const auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  cuts_.erase_all(id, it->second.async_cuts);
}

void JobStore::set_model(const std::string& id, std::vector<std::string> pieces) {
  int64_t bytes = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    bytes += static_cast<int64_t>(pieces[i].size());
    write_model_piece(id, i, std::move(pieces[i]));
  }
  set_model(id, pieces.size(), bytes);
}

void JobStore::set_model(const std::string& id, size_t pieces, int64_t bytes) {
  MutexLock lock(mutex_);
  const auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  it->second.has_model = true;
  it->second.model_bytes = bytes;
  // After the pieces, the record that says the model exists, synced: after a crash in between,
  // the pieces are there but no record claims them. Reads take pieces until one is missing (the
  // one after the last is deleted, whatever was there) and check the total against the record's
  // model_bytes.
  writer_.enqueue({job_files_.end_of_model(id, pieces), {record_key(id), record_to_json(it->second)}}, true);
}

void JobStore::add_checkpoint(const std::string& id, const CheckpointInfo& given, std::vector<std::string> pieces,
                              size_t keep, const KeepAlso& also_keep) {
  CheckpointInfo info = given;
  info.bytes = 0;
  const size_t count = pieces.size();
  for (size_t i = 0; i < count; ++i) {
    info.bytes += static_cast<int64_t>(pieces[i].size());
    write_checkpoint_piece(id, info.step, i, std::move(pieces[i]));
  }
  add_checkpoint(id, info, count, keep, also_keep);
}

void JobStore::add_checkpoint(const std::string& id, const CheckpointInfo& info, size_t count, size_t keep,
                              const KeepAlso& also_keep) {
  MutexLock lock(mutex_);
  const auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  std::vector<CheckpointInfo>& list = it->second.checkpoints;
  // A checkpoint made again (the same step, final or not) is no news: no event.
  const bool known = std::any_of(list.begin(), list.end(),
                                 [&](const CheckpointInfo& c) { return c.step == info.step && c.final == info.final; });
  std::erase_if(list, [&](const CheckpointInfo& c) { return c.step == info.step; });
  list.insert(std::upper_bound(list.begin(), list.end(), info,
                               [](const CheckpointInfo& a, const CheckpointInfo& b) { return a.step < b.step; }),
              info);
  // The oldest non-final checkpoints beyond `keep` go.
  std::vector<int64_t> dropped;
  size_t intermediate = 0;
  const auto kept = [&](const CheckpointInfo& c) { return c.final || (also_keep && also_keep(c.step)); };
  for (const CheckpointInfo& c : list) intermediate += kept(c) ? 0 : 1;
  for (auto c = list.begin(); c != list.end() && intermediate > keep;) {
    if (kept(*c)) {
      ++c;
      continue;
    }
    dropped.push_back(c->step);
    c = list.erase(c);
    --intermediate;
  }
  // As in set_model: the pieces are written (write_checkpoint_piece), then the record that lists
  // the checkpoint (synced), with the deletion of the piece after the last.
  std::vector<KvStore::Write> writes = {job_files_.end_of_checkpoint(id, info.step, count),
                                        {record_key(id), record_to_json(it->second)}};
  std::vector<JobEventData> events;
  if (!known) events.push_back(checkpoint_event(id, info, info.time_ms != 0 ? info.time_ms : now_ms()));
  const auto upto = events_.record(id, events, writes);
  enqueue(id, std::move(writes), true, upto, std::nullopt);
  for (int64_t step : dropped) job_files_.erase_checkpoint(id, step);
}

std::optional<int64_t> JobStore::model_bytes(const std::string& id) const {
  MutexLock lock(mutex_);
  const auto job = jobs_.find(id);
  if (job == jobs_.end() || !job->second.has_model) return std::nullopt;
  return job->second.model_bytes;
}

std::optional<int64_t> JobStore::checkpoint_bytes(const std::string& id, int64_t step) const {
  MutexLock lock(mutex_);
  const auto job = jobs_.find(id);
  if (job == jobs_.end()) return std::nullopt;
  const auto& list = job->second.checkpoints;
  const auto c = std::find_if(list.begin(), list.end(), [&](const CheckpointInfo& i) { return i.step == step; });
  if (c == list.end()) return std::nullopt;
  return c->bytes;
}

std::optional<std::string> JobStore::model(const std::string& id) const {
  const auto bytes = model_bytes(id);
  return bytes ? job_files_.model(id, *bytes) : std::nullopt;
}

std::optional<StoredFile> JobStore::model_pieces(const std::string& id) const {
  const auto bytes = model_bytes(id);
  return bytes ? job_files_.model_pieces(id, *bytes) : std::nullopt;
}

std::optional<std::string> JobStore::checkpoint_file(const std::string& id, int64_t step) const {
  const auto bytes = checkpoint_bytes(id, step);
  return bytes ? job_files_.checkpoint(id, step, *bytes) : std::nullopt;
}

std::optional<StoredFile> JobStore::checkpoint_pieces(const std::string& id, int64_t step) const {
  const auto bytes = checkpoint_bytes(id, step);
  return bytes ? job_files_.checkpoint_pieces(id, step, *bytes) : std::nullopt;
}

std::optional<JobRecord> JobStore::get(const std::string& id) const {
  MutexLock lock(mutex_);
  const auto it = jobs_.find(id);
  if (it == jobs_.end()) return std::nullopt;
  JobRecord record = it->second;
  show_durable_state(record);
  return record;
}

std::vector<JobRecord> JobStore::list() const {
  MutexLock lock(mutex_);
  std::vector<JobRecord> out;
  for (const auto& id : order_) {
    JobRecord r = jobs_.at(id);
    r.steps.clear();
    r.epoch_history.clear();
    show_durable_state(r);
    out.push_back(std::move(r));
  }
  return out;
}

void JobStore::set_node_lookup(NodeLookup lookup) {
  MutexLock lock(mutex_);
  node_lookup_ = std::move(lookup);
}

bool JobStore::subscribe(const std::string& id, uint64_t after, const std::shared_ptr<EventSubscriber>& subscriber) {
  {
    MutexLock lock(mutex_);
    if (!id.empty() && jobs_.count(id) == 0) return false;
  }
  events_.subscribe(id, after, subscriber);
  return true;
}

void JobStore::set_nodes(std::vector<NodeView> nodes) {
  MutexLock lock(mutex_);
  nodes_ = std::move(nodes);
}

std::vector<NodeView> JobStore::nodes() const {
  MutexLock lock(mutex_);
  return nodes_;
}

}  // namespace pstrain
