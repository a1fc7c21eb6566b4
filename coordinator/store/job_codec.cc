#include "coordinator/store/job_codec.h"

#include <boost/json.hpp>

#include "common/base/json_parse.h"
#include "common/base/json_text.h"

namespace pstrain {
namespace json = boost::json;
namespace {


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
  json::value v = parse_json(text, ec);
  if (ec || !v.is_object()) return std::nullopt;
  return v.as_object();
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

json::value optional_number(const std::optional<double>& v) { return v ? json::value(*v) : json::value(nullptr); }

json::array warnings_array(const std::vector<JobWarning>& warnings) {
  json::array a;
  for (const JobWarning& w : warnings) {
    a.push_back(json::object{{"reason", w.reason}, {"epoch", w.epoch}, {"value", w.value},
                             {"threshold", w.threshold}, {"detail", w.detail}, {"time_ms", w.time_ms}});
  }
  return a;
}

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

json::value early_stop_value(const std::optional<EarlyStopStatus>& e) {
  if (!e) return nullptr;
  const auto integer = [](const std::optional<int64_t>& v) { return v ? json::value(*v) : json::value(nullptr); };
  return json::object{{"monitor", e->monitor},
                      {"best_epoch", integer(e->best_epoch)},
                      {"best", optional_number(e->best)},
                      {"wait", e->wait},
                      {"stopped_epoch", integer(e->stopped_epoch)},
                      {"model_epoch", integer(e->model_epoch)},
                      {"model_step", integer(e->model_step)}};
}

std::string record_to_json(const JobRecord& j) {
  json::array workers, servers;
  for (auto w : j.workers) workers.push_back(w);
  for (auto s : j.servers) servers.push_back(s);
  return to_json_text(json::object{
      {"id", j.id}, {"name", j.name}, {"study", j.study}, {"trial", j.trial}, {"spec", j.spec_json}, {"state", job_state_name(j.state)}, {"reason", j.reason},
      {"mode", j.mode}, {"submitted_ms", j.submitted_ms}, {"started_ms", j.started_ms},
      {"finished_ms", j.finished_ms}, {"epochs", j.epochs}, {"steps_per_epoch", j.steps_per_epoch},
      {"total_steps", j.total_steps}, {"steps_done", j.steps_done}, {"current_epoch", j.current_epoch},
      {"samples_per_second", j.samples_per_second}, {"train_loss", optional_number(j.train_loss)},
      {"train_accuracy", optional_number(j.train_accuracy)}, {"test_loss", optional_number(j.test_loss)},
      {"test_accuracy", optional_number(j.test_accuracy)}, {"test_mae", optional_number(j.test_mae)},
      {"test_rmse", optional_number(j.test_rmse)}, {"test_r2", optional_number(j.test_r2)},
      {"test_top5_accuracy", optional_number(j.test_top5_accuracy)}, {"test_auc", optional_number(j.test_auc)},
      {"val_loss", optional_number(j.val_loss)}, {"val_accuracy", optional_number(j.val_accuracy)},
      {"workers", std::move(workers)},
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
      {"early_stopping", early_stop_value(j.early_stopping)},
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
    j.study = get_or<std::string>(o, "study", "");
    j.trial = get_or<int64_t>(o, "trial", -1);
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
    j.test_mae = get_optional(o, "test_mae");
    j.test_rmse = get_optional(o, "test_rmse");
    j.test_r2 = get_optional(o, "test_r2");
    j.test_top5_accuracy = get_optional(o, "test_top5_accuracy");
    j.test_auc = get_optional(o, "test_auc");
    j.val_loss = get_optional(o, "val_loss");
    j.val_accuracy = get_optional(o, "val_accuracy");
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
    if (const auto it = o.find("early_stopping"); it != o.end() && it->value().is_object()) {
      const json::object& e = it->value().as_object();
      const auto integer = [&](const char* key) -> std::optional<int64_t> {
        const auto f = e.find(key);
        if (f == e.end() || f->value().is_null()) return std::nullopt;
        return json::value_to<int64_t>(f->value());
      };
      EarlyStopStatus status;
      status.monitor = get_or<std::string>(e, "monitor", "");
      status.best_epoch = integer("best_epoch");
      status.best = get_optional(e, "best");
      status.wait = get_or<int64_t>(e, "wait", 0);
      status.stopped_epoch = integer("stopped_epoch");
      status.model_epoch = integer("model_epoch");
      status.model_step = integer("model_step");
      j.early_stopping = std::move(status);
    }
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
  json::object o{{"epoch", m.epoch}, {"train_loss", optional_number(m.train_loss)},
                 {"train_accuracy", optional_number(m.train_accuracy)}, {"test_loss", m.test_loss},
                 {"test_accuracy", m.test_accuracy},
                 {"samples_per_second", m.samples_per_second}, {"time_ms", m.time_ms}};
  put_task_metrics(m, o);
  return to_json_text(o);
}

void put_task_metrics(const EpochMetric& m, json::object& o) {
  if (m.test_top5_accuracy) o["test_top5_accuracy"] = *m.test_top5_accuracy;
  if (m.test_auc) o["test_auc"] = *m.test_auc;
  if (m.test_mae) {  // regression: no accuracies
    o.erase("train_accuracy");
    o.erase("test_accuracy");
    o["test_mae"] = *m.test_mae;
    o["test_rmse"] = m.test_rmse.value_or(0);
    o["test_r2"] = m.test_r2.value_or(0);
  }
  const std::pair<const char*, const std::optional<double>*> val[] = {
      {"val_loss", &m.val_loss}, {"val_accuracy", &m.val_accuracy}, {"val_top5_accuracy", &m.val_top5_accuracy},
      {"val_auc", &m.val_auc},   {"val_mae", &m.val_mae},           {"val_rmse", &m.val_rmse},
      {"val_r2", &m.val_r2}};
  for (const auto& [key, value] : val) {
    if (*value) o[key] = **value;
  }
}

std::optional<EpochMetric> epoch_from_json(const std::string& text) {
  const auto o = parse_object(text);
  if (!o) return std::nullopt;
  try {
    EpochMetric m{get_or<uint32_t>(*o, "epoch", 0), get_optional(*o, "train_loss"),
                  get_optional(*o, "train_accuracy"), get_optional(*o, "test_loss").value_or(0),
                  get_optional(*o, "test_accuracy").value_or(0),
                  get_optional(*o, "samples_per_second").value_or(0), get_or<int64_t>(*o, "time_ms", 0),
                  get_optional(*o, "test_mae"), get_optional(*o, "test_rmse"), get_optional(*o, "test_r2"),
                  get_optional(*o, "test_top5_accuracy"), get_optional(*o, "test_auc")};
    m.val_loss = get_optional(*o, "val_loss");
    m.val_accuracy = get_optional(*o, "val_accuracy");
    m.val_top5_accuracy = get_optional(*o, "val_top5_accuracy");
    m.val_auc = get_optional(*o, "val_auc");
    m.val_mae = get_optional(*o, "val_mae");
    m.val_rmse = get_optional(*o, "val_rmse");
    m.val_r2 = get_optional(*o, "val_r2");
    return m;
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
  const json::value v = parse_json(text, ec);
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

}  // namespace pstrain
