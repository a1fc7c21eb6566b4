#include "coordinator/store/job_json.h"
#include "coordinator/store/job_codec.h"

#include <boost/json.hpp>

#include <map>

#include "common/base/json_parse.h"
#include "common/base/json_text.h"
#include "common/data/job_spec.h"
#include "common/engine/model_spec.h"

namespace pstrain {
namespace json = boost::json;
namespace {

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
          {"test_mae", optional_number(j.test_mae)},
          {"test_rmse", optional_number(j.test_rmse)},
          {"test_r2", optional_number(j.test_r2)},
          {"test_top5_accuracy", optional_number(j.test_top5_accuracy)},
          {"test_auc", optional_number(j.test_auc)},
          {"val_loss", optional_number(j.val_loss)},
          {"val_accuracy", optional_number(j.val_accuracy)},
          {"submitted_at_ms", j.submitted_ms},
          {"study", j.study.empty() ? json::value(nullptr) : json::value(j.study)},
          {"trial", j.trial >= 0 ? json::value(j.trial) : json::value(nullptr)}};
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
  o["early_stopping"] = early_stop_value(j.early_stopping);
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
  json::value spec = parse_json(j.spec_json, ec);
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
  for (const auto& m : j.steps) steps.push_back(parse_json(step_to_json(m)));
  for (const auto& m : j.epoch_history) epochs.push_back(parse_json(epoch_to_json(m)));
  return to_json_text(json::object{{"id", j.id}, {"steps", std::move(steps)}, {"epochs", std::move(epochs)}});
}

std::string cluster_json(const std::vector<NodeView>& nodes) {
  const int64_t now = now_ms();
  json::array list;
  for (const auto& n : nodes) list.push_back(node_object(n, now));
  return to_json_text(json::object{{"nodes", std::move(list)}});
}

std::string checkpoint_list_json(const JobRecord& job) {
  json::array list;
  for (const CheckpointInfo& c : job.checkpoints) {
    json::object o = checkpoint_object(c);
    o["href"] = "/v1/jobs/" + job.id + "/checkpoints/" + std::to_string(c.step);
    list.push_back(std::move(o));
  }
  return to_json_text(json::object{{"job", job.id}, {"checkpoints", std::move(list)}});
}

std::vector<std::string> jobs_using_dataset(const std::vector<JobRecord>& jobs, const std::string& dataset) {
  std::vector<std::string> ids;
  for (const JobRecord& job : jobs) {
    if (job.finished()) continue;
    boost::system::error_code ec;
    const json::value spec = parse_json(job.spec_json, ec);
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
      o["model"] = parse_json(m.model_json);
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
