#include "coordinator/job_json.h"

#include <boost/json.hpp>

#include <map>

#include "common/job_spec.h"
#include "common/json_text.h"
#include "common/model_spec.h"

namespace pstrain {
namespace json = boost::json;
namespace {

json::value optional_number(const std::optional<double>& v) { return v ? json::value(*v) : json::value(nullptr); }

json::object node_object(const NodeView& n, int64_t now) {
  return {{"id", n.id},
          {"role", n.role},
          {"name", n.name},
          {"address", n.address.empty() ? json::value(nullptr) : json::value(n.address)},
          {"alive", n.alive},
          {"job", n.job.empty() ? json::value(nullptr) : json::value(n.job)},
          {"last_heartbeat_ms_ago", now - n.last_heartbeat_ms},
          {"registered_at_ms", n.registered_ms},
          {"cpu", n.cpu.empty() ? json::value(nullptr) : json::value(n.cpu)},
          {"progress", n.progress},
          {"stalled", n.stalled}};
}

json::object summary_object(const JobRecord& j) {
  const double percent = j.total_steps > 0 ? 100.0 * static_cast<double>(j.steps_done) / j.total_steps : 0.0;
  return {{"id", j.id},
          {"name", j.name},
          {"state", job_state_name(j.state)},
          {"mode", j.mode},
          {"epoch", j.current_epoch},
          {"epochs", j.epochs},
          {"step", j.steps_done},
          {"total_steps", j.total_steps},
          {"percent", round_to(std::min(100.0, percent), 2)},
          {"samples_per_second", round_to(j.samples_per_second, 1)},
          {"test_accuracy", optional_number(j.test_accuracy)},
          {"submitted_at_ms", j.submitted_ms}};
}

json::array node_list(const std::vector<uint32_t>& ids, const std::map<uint32_t, const NodeView*>& by_id, int64_t now) {
  json::array out;
  for (uint32_t id : ids) {
    const auto it = by_id.find(id);
    if (it != by_id.end()) {
      out.push_back(node_object(*it->second, now));
    } else {
      out.push_back(json::object{{"id", id}, {"alive", false}});
    }
  }
  return out;
}

template <typename T>
T get_or(const json::object& o, const char* key, T fallback) {
  const auto it = o.find(key);
  if (it == o.end() || it->value().is_null()) return fallback;
  return json::value_to<T>(it->value());
}

std::optional<double> get_optional(const json::object& o, const char* key) {
  const auto it = o.find(key);
  if (it == o.end() || it->value().is_null()) return std::nullopt;
  return it->value().to_number<double>();
}

std::optional<json::object> parse_object(const std::string& text) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec || !v.is_object()) return std::nullopt;
  return v.as_object();
}

json::array warnings_array(const std::vector<JobWarning>& warnings) {
  json::array a;
  for (const JobWarning& w : warnings) {
    a.push_back(json::object{{"reason", w.reason}, {"epoch", w.epoch}, {"value", w.value},
                             {"threshold", w.threshold}, {"detail", w.detail}, {"time_ms", w.time_ms}});
  }
  return a;
}

std::vector<JobWarning> warnings_from(const json::object& o) {
  std::vector<JobWarning> out;
  const auto it = o.find("warnings");
  if (it == o.end() || !it->value().is_array()) return out;
  for (const json::value& v : it->value().as_array()) {
    if (!v.is_object()) continue;
    const json::object& w = v.as_object();
    JobWarning warning;
    warning.reason = get_or<std::string>(w, "reason", "");
    warning.epoch = get_or<uint32_t>(w, "epoch", 0);
    warning.value = get_optional(w, "value").value_or(0.0);
    warning.threshold = get_optional(w, "threshold").value_or(0.0);
    warning.detail = get_or<std::string>(w, "detail", "");
    warning.time_ms = get_or<int64_t>(w, "time_ms", 0);
    out.push_back(std::move(warning));
  }
  return out;
}

}  // namespace

std::string job_status_json(const JobRecord& j, const std::vector<NodeView>& nodes) {
  const int64_t now = now_ms();
  std::map<uint32_t, const NodeView*> by_id;
  for (const auto& n : nodes) by_id[n.id] = &n;
  json::object o = summary_object(j);
  o["reason"] = j.reason.empty() ? json::value(nullptr) : json::value(j.reason);
  json::array notes;
  for (const auto& n : j.notes) notes.push_back(json::value(n));
  o["notes"] = std::move(notes);
  o["warnings"] = warnings_array(j.warnings);
  o["steps_per_epoch"] = j.steps_per_epoch;
  std::optional<double> eta;
  if (j.state == JobState::kRunning && j.steps_done > 0 && j.started_ms > 0 && j.total_steps > j.steps_done) {
    eta = round_to(static_cast<double>(now - j.started_ms) / 1000.0 / j.steps_done * (j.total_steps - j.steps_done), 1);
  }
  o["eta_seconds"] = optional_number(eta);
  o["train_loss"] = optional_number(j.train_loss);
  o["train_accuracy"] = optional_number(j.train_accuracy);
  o["test_loss"] = optional_number(j.test_loss);
  o["workers"] = node_list(j.workers, by_id, now);
  o["servers"] = node_list(j.servers, by_id, now);
  o["last_backup_step"] = j.last_backup_step ? json::value(*j.last_backup_step) : json::value(nullptr);
  json::array replayed;
  for (auto r : j.replayed_steps) replayed.push_back(r);
  o["recoveries"] = json::object{{"count", j.recoveries}, {"replayed_steps", std::move(replayed)}};
  // Bytes on the wire per step, by worker index (each worker's latest report; training.compression).
  json::array pushed, pulled;
  for (double b : j.bytes_pushed_per_step) pushed.push_back(round_to(b, 1));
  for (double b : j.bytes_pulled_per_step) pulled.push_back(round_to(b, 1));
  o["wire"] = json::object{{"bytes_pushed_per_step", std::move(pushed)}, {"bytes_pulled_per_step", std::move(pulled)}};
  o["started_at_ms"] = j.started_ms ? json::value(j.started_ms) : json::value(nullptr);
  o["finished_at_ms"] = j.finished_ms ? json::value(j.finished_ms) : json::value(nullptr);
  o["model"] = j.has_model ? json::value(json::object{{"href", "/v1/jobs/" + j.id + "/model"},
                                                      {"format", "safetensors"},
                                                      {"bytes", j.model_bytes}})
                           : json::value(nullptr);
  boost::system::error_code ec;
  json::value spec = json::parse(j.spec_json, ec);
  o["spec"] = ec ? json::value(nullptr) : spec;
  return to_json_text(o);
}

std::string job_list_json(const std::vector<JobRecord>& jobs) {
  json::array list;
  for (const auto& j : jobs) list.push_back(summary_object(j));
  return to_json_text(json::object{{"jobs", std::move(list)}});
}

std::string job_metrics_json(const JobRecord& j) {
  json::array steps, epochs;
  for (const auto& m : j.steps) steps.push_back(json::parse(step_to_json(m)));
  for (const auto& m : j.epoch_history) epochs.push_back(json::parse(epoch_to_json(m)));
  return to_json_text(json::object{{"id", j.id}, {"steps", std::move(steps)}, {"epochs", std::move(epochs)}});
}

std::string cluster_json(const std::vector<NodeView>& nodes) {
  const int64_t now = now_ms();
  json::array list;
  for (const auto& n : nodes) list.push_back(node_object(n, now));
  return to_json_text(json::object{{"nodes", std::move(list)}});
}

namespace {

json::object checkpoint_object(const CheckpointInfo& c) {
  return json::object{{"step", c.step},
                      {"epoch", c.epoch},
                      {"time_ms", c.time_ms},
                      {"bytes", c.bytes},
                      {"final", c.final},
                      {"train_loss", optional_number(c.train_loss)},
                      {"train_accuracy", optional_number(c.train_accuracy)},
                      {"test_loss", optional_number(c.test_loss)},
                      {"test_accuracy", optional_number(c.test_accuracy)}};
}

}  // namespace

std::string checkpoint_list_json(const JobRecord& job) {
  json::array list;
  for (const CheckpointInfo& c : job.checkpoints) {
    json::object o = checkpoint_object(c);
    o["href"] = "/v1/jobs/" + job.id + "/checkpoints/" + std::to_string(c.step);
    list.push_back(std::move(o));
  }
  return to_json_text(json::object{{"job", job.id}, {"checkpoints", std::move(list)}});
}

std::string record_to_json(const JobRecord& j) {
  json::array workers, servers;
  for (auto w : j.workers) workers.push_back(w);
  for (auto s : j.servers) servers.push_back(s);
  return to_json_text(json::object{
      {"id", j.id}, {"name", j.name}, {"spec", j.spec_json}, {"state", job_state_name(j.state)}, {"reason", j.reason},
      {"mode", j.mode}, {"submitted_ms", j.submitted_ms}, {"started_ms", j.started_ms},
      {"finished_ms", j.finished_ms}, {"epochs", j.epochs}, {"steps_per_epoch", j.steps_per_epoch},
      {"total_steps", j.total_steps}, {"steps_done", j.steps_done}, {"current_epoch", j.current_epoch},
      {"samples_per_second", j.samples_per_second}, {"train_loss", optional_number(j.train_loss)},
      {"train_accuracy", optional_number(j.train_accuracy)}, {"test_loss", optional_number(j.test_loss)},
      {"test_accuracy", optional_number(j.test_accuracy)}, {"workers", std::move(workers)},
      {"servers", std::move(servers)},
      {"server_names", [&] {
         json::array a;
         for (const auto& n : j.server_names) a.push_back(json::value(n));
         return a;
       }()},
      {"generation", j.generation},
      {"last_backup_step", j.last_backup_step ? json::value(*j.last_backup_step) : json::value(nullptr)},
      {"has_model", j.has_model}, {"model_bytes", j.model_bytes}, {"recoveries", j.recoveries},
      {"bytes_pushed_per_step", json::value_from(j.bytes_pushed_per_step)},
      {"bytes_pulled_per_step", json::value_from(j.bytes_pulled_per_step)},
      {"notes", [&] {
         json::array a;
         for (const auto& n : j.notes) a.push_back(json::value(n));
         return a;
       }()},
      {"warnings", warnings_array(j.warnings)},
      {"replayed_steps", [&] {
         json::array a;
         for (auto r : j.replayed_steps) a.push_back(r);
         return a;
       }()},
      {"checkpoints", [&] {
         json::array a;
         for (const CheckpointInfo& c : j.checkpoints) a.push_back(checkpoint_object(c));
         return a;
       }()}});
}

std::optional<JobRecord> record_from_json(const std::string& text) {
  const auto parsed = parse_object(text);
  if (!parsed) return std::nullopt;
  const json::object& o = *parsed;
  try {
    JobRecord j;
    j.id = get_or<std::string>(o, "id", "");
    j.name = get_or<std::string>(o, "name", "");
    j.spec_json = get_or<std::string>(o, "spec", "");
    j.state = parse_job_state(get_or<std::string>(o, "state", "PENDING")).value_or(JobState::kPending);
    j.reason = get_or<std::string>(o, "reason", "");
    j.mode = get_or<std::string>(o, "mode", "");
    j.submitted_ms = get_or<int64_t>(o, "submitted_ms", 0);
    j.started_ms = get_or<int64_t>(o, "started_ms", 0);
    j.finished_ms = get_or<int64_t>(o, "finished_ms", 0);
    j.epochs = get_or<int64_t>(o, "epochs", 0);
    j.steps_per_epoch = get_or<int64_t>(o, "steps_per_epoch", 0);
    j.total_steps = get_or<int64_t>(o, "total_steps", 0);
    j.steps_done = get_or<int64_t>(o, "steps_done", 0);
    j.current_epoch = get_or<uint32_t>(o, "current_epoch", 0);
    j.samples_per_second = get_optional(o, "samples_per_second").value_or(0.0);
    j.train_loss = get_optional(o, "train_loss");
    j.train_accuracy = get_optional(o, "train_accuracy");
    j.test_loss = get_optional(o, "test_loss");
    j.test_accuracy = get_optional(o, "test_accuracy");
    j.workers = get_or<std::vector<uint32_t>>(o, "workers", {});
    j.servers = get_or<std::vector<uint32_t>>(o, "servers", {});
    j.server_names = get_or<std::vector<std::string>>(o, "server_names", {});
    j.generation = get_or<uint64_t>(o, "generation", 0);
    if (const auto it = o.find("last_backup_step"); it != o.end() && !it->value().is_null()) {
      j.last_backup_step = json::value_to<int64_t>(it->value());
    }
    j.has_model = get_or<bool>(o, "has_model", false);
    j.model_bytes = get_or<int64_t>(o, "model_bytes", 0);
    j.recoveries = get_or<uint32_t>(o, "recoveries", 0);
    j.bytes_pushed_per_step = get_or<std::vector<double>>(o, "bytes_pushed_per_step", {});
    j.bytes_pulled_per_step = get_or<std::vector<double>>(o, "bytes_pulled_per_step", {});
    j.notes = get_or<std::vector<std::string>>(o, "notes", {});
    j.warnings = warnings_from(o);
    j.replayed_steps = get_or<std::vector<int64_t>>(o, "replayed_steps", {});
    if (const auto it = o.find("checkpoints"); it != o.end() && it->value().is_array()) {
      for (const json::value& v : it->value().as_array()) {
        if (!v.is_object()) continue;
        const json::object& c = v.as_object();
        CheckpointInfo info;
        info.step = get_or<int64_t>(c, "step", 0);
        info.epoch = get_or<int64_t>(c, "epoch", 0);
        info.time_ms = get_or<int64_t>(c, "time_ms", 0);
        info.bytes = get_or<int64_t>(c, "bytes", 0);
        info.final = get_or<bool>(c, "final", false);
        info.train_loss = get_optional(c, "train_loss");
        info.train_accuracy = get_optional(c, "train_accuracy");
        info.test_loss = get_optional(c, "test_loss");
        info.test_accuracy = get_optional(c, "test_accuracy");
        j.checkpoints.push_back(info);
      }
    }
    return j;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::string step_to_json(const StepMetric& m) {
  return to_json_text(json::object{{"worker", m.worker}, {"epoch", m.epoch}, {"step", m.step}, {"loss", m.loss},
                                      {"accuracy", m.accuracy}, {"samples_per_second", m.samples_per_second},
                                      {"time_ms", m.time_ms}, {"bytes_pushed_per_step", round_to(m.bytes_pushed_per_step, 1)},
                                      {"bytes_pulled_per_step", round_to(m.bytes_pulled_per_step, 1)}});
}

std::optional<StepMetric> step_from_json(const std::string& text) {
  const auto o = parse_object(text);
  if (!o) return std::nullopt;
  try {
    return StepMetric{get_or<uint32_t>(*o, "worker", 0), get_or<uint32_t>(*o, "epoch", 0),
                      get_or<uint64_t>(*o, "step", 0), get_optional(*o, "loss").value_or(0),
                      get_optional(*o, "accuracy").value_or(0), get_optional(*o, "samples_per_second").value_or(0),
                      get_or<int64_t>(*o, "time_ms", 0), get_optional(*o, "bytes_pushed_per_step").value_or(0),
                      get_optional(*o, "bytes_pulled_per_step").value_or(0)};
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::string epoch_to_json(const EpochMetric& m) {
  return to_json_text(json::object{{"epoch", m.epoch}, {"train_loss", m.train_loss},
                                      {"train_accuracy", m.train_accuracy}, {"test_loss", m.test_loss},
                                      {"test_accuracy", m.test_accuracy},
                                      {"samples_per_second", m.samples_per_second}, {"time_ms", m.time_ms}});
}

std::optional<EpochMetric> epoch_from_json(const std::string& text) {
  const auto o = parse_object(text);
  if (!o) return std::nullopt;
  try {
    return EpochMetric{get_or<uint32_t>(*o, "epoch", 0), get_optional(*o, "train_loss").value_or(0),
                       get_optional(*o, "train_accuracy").value_or(0), get_optional(*o, "test_loss").value_or(0),
                       get_optional(*o, "test_accuracy").value_or(0),
                       get_optional(*o, "samples_per_second").value_or(0), get_or<int64_t>(*o, "time_ms", 0)};
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::string positions_to_json(const std::vector<WorkerPosition>& positions) {
  json::array list;
  for (const WorkerPosition& p : positions) list.push_back(json::array{p.epoch, p.step, p.steps_done});
  return to_json_text(list);
}

std::optional<std::vector<WorkerPosition>> positions_from_json(const std::string& text) {
  boost::system::error_code ec;
  const json::value v = json::parse(text, ec);
  if (ec || !v.is_array()) return std::nullopt;
  std::vector<WorkerPosition> out;
  try {
    for (const json::value& item : v.as_array()) {
      const json::array& a = item.as_array();
      if (a.size() != 3) return std::nullopt;
      out.push_back({json::value_to<uint32_t>(a[0]), json::value_to<uint64_t>(a[1]), json::value_to<uint64_t>(a[2])});
    }
  } catch (const std::exception&) {
    return std::nullopt;
  }
  return out;
}

std::vector<std::string> jobs_using_dataset(const JobStore& store, const std::string& dataset) {
  std::vector<std::string> ids;
  for (const JobRecord& job : store.list()) {
    if (job.finished()) continue;
    boost::system::error_code ec;
    const json::value spec = json::parse(job.spec_json, ec);
    if (ec || !spec.is_object()) continue;
    const auto* d = spec.as_object().if_contains("dataset");
    const auto* name = d != nullptr && d->is_object() ? d->as_object().if_contains("name") : nullptr;
    if (name != nullptr && name->is_string() && name->as_string() == dataset) ids.push_back(job.id);
  }
  return ids;
}

namespace {

json::object model_object(const JobRecord& job) {
  json::object o{{"id", job.id}, {"name", job.name}, {"bytes", job.model_bytes}, {"created_ms", job.finished_ms},
                 {"test_accuracy", job.test_accuracy ? json::value(*job.test_accuracy) : json::value(nullptr)}};
  try {
    const JobSpec spec = parse_accepted_job_spec(job.spec_json);
    json::array shape;
    for (int64_t d : spec.model.input_shape) shape.push_back(d);
    o["dataset"] = spec.dataset.name;
    o["input_shape"] = shape;
    o["classes"] = infer_shapes(spec.model).back().back();
  } catch (const std::exception&) {
  }
  o["source"] = "job";
  o["predict"] = "/v1/models/" + job.id + ":predict";
  o["file"] = "/v1/models/" + job.id + "/file";
  return o;
}

json::object uploaded_model_object(const UploadedModel& m) {
  json::array tensors;
  for (const SafetensorsTensor& t : m.tensors) {
    json::array shape;
    for (int64_t d : t.shape) shape.push_back(d);
    tensors.push_back(json::object{{"name", t.name}, {"dtype", t.dtype}, {"shape", std::move(shape)}});
  }
  json::object o{{"id", m.id},         {"name", m.name},     {"source", "upload"},
                 {"bytes", m.bytes},   {"sha256", m.sha256}, {"created_ms", m.created_ms},
                 {"tensors", tensors}, {"model", nullptr},   {"file", "/v1/models/" + m.id + "/file"}};
  if (!m.model_json.empty()) {
    try {
      const ModelSpec model = parse_model_spec(m.model_json);
      json::array shape;
      for (int64_t d : model.input_shape) shape.push_back(d);
      o["model"] = json::parse(m.model_json);
      o["input_shape"] = shape;
      o["classes"] = infer_shapes(model).back().back();
      o["predict"] = "/v1/models/" + m.id + ":predict";
    } catch (const std::exception&) {
    }
  }
  return o;
}

}  // namespace

std::string model_json(const JobRecord& job) { return to_json_text(model_object(job)); }

std::string uploaded_model_json(const UploadedModel& model) { return to_json_text(uploaded_model_object(model)); }

std::string model_list_json(const std::vector<JobRecord>& jobs, const std::vector<UploadedModel>& uploads) {
  json::array models;
  for (const JobRecord& job : jobs) {
    if (job.has_model) models.push_back(model_object(job));
  }
  for (const UploadedModel& m : uploads) models.push_back(uploaded_model_object(m));
  return to_json_text(json::object{{"models", models}});
}

}  // namespace pstrain
