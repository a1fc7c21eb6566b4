#include "coordinator/job_store.h"

#include <chrono>
#include <cstdio>

#include "common/log.h"
#include "coordinator/job_json.h"

namespace pstrain {
namespace {

// Keys: job/<id>/record, job/<id>/step/<seq>, job/<id>/epoch/<n>, job/<id>/model.
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
        by_id[id] = std::move(*record);
        by_id[id].steps = std::move(steps);
        by_id[id].epoch_history = std::move(epochs);
      }
    } else if (kind.rfind("step/", 0) == 0) {
      if (auto m = step_from_json(entry.value)) by_id[id].steps.push_back(*m);
    } else if (kind.rfind("epoch/", 0) == 0) {
      if (auto m = epoch_from_json(entry.value)) by_id[id].epoch_history.push_back(*m);
    }
  }
  std::lock_guard lock(mutex_);
  for (auto& [id, record] : by_id) {
    if (record.id.empty()) continue;  // metrics without a record: ignore
    loaded.push_back(record);
    order_.push_back(id);
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

void JobStore::persist_record(const JobRecord& record, bool state_changed) {
  if (kv_ == nullptr) {
    durable_state_[record.id] = record.state;
    return;
  }
  std::function<void()> applied;
  if (state_changed) {
    applied = [this, id = record.id, state = record.state] {
      std::lock_guard lock(mutex_);
      durable_state_[id] = state;
    };
  }
  writer_.enqueue({{"job/" + record.id + "/record", record_to_json(record)}}, state_changed, std::move(applied));
}

void JobStore::show_durable_state(JobRecord& record) const {
  if (const auto it = durable_state_.find(record.id); it != durable_state_.end()) record.state = it->second;
}

void JobStore::add(JobRecord record) {
  std::lock_guard lock(mutex_);
  persist_record(record, true);
  if (jobs_.count(record.id) == 0) order_.push_back(record.id);
  jobs_[record.id] = std::move(record);
}

bool JobStore::update(const std::string& id, const std::function<void(JobRecord&)>& change) {
  std::lock_guard lock(mutex_);
  const auto it = jobs_.find(id);
  if (it == jobs_.end()) return false;
  const JobState before = it->second.state;
  change(it->second);
  // State changes are made durable at once; progress can lose its last moments in a crash.
  persist_record(it->second, it->second.state != before);
  return true;
}

void JobStore::append_step(const std::string& id, const StepMetric& metric) {
  std::lock_guard lock(mutex_);
  const auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  if (kv_ != nullptr) writer_.enqueue({{"job/" + id + "/step/" + padded(it->second.steps.size()), step_to_json(metric)}}, false);
  it->second.steps.push_back(metric);
}

void JobStore::append_epoch(const std::string& id, const EpochMetric& metric) {
  std::lock_guard lock(mutex_);
  const auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  if (kv_ != nullptr) writer_.enqueue({{"job/" + id + "/epoch/" + padded(metric.epoch), epoch_to_json(metric)}}, false);
  it->second.epoch_history.push_back(metric);
}

void JobStore::set_model(const std::string& id, std::vector<std::string> pieces) {
  std::lock_guard lock(mutex_);
  const auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  it->second.has_model = true;
  it->second.model_bytes = 0;
  for (const std::string& piece : pieces) it->second.model_bytes += static_cast<int64_t>(piece.size());
  if (kv_ == nullptr) {
    models_[id] = std::move(pieces);
    return;
  }
  // The pieces, one call each (the writer then batches a few at a time: no batch the size of the
  // model), moved into its queue: once written, no copy of the model is left in memory. Then the
  // record that says the model exists, synced: after a crash in between, the pieces are there
  // but no record claims them. model() reads pieces until one is missing (the one after the
  // last is deleted, whatever was there) and checks the total against the record's model_bytes.
  for (size_t i = 0; i < pieces.size(); ++i) {
    writer_.enqueue({{"model/" + id + "/" + padded(i), std::move(pieces[i])}}, false);
  }
  writer_.enqueue({{"model/" + id + "/" + padded(pieces.size()), std::nullopt},
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
  std::lock_guard lock(mutex_);
  const auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  CheckpointInfo info = given;
  info.bytes = 0;
  for (const std::string& piece : pieces) info.bytes += static_cast<int64_t>(piece.size());
  std::vector<CheckpointInfo>& list = it->second.checkpoints;
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
  if (kv_ == nullptr) {
    checkpoint_files_[{id, info.step}] = std::move(pieces);
    for (int64_t step : dropped) checkpoint_files_.erase({id, step});
    return;
  }
  // As in set_model: the pieces one by one, then the record that lists the checkpoint (synced).
  const std::string prefix = checkpoint_prefix(id, info.step);
  const size_t count = pieces.size();
  for (size_t i = 0; i < count; ++i) writer_.enqueue({{prefix + padded(i), std::move(pieces[i])}}, false);
  writer_.enqueue({{prefix + padded(count), std::nullopt}, {"job/" + id + "/record", record_to_json(it->second)}},
                  true);
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

void JobStore::set_nodes(std::vector<NodeView> nodes) {
  std::lock_guard lock(mutex_);
  nodes_ = std::move(nodes);
}

std::vector<NodeView> JobStore::nodes() const {
  std::lock_guard lock(mutex_);
  return nodes_;
}

}  // namespace pstrain
