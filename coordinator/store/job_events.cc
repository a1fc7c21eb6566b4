#include "coordinator/store/job_events.h"

#include <boost/json.hpp>

#include <algorithm>

#include "common/base/json_parse.h"
#include "common/base/json_text.h"
#include "coordinator/store/job_codec.h"

namespace pstrain {
namespace json = boost::json;

namespace {

JobEventData make(const std::string& type, const std::string& job, int64_t time_ms, json::object fields) {
  json::object data{{"job", job}, {"time_ms", time_ms}};
  for (auto& [key, value] : fields) data[key] = std::move(value);
  return {type, to_json_text(data), false};
}

void add_node_events(std::vector<JobEventData>& out, const std::vector<uint32_t>& before,
                     const std::vector<uint32_t>& after, const char* role, const std::string& job, int64_t time_ms,
                     const NodeLookup& lookup) {
  auto has = [](const std::vector<uint32_t>& v, uint32_t id) { return std::find(v.begin(), v.end(), id) != v.end(); };
  auto event = [&](uint32_t id, const char* change) {
    std::string name;
    if (lookup) {
      if (const auto view = lookup(id)) name = view->name;
    }
    out.push_back(make("node", job, time_ms, {{"node", id}, {"role", role}, {"name", name}, {"change", change}}));
  };
  for (uint32_t id : before) {
    if (!has(after, id)) event(id, "lost");
  }
  for (uint32_t id : after) {
    if (!has(before, id)) event(id, "joined");
  }
}

}  // namespace

RecordDigest digest(const JobRecord& r) {
  return {r.state, r.reason, r.notes.size(), r.warnings.size(), r.recoveries, r.last_backup_step, r.workers, r.servers};
}

JobEventData state_event(const JobRecord& r, int64_t time_ms) {
  json::object fields{{"state", job_state_name(r.state)}, {"reason", r.reason}};
  if (!r.study.empty()) {  // a study's trial: the study's followers find its trials' changes here
    fields["study"] = r.study;
    fields["trial"] = r.trial;
  }
  JobEventData e = make("state", r.id, time_ms, std::move(fields));
  e.terminal = r.finished();
  return e;
}

std::vector<JobEventData> change_events(const RecordDigest& before, const JobRecord& after, int64_t time_ms,
                                        const NodeLookup& lookup) {
  std::vector<JobEventData> out;
  add_node_events(out, before.workers, after.workers, "worker", after.id, time_ms, lookup);
  add_node_events(out, before.servers, after.servers, "server", after.id, time_ms, lookup);
  if (after.last_backup_step && after.last_backup_step != before.last_backup_step) {
    out.push_back(make("backup", after.id, time_ms, {{"step", *after.last_backup_step}}));
  }
  const size_t new_notes = after.notes.size() > before.notes ? after.notes.size() - before.notes : 0;
  if (after.recoveries > before.recoveries) {
    // What happened: the note the recovery left (then not a note event too), else why the job
    // was recovering.
    std::string detail = new_notes > 0 ? after.notes.back() : before.reason;
    out.push_back(make("recovery", after.id, time_ms,
                       {{"recoveries", after.recoveries},
                        {"replayed_steps", after.replayed_steps.empty() ? int64_t{0} : after.replayed_steps.back()},
                        {"detail", detail}}));
  }
  const size_t notes_end = after.recoveries > before.recoveries && new_notes > 0 ? after.notes.size() - 1 : after.notes.size();
  for (size_t i = after.notes.size() - new_notes; i < notes_end; ++i) {
    out.push_back(make("note", after.id, time_ms, {{"text", after.notes[i]}}));
  }
  for (size_t i = std::min(before.warnings, after.warnings.size()); i < after.warnings.size(); ++i) {
    const JobWarning& w = after.warnings[i];
    out.push_back(make("warning", after.id, time_ms,
                       {{"reason", w.reason}, {"epoch", w.epoch}, {"value", w.value}, {"threshold", w.threshold},
                        {"detail", w.detail}}));
  }
  if (after.state != before.state) out.push_back(state_event(after, time_ms));
  return out;
}

JobEventData progress_event(const std::string& job, const StepMetric& m, int64_t steps_done, int64_t total_steps) {
  return make("progress", job, m.time_ms,
              {{"worker", m.worker}, {"epoch", m.epoch}, {"step", m.step}, {"loss", m.loss}, {"accuracy", m.accuracy},
               {"samples_per_second", round_to(m.samples_per_second, 1)}, {"steps_done", steps_done},
               {"total_steps", total_steps}});
}

JobEventData epoch_event(const std::string& job, const EpochMetric& m) {
  auto maybe = [](const std::optional<double>& v) { return v ? json::value(*v) : json::value(nullptr); };
  json::object fields{{"epoch", m.epoch}, {"train_loss", maybe(m.train_loss)}, {"train_accuracy", maybe(m.train_accuracy)},
                      {"test_loss", m.test_loss}, {"test_accuracy", m.test_accuracy},
                      {"samples_per_second", round_to(m.samples_per_second, 1)}};
  put_task_metrics(m, fields);
  return make("epoch", job, m.time_ms, std::move(fields));
}

JobEventData checkpoint_event(const std::string& job, const CheckpointInfo& c, int64_t time_ms) {
  return make("checkpoint", job, time_ms, {{"step", c.step}, {"epoch", c.epoch}, {"bytes", c.bytes}, {"final", c.final}});
}

std::string event_frame(uint64_t id, const JobEventData& e) {
  std::string out;
  out.reserve(e.data.size() + e.type.size() + 32);
  out += "id: ";
  out += std::to_string(id);
  out += "\nevent: ";
  out += e.type;
  out += "\ndata: ";
  out += e.data;  // one line: JSON text has no raw newlines (strings escape them)
  out += "\n\n";
  return out;
}

std::string event_to_stored(const JobEventData& e) { return e.type + "\n" + e.data; }

std::optional<JobEventData> event_from_stored(const std::string& text) {
  const size_t nl = text.find('\n');
  if (nl == std::string::npos || nl == 0) return std::nullopt;
  JobEventData e{text.substr(0, nl), text.substr(nl + 1), false};
  if (e.type == "state") {
    boost::system::error_code ec;
    const json::value v = parse_json(e.data, ec);
    if (ec || !v.is_object()) return std::nullopt;
    const auto* state = v.as_object().if_contains("state");
    if (state != nullptr && state->is_string()) {
      const std::string s(state->as_string());
      e.terminal = s == "SUCCEEDED" || s == "FAILED" || s == "CANCELLED";
    }
  }
  return e;
}

}  // namespace pstrain
