#include "coordinator/study/study_store.h"

#include <algorithm>
#include <boost/json.hpp>

#include "common/base/error.h"
#include "common/base/json_parse.h"
#include "common/base/log.h"

namespace pstrain {
namespace json = boost::json;
namespace {

constexpr const char* kPrefix = "study/";

const std::vector<std::pair<TrialState, const char*>> kTrialStates = {
    {TrialState::kPending, "PENDING"},     {TrialState::kRunning, "RUNNING"}, {TrialState::kPaused, "PAUSED"},
    {TrialState::kCompleted, "COMPLETED"}, {TrialState::kStopped, "STOPPED"}, {TrialState::kFailed, "FAILED"},
    {TrialState::kCancelled, "CANCELLED"}};

}  // namespace

const char* study_state_name(StudyState s) {
  switch (s) {
    case StudyState::kRunning: return "RUNNING";
    case StudyState::kSucceeded: return "SUCCEEDED";
    case StudyState::kFailed: return "FAILED";
    case StudyState::kCancelled: return "CANCELLED";
  }
  return "?";
}

std::optional<StudyState> parse_study_state(const std::string& name) {
  for (StudyState s : {StudyState::kRunning, StudyState::kSucceeded, StudyState::kFailed, StudyState::kCancelled}) {
    if (name == study_state_name(s)) return s;
  }
  return std::nullopt;
}

const char* trial_state_name(TrialState s) {
  for (const auto& [state, name] : kTrialStates) {
    if (state == s) return name;
  }
  return "?";
}

std::string study_to_json(const StudyRecord& study) {
  json::array trials;
  for (const auto& t : study.trials) {
    json::array rungs;
    for (const auto& r : t.rungs) {
      json::object o{{"epochs", r.epochs}, {"job", r.job}};
      if (r.metric) o["metric"] = *r.metric;
      if (r.node_seconds_before > 0) o["node_seconds_before"] = r.node_seconds_before;
      if (r.worker_seconds_before > 0) o["worker_seconds_before"] = r.worker_seconds_before;
      rungs.push_back(std::move(o));
    }
    json::object o{{"number", t.number},
                   {"state", trial_state_name(t.state)},
                   {"rungs", std::move(rungs)},
                   {"node_seconds", t.node_seconds},
                   {"worker_seconds", t.worker_seconds}};
    if (!t.reason.empty()) o["reason"] = t.reason;
    trials.push_back(std::move(o));
  }
  json::object o{{"id", study.id},
                 {"state", study_state_name(study.state)},
                 {"created_ms", study.created_ms},
                 {"finished_ms", study.finished_ms},
                 {"request", parse_json(study_spec_to_json(study.spec))},
                 {"trials", std::move(trials)}};
  if (!study.reason.empty()) o["reason"] = study.reason;
  return json::serialize(o);
}

std::optional<StudyRecord> study_from_json(const std::string& text) {
  try {
    const json::object o = parse_json(text).as_object();
    StudyRecord s;
    s.id = std::string(o.at("id").as_string());
    const auto state = parse_study_state(std::string(o.at("state").as_string()));
    if (!state) return std::nullopt;
    s.state = *state;
    if (const auto* r = o.if_contains("reason")) s.reason = std::string(r->as_string());
    s.created_ms = o.at("created_ms").to_number<int64_t>();
    s.finished_ms = o.at("finished_ms").to_number<int64_t>();
    s.spec = parse_study_spec(json::serialize(o.at("request")), [](const std::string&) {});
    for (const auto& tv : o.at("trials").as_array()) {
      const auto& to = tv.as_object();
      TrialRecord t;
      t.number = to.at("number").to_number<int64_t>();
      const std::string name(to.at("state").as_string());
      bool known = false;
      for (const auto& [ts, n] : kTrialStates) {
        if (name == n) t.state = ts, known = true;
      }
      if (!known) return std::nullopt;
      if (const auto* r = to.if_contains("reason")) t.reason = std::string(r->as_string());
      t.node_seconds = to.at("node_seconds").to_number<double>();
      t.worker_seconds = to.at("worker_seconds").to_number<double>();
      for (const auto& rv : to.at("rungs").as_array()) {
        const auto& ro = rv.as_object();
        TrialRung r{ro.at("epochs").to_number<int64_t>(), std::string(ro.at("job").as_string()), std::nullopt};
        if (const auto* m = ro.if_contains("metric")) r.metric = m->to_number<double>();
        if (const auto* b = ro.if_contains("node_seconds_before")) r.node_seconds_before = b->to_number<double>();
        if (const auto* b = ro.if_contains("worker_seconds_before")) r.worker_seconds_before = b->to_number<double>();
        t.rungs.push_back(std::move(r));
      }
      s.trials.push_back(std::move(t));
    }
    return s;
  } catch (const std::exception& e) {
    PSLOG(kError) << "study store: unreadable study record: " << e.what();
    return std::nullopt;
  }
}

std::vector<StudyRecord> StudyStore::load() {
  std::vector<StudyRecord> loaded;
  for (const auto& entry : kv_.scan(kPrefix)) {
    if (entry.corrupt) {
      PSLOG(kError) << "study store: " << entry.key << " failed its checksum; skipped";
      continue;
    }
    auto study = study_from_json(entry.value);
    if (!study) continue;
    loaded.push_back(*study);
  }
  // Creation order: study-<n> by n.
  auto number = [](const std::string& id) { return std::stoll(id.substr(id.rfind('-') + 1)); };
  std::sort(loaded.begin(), loaded.end(), [&](const StudyRecord& a, const StudyRecord& b) { return number(a.id) < number(b.id); });
  MutexLock lock(mutex_);
  for (const auto& s : loaded) {
    if (!studies_.count(s.id)) order_.push_back(s.id);
    studies_[s.id] = s;
  }
  return loaded;
}

void StudyStore::persist(const StudyRecord& study) {
  writer_.enqueue({KvStore::Write{kPrefix + study.id, study_to_json(study)}}, true);
}

void StudyStore::add(StudyRecord study) {
  MutexLock lock(mutex_);
  persist(study);
  order_.push_back(study.id);
  studies_[study.id] = std::move(study);
}

bool StudyStore::update(const std::string& id, const std::function<void(StudyRecord&)>& change, bool durable) {
  MutexLock lock(mutex_);
  const auto it = studies_.find(id);
  if (it == studies_.end()) return false;
  change(it->second);
  if (durable) persist(it->second);
  return true;
}

std::optional<StudyRecord> StudyStore::get(const std::string& id) const {
  MutexLock lock(mutex_);
  const auto it = studies_.find(id);
  if (it == studies_.end()) return std::nullopt;
  return it->second;
}

std::vector<StudyRecord> StudyStore::list() const {
  MutexLock lock(mutex_);
  std::vector<StudyRecord> out;
  for (const auto& id : order_) out.push_back(studies_.at(id));
  return out;
}

}  // namespace pstrain
