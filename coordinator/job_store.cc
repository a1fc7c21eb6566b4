#include "coordinator/job_store.h"

#include <chrono>
#include <cstdio>
#include <future>
#include <memory>

#include "common/cross_thread.h"
#include "common/log.h"
#include "coordinator/job_events.h"
#include "coordinator/job_json.h"

namespace pstrain {
namespace {

// Keys: job/<id>/record, job/<id>/step/<seq>, job/<id>/epoch/<n>, job/<id>/event/<seq>,
// job/<id>/model, job/<id>/cut/<version> (async positions), events/<seq> (the global sequence of state events).
// Sequence numbers are zero-padded so key order is numeric order.
std::string padded(uint64_t n) { return key_number(n, 12); }

}  // namespace

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::vector<JobRecord> JobStore::load() {
  std::vector<JobRecord> loaded;
  if (kv_ == nullptr) return loaded;
  std::map<std::string, JobRecord> by_id;
  std::map<std::string, std::vector<std::pair<uint64_t, JobEventData>>> events;
  for (const auto& entry : kv_->scan("job/")) {
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
    } else if (kind.rfind("step/", 0) == 0) {
      if (auto m = step_from_json(entry.value)) by_id[id].steps.push_back(*m);
    } else if (kind.rfind("epoch/", 0) == 0) {
      if (auto m = epoch_from_json(entry.value)) by_id[id].epoch_history.push_back(*m);
    } else if (kind.rfind("cut/", 0) == 0) {
      if (auto p = positions_from_json(entry.value)) by_id[id].async_cuts[std::stoull(kind.substr(4))] = std::move(*p);
    } else if (kind.rfind("event/", 0) == 0) {
      if (auto e = event_from_stored(entry.value)) events[id].emplace_back(std::stoull(kind.substr(6)), std::move(*e));
    }
  }
  std::vector<std::pair<uint64_t, JobEventData>> global;
  for (const auto& entry : kv_->scan("events/")) {
    if (entry.corrupt) continue;
    if (auto e = event_from_stored(entry.value)) global.emplace_back(std::stoull(entry.key.substr(7)), std::move(*e));
  }
  // Numbered as stored; a gap (an entry that failed its checksum) becomes a note, so later numbers
  // stay what clients saw.
  auto fill = [this](EventLog& log, const std::string& job, std::vector<std::pair<uint64_t, JobEventData>>& list) {
    for (auto& [seq, e] : list) {
      while (log.frames.size() + 1 < seq) {
        const JobEventData lost{"note", "{\"job\":\"" + job + "\",\"time_ms\":0,\"text\":\"(an event lost in storage)\"}"};
        log.frames.push_back(std::make_shared<const std::string>(event_frame(log.frames.size() + 1, lost)));
        log.terminal.push_back(false);
      }
      if (log.frames.size() + 1 != seq) continue;  // (a duplicate: cannot happen with ordered keys)
      log.frames.push_back(std::make_shared<const std::string>(event_frame(seq, e)));
      log.terminal.push_back(e.terminal);
      if (e.terminal) log.ended = true;
    }
    log.visible = log.frames.size();
  };
  std::lock_guard lock(mutex_);
  fill(global_, "", global);
  global_.ended = false;
  for (auto& [id, list] : events) {
    if (by_id.count(id) != 0 && !by_id[id].id.empty()) fill(logs_[id], id, list);
  }
  for (auto& [id, record] : by_id) {
    if (record.id.empty()) continue;  // metrics without a record: ignore
    loaded.push_back(record);
    order_.push_back(id);
    if (record.finished()) logs_[id].ended = true;  // (also a job stored before events were)
    durable_state_[id] = record.state;
    jobs_[id] = std::move(record);
  }
  std::sort(order_.begin(), order_.end(), [this](const std::string& a, const std::string& b) {
    return jobs_[a].submitted_ms != jobs_[b].submitted_ms ? jobs_[a].submitted_ms < jobs_[b].submitted_ms : a < b;
  });
  std::sort(loaded.begin(), loaded.end(), [](const JobRecord& a, const JobRecord& b) {
    return a.submitted_ms != b.submitted_ms ? a.submitted_ms < b.submitted_ms : a.id < b.id;
  });
  return loaded;
}

std::pair<uint64_t, uint64_t> JobStore::record_events(const std::string& id, const std::vector<JobEventData>& events,
                                                     std::vector<KvStore::Write>& writes) {
  EventLog& log = logs_[id];
  uint64_t global_upto = 0;
  for (const JobEventData& e : events) {
    const uint64_t seq = log.frames.size() + 1;
    log.frames.push_back(std::make_shared<const std::string>(event_frame(seq, e)));
    log.terminal.push_back(e.terminal);
    ++event_stats_.events;
    if (kv_ != nullptr) writes.push_back({"job/" + id + "/event/" + padded(seq), event_to_stored(e)});
    if (e.type == "state") {
      global_upto = global_.frames.size() + 1;
      global_.frames.push_back(std::make_shared<const std::string>(event_frame(global_upto, e)));
      global_.terminal.push_back(false);  // the global stream never ends
      if (kv_ != nullptr) writes.push_back({"events/" + padded(global_upto), event_to_stored(e)});
    }
  }
  return {events.empty() ? 0 : log.frames.size(), global_upto};
}

void JobStore::publish_upto(EventLog& log, uint64_t upto) {
  upto = std::min<uint64_t>(upto, log.frames.size());
  while (log.visible < upto) {
    const size_t i = log.visible++;
    const bool last = log.terminal[i];
    auto& subs = log.subscribers;
    for (auto it = subs.begin(); it != subs.end();) {
      const auto subscriber = it->lock();
      if (subscriber && subscriber->push(log.frames[i], last)) {
        ++it;
      } else {
        it = subs.erase(it);
      }
    }
    if (last) {
      log.ended = true;
      subs.clear();
    }
  }
}

void JobStore::show_events(const std::string& id, uint64_t job_upto, uint64_t global_upto) {
  if (job_upto != 0) {
    if (const auto it = logs_.find(id); it != logs_.end()) publish_upto(it->second, job_upto);
  }
  if (global_upto != 0) publish_upto(global_, global_upto);
}

void JobStore::enqueue(const std::string& id, std::vector<KvStore::Write> writes, bool sync,
                       std::pair<uint64_t, uint64_t> upto, std::optional<JobState> state) {
  if (kv_ == nullptr) {
    if (state) durable_state_[id] = *state;
    show_events(id, upto.first, upto.second);
    return;
  }
  std::function<void()> applied;
  if (state || upto.first != 0 || upto.second != 0) {
    applied = [this, id, state, upto] {
      std::lock_guard lock(mutex_);
      if (state) durable_state_[id] = *state;
      show_events(id, upto.first, upto.second);
    };
  }
  writer_.enqueue(std::move(writes), sync, std::move(applied));
}

void JobStore::persist_record(const JobRecord& record, bool state_changed, const std::vector<JobEventData>& events) {
  std::vector<KvStore::Write> writes;
  if (kv_ != nullptr) writes.push_back({"job/" + record.id + "/record", record_to_json(record)});
  const auto upto = record_events(record.id, events, writes);
  enqueue(record.id, std::move(writes), state_changed, upto,
          state_changed ? std::optional<JobState>(record.state) : std::nullopt);
}

void JobStore::show_durable_state(JobRecord& record) const {
  if (const auto it = durable_state_.find(record.id); it != durable_state_.end()) record.state = it->second;
}

void JobStore::add(JobRecord record) {
  std::lock_guard lock(mutex_);
  persist_record(record, true, {state_event(record, record.submitted_ms != 0 ? record.submitted_ms : now_ms())});
  if (jobs_.count(record.id) == 0) order_.push_back(record.id);
  jobs_[record.id] = std::move(record);
}

bool JobStore::update(const std::string& id, const std::function<void(JobRecord&)>& change) {
  std::lock_guard lock(mutex_);
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
  std::lock_guard lock(mutex_);
  return warning_counts_;
}

void JobStore::append_step(const std::string& id, const StepMetric& metric) {
  std::lock_guard lock(mutex_);
  const auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  std::vector<KvStore::Write> writes;
  if (kv_ != nullptr) writes.push_back({"job/" + id + "/step/" + padded(it->second.steps.size()), step_to_json(metric)});
  const auto upto =
      record_events(id, {progress_event(id, metric, it->second.steps_done, it->second.total_steps)}, writes);
  enqueue(id, std::move(writes), false, upto, std::nullopt);
  it->second.steps.push_back(metric);
}

void JobStore::append_epoch(const std::string& id, const EpochMetric& metric) {
  std::lock_guard lock(mutex_);
  const auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  std::vector<KvStore::Write> writes;
  if (kv_ != nullptr) writes.push_back({"job/" + id + "/epoch/" + padded(metric.epoch), epoch_to_json(metric)});
  const auto upto = record_events(id, {epoch_event(id, metric)}, writes);
  enqueue(id, std::move(writes), false, upto, std::nullopt);
  it->second.epoch_history.push_back(metric);
}

kj::Promise<void> JobStore::set_async_cut(const std::string& id, uint64_t version, std::vector<WorkerPosition> positions,
                                          const std::vector<uint64_t>& dropped) {
  std::lock_guard lock(mutex_);
  const auto it = jobs_.find(id);
  if (it == jobs_.end()) return kj::READY_NOW;
  std::vector<KvStore::Write> writes;
  if (kv_ != nullptr) writes.push_back({"job/" + id + "/cut/" + padded(version), positions_to_json(positions)});
  it->second.async_cuts[version] = std::move(positions);
  for (uint64_t v : dropped) {
    if (it->second.async_cuts.erase(v) != 0 && kv_ != nullptr) writes.push_back({"job/" + id + "/cut/" + padded(v), std::nullopt});
  }
  if (kv_ == nullptr) return kj::READY_NOW;
  auto paf = make_cross_thread_paf<void>();
  writer_.enqueue(std::move(writes), /*sync=*/false, [fulfiller = paf.fulfiller] { fulfiller->fulfill(); });
  return kj::mv(paf.promise);
}

void JobStore::erase_async_cuts(const std::string& id) {
  std::lock_guard lock(mutex_);
  const auto it = jobs_.find(id);
  if (it == jobs_.end() || it->second.async_cuts.empty()) return;
  std::vector<KvStore::Write> writes;
  for (const auto& [v, positions] : it->second.async_cuts) {
    if (kv_ != nullptr) writes.push_back({"job/" + id + "/cut/" + padded(v), std::nullopt});
  }
  it->second.async_cuts.clear();
  enqueue(id, std::move(writes), false, {0, 0}, std::nullopt);
}

void JobStore::set_model(const std::string& id, std::vector<std::string> pieces) {
  int64_t bytes = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    bytes += static_cast<int64_t>(pieces[i].size());
    write_model_piece(id, i, std::move(pieces[i]));
  }
  set_model(id, pieces.size(), bytes);
}

void JobStore::write_model_piece(const std::string& id, size_t index, std::string piece, std::function<void()> written) {
  if (kv_ == nullptr) {
    {
      std::lock_guard lock(mutex_);
      auto& staged = staged_models_[id];
      if (staged.size() <= index) staged.resize(index + 1);
      staged[index] = std::move(piece);
    }
    if (written) written();
    return;
  }
  // One call per piece (the writer then batches a few at a time: no batch the size of the model),
  // moved into its queue: once written, no copy of the piece is left in memory.
  writer_.enqueue({{"model/" + id + "/" + padded(index), std::move(piece)}}, false, std::move(written));
}

void JobStore::set_model(const std::string& id, size_t pieces, int64_t bytes) {
  std::lock_guard lock(mutex_);
  const auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  it->second.has_model = true;
  it->second.model_bytes = bytes;
  if (kv_ == nullptr) {
    std::vector<std::string> staged = std::move(staged_models_[id]);
    staged_models_.erase(id);
    staged.resize(pieces);
    models_[id] = std::move(staged);
    return;
  }
  // After the pieces, the record that says the model exists, synced: after a crash in between,
  // the pieces are there but no record claims them. model() reads pieces until one is missing
  // (the one after the last is deleted, whatever was there) and checks the total against the
  // record's model_bytes.
  writer_.enqueue({{"model/" + id + "/" + padded(pieces), std::nullopt},
                   {"job/" + id + "/record", record_to_json(it->second)}},
                  true);
}

namespace {
std::string checkpoint_prefix(const std::string& id, int64_t step) {
  return "checkpoint/" + id + "/" + key_number(static_cast<uint64_t>(step), 16) + "/";
}
}  // namespace

void JobStore::add_checkpoint(const std::string& id, const CheckpointInfo& given, std::vector<std::string> pieces,
                              size_t keep) {
  CheckpointInfo info = given;
  info.bytes = 0;
  const size_t count = pieces.size();
  for (size_t i = 0; i < count; ++i) {
    info.bytes += static_cast<int64_t>(pieces[i].size());
    write_checkpoint_piece(id, info.step, i, std::move(pieces[i]));
  }
  add_checkpoint(id, info, count, keep);
}

void JobStore::write_checkpoint_piece(const std::string& id, int64_t step, size_t index, std::string piece) {
  if (kv_ == nullptr) {
    std::lock_guard lock(mutex_);
    auto& staged = staged_checkpoints_[{id, step}];
    if (staged.size() <= index) staged.resize(index + 1);
    staged[index] = std::move(piece);
    return;
  }
  std::promise<void> written;
  std::future<void> done = written.get_future();
  writer_.enqueue({{checkpoint_prefix(id, step) + padded(index), std::move(piece)}}, false,
                  [&written] { written.set_value(); });
  done.wait();
}

void JobStore::add_checkpoint(const std::string& id, const CheckpointInfo& info, size_t count, size_t keep) {
  std::lock_guard lock(mutex_);
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
  for (const CheckpointInfo& c : list) intermediate += c.final ? 0 : 1;
  for (auto c = list.begin(); c != list.end() && intermediate > keep;) {
    if (c->final) {
      ++c;
      continue;
    }
    dropped.push_back(c->step);
    c = list.erase(c);
    --intermediate;
  }
  std::vector<KvStore::Write> event_writes;
  std::vector<JobEventData> events;
  if (!known) events.push_back(checkpoint_event(id, info, info.time_ms != 0 ? info.time_ms : now_ms()));
  const auto upto = record_events(id, events, event_writes);
  if (kv_ == nullptr) {
    std::vector<std::string> pieces = std::move(staged_checkpoints_[{id, info.step}]);
    staged_checkpoints_.erase({id, info.step});
    pieces.resize(count);
    checkpoint_files_[{id, info.step}] = std::move(pieces);
    for (int64_t step : dropped) checkpoint_files_.erase({id, step});
    show_events(id, upto.first, upto.second);
    return;
  }
  // As in set_model: the pieces are written (write_checkpoint_piece), then the record that lists
  // the checkpoint (synced), with the deletion of the piece after the last.
  const std::string prefix = checkpoint_prefix(id, info.step);
  std::vector<KvStore::Write> writes = {{prefix + padded(count), std::nullopt},
                                        {"job/" + id + "/record", record_to_json(it->second)}};
  for (auto& w : event_writes) writes.push_back(std::move(w));
  enqueue(id, std::move(writes), true, upto, std::nullopt);
  for (int64_t step : dropped) {
    std::vector<KvStore::Write> deletes;
    for (std::string& key : kv_->keys(checkpoint_prefix(id, step))) deletes.push_back({std::move(key), std::nullopt});
    if (!deletes.empty()) writer_.enqueue(std::move(deletes), false);
  }
}

std::optional<std::string> JobStore::read_pieces(const std::string& prefix, int64_t bytes) const {
  std::string out, piece;
  out.reserve(static_cast<size_t>(std::max<int64_t>(bytes, 0)));
  for (size_t i = 0; kv_->get(prefix + padded(i), &piece).ok(); ++i) out += piece;
  if (static_cast<int64_t>(out.size()) != bytes) return std::nullopt;
  return out;
}

std::optional<std::string> JobStore::checkpoint_file(const std::string& id, int64_t step) const {
  int64_t bytes = 0;
  {
    std::lock_guard lock(mutex_);
    const auto job = jobs_.find(id);
    if (job == jobs_.end()) return std::nullopt;
    const auto& list = job->second.checkpoints;
    const auto c = std::find_if(list.begin(), list.end(), [&](const CheckpointInfo& i) { return i.step == step; });
    if (c == list.end()) return std::nullopt;
    bytes = c->bytes;
    if (const auto it = checkpoint_files_.find({id, step}); it != checkpoint_files_.end()) {
      std::string out;
      for (const std::string& piece : it->second) out += piece;
      return out;
    }
  }
  if (kv_ == nullptr) return std::nullopt;
  writer_.flush();
  return read_pieces(checkpoint_prefix(id, step), bytes);
}

namespace {
// Pieces kept in memory (a store without a disk), shared with the reader.
StoredFile memory_file(std::vector<std::string> pieces) {
  auto shared = std::make_shared<const std::vector<std::string>>(std::move(pieces));
  StoredFile f;
  for (const std::string& piece : *shared) f.bytes += static_cast<int64_t>(piece.size());
  f.read_piece = [shared](size_t i) -> std::optional<std::string> {
    if (i >= shared->size()) return std::nullopt;
    return (*shared)[i];
  };
  return f;
}
}  // namespace

std::optional<StoredFile> JobStore::checkpoint_pieces(const std::string& id, int64_t step) const {
  StoredFile f;
  {
    std::lock_guard lock(mutex_);
    const auto job = jobs_.find(id);
    if (job == jobs_.end()) return std::nullopt;
    const auto& list = job->second.checkpoints;
    const auto c = std::find_if(list.begin(), list.end(), [&](const CheckpointInfo& i) { return i.step == step; });
    if (c == list.end()) return std::nullopt;
    f.bytes = c->bytes;
    if (const auto it = checkpoint_files_.find({id, step}); it != checkpoint_files_.end()) return memory_file(it->second);
  }
  if (kv_ == nullptr) return std::nullopt;
  writer_.flush();
  f.read_piece = [kv = kv_, prefix = checkpoint_prefix(id, step)](size_t i) -> std::optional<std::string> {
    std::string piece;
    if (!kv->get(prefix + padded(i), &piece).ok()) return std::nullopt;
    return piece;
  };
  return f;
}

std::optional<StoredFile> JobStore::model_pieces(const std::string& id) const {
  StoredFile f;
  {
    std::lock_guard lock(mutex_);
    const auto job = jobs_.find(id);
    if (job == jobs_.end() || !job->second.has_model) return std::nullopt;
    f.bytes = job->second.model_bytes;
    if (const auto it = models_.find(id); it != models_.end()) return memory_file(it->second);
  }
  if (kv_ == nullptr) return std::nullopt;
  writer_.flush();  // a model of this run may still be on its way to the disk
  std::string first;
  if (!kv_->get("model/" + id + "/" + padded(0), &first).ok()) {
    // Models stored before they were cut into pieces: one value.
    std::string whole;
    if (!kv_->get("job/" + id + "/model", &whole).ok()) return std::nullopt;
    return memory_file({std::move(whole)});
  }
  f.read_piece = [kv = kv_, id](size_t i) -> std::optional<std::string> {
    std::string piece;
    if (!kv->get("model/" + id + "/" + padded(i), &piece).ok()) return std::nullopt;
    return piece;
  };
  return f;
}

std::optional<JobRecord> JobStore::get(const std::string& id) const {
  std::lock_guard lock(mutex_);
  const auto it = jobs_.find(id);
  if (it == jobs_.end()) return std::nullopt;
  JobRecord record = it->second;
  show_durable_state(record);
  return record;
}

std::vector<JobRecord> JobStore::list() const {
  std::lock_guard lock(mutex_);
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

std::optional<std::string> JobStore::model(const std::string& id) const {
  int64_t bytes = 0;
  {
    std::lock_guard lock(mutex_);
    const auto job = jobs_.find(id);
    if (job == jobs_.end() || !job->second.has_model) return std::nullopt;
    bytes = job->second.model_bytes;
    if (const auto it = models_.find(id); it != models_.end()) {
      std::string out;
      for (const std::string& piece : it->second) out += piece;
      return out;
    }
  }
  if (kv_ == nullptr) return std::nullopt;
  writer_.flush();  // a model of this run may still be on its way to the disk
  std::string out, piece;
  out.reserve(static_cast<size_t>(bytes));
  for (size_t i = 0; kv_->get("model/" + id + "/" + padded(i), &piece).ok(); ++i) out += piece;
  // Models stored before they were cut into pieces: one value.
  if (out.empty() && !kv_->get("job/" + id + "/model", &out).ok()) return std::nullopt;
  if (static_cast<int64_t>(out.size()) != bytes) return std::nullopt;
  return out;
}

void JobStore::set_node_lookup(NodeLookup lookup) {
  std::lock_guard lock(mutex_);
  node_lookup_ = std::move(lookup);
}

bool JobStore::subscribe(const std::string& id, uint64_t after, const std::shared_ptr<EventSubscriber>& subscriber) {
  std::lock_guard lock(mutex_);
  EventLog* log = &global_;
  if (!id.empty()) {
    if (jobs_.count(id) == 0) return false;
    log = &logs_[id];
  }
  std::vector<EventFrame> replay;
  for (uint64_t i = std::min<uint64_t>(after, log->visible); i < log->visible; ++i) replay.push_back(log->frames[i]);
  subscriber->replay(std::move(replay), log->ended);
  if (!log->ended) {
    std::erase_if(log->subscribers, [](const std::weak_ptr<EventSubscriber>& s) { return s.expired(); });
    log->subscribers.push_back(subscriber);
  }
  return true;
}

size_t JobStore::event_count(const std::string& id) const {
  std::lock_guard lock(mutex_);
  const auto it = logs_.find(id);
  return it == logs_.end() ? 0 : it->second.frames.size();
}

void JobStore::set_nodes(std::vector<NodeView> nodes) {
  std::lock_guard lock(mutex_);
  nodes_ = std::move(nodes);
}

std::vector<NodeView> JobStore::nodes() const {
  std::lock_guard lock(mutex_);
  return nodes_;
}

}  // namespace pstrain
