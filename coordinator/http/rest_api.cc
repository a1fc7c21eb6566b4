#include "coordinator/http/rest_api.h"

#include <boost/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <future>
#include <map>
#include <sstream>
#include <variant>

#include "common/error.h"
#include "common/json_text.h"
#include "common/log.h"
#include "common/rpc/cluster_auth.h"
#include "coordinator/dataset_catalog.h"
#include "coordinator/job_json.h"
#include "coordinator/init_from_check.h"
#include "coordinator/job/divergence_guard.h"
#include "coordinator/http/web_ui.h"
#include "coordinator/model_service.h"

namespace pstrain {
namespace {

std::vector<std::string> split_path(const std::string& target) {
  const std::string path = target.substr(0, target.find('?'));
  std::vector<std::string> parts;
  std::string part;
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      parts.push_back(part);
      part.clear();
    } else {
      part += path[i];
    }
  }
  if (!parts.empty() && parts.back().empty()) parts.pop_back();  // trailing slash
  return parts;
}

HttpResponse json_response(unsigned status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

HttpResponse method_not_allowed(const std::string& method, const std::string& path, const std::string& allow) {
  HttpResponse r = problem(405, "method-not-allowed", "Method not allowed",
                           method + " is not allowed on " + path + "; allowed: " + allow);
  r.headers.emplace_back("Allow", allow);
  return r;
}

std::string escape_label(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// The query of a target, percent-decoded ("?a=1&b=x%20y"). A key without '=' maps to "".
std::map<std::string, std::string> query_params(const std::string& target) {
  std::map<std::string, std::string> out;
  const size_t q = target.find('?');
  if (q == std::string::npos) return out;
  auto decode = [](std::string_view in) {
    std::string s;
    for (size_t i = 0; i < in.size(); ++i) {
      if (in[i] == '%' && i + 2 < in.size() && std::isxdigit(static_cast<unsigned char>(in[i + 1])) &&
          std::isxdigit(static_cast<unsigned char>(in[i + 2]))) {
        s += static_cast<char>(std::stoi(std::string(in.substr(i + 1, 2)), nullptr, 16));
        i += 2;
      } else {
        s += in[i] == '+' ? ' ' : in[i];
      }
    }
    return s;
  };
  std::string_view rest(target);
  rest.remove_prefix(q + 1);
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    const size_t eq = pair.find('=');
    if (!pair.empty()) out[decode(pair.substr(0, eq))] = eq == std::string_view::npos ? "" : decode(pair.substr(eq + 1));
    if (amp == std::string_view::npos) break;
    rest.remove_prefix(amp + 1);
  }
  return out;
}

// The media type of a Content-Type header, lowercased, without parameters or spaces.
std::string media_type(const std::string& content_type) {
  std::string out;
  for (char c : content_type.substr(0, content_type.find(';'))) {
    if (c != ' ') out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

// A service's error (dataset catalog, model service) as problem+json.
HttpResponse service_problem(const ServiceError& e) {
  static const std::map<unsigned, const char*> kTitles = {
      {400, "Bad request"}, {404, "Not found"}, {409, "Conflict"}, {413, "Too large"},
      {415, "Unsupported media type"}, {422, "Unprocessable request"}, {500, "Internal error"}};
  const auto title = kTitles.find(e.status);
  const std::string text = e.status == 422 && e.type.rfind("dataset-", 0) == 0 ? "Invalid dataset"
                           : title == kTitles.end()                           ? "Error"
                                                                              : title->second;
  HttpResponse r = problem(e.status, e.type, text, e.detail, e.field);
  if (e.line != 0 || !e.column.empty()) {
    boost::json::object body = boost::json::parse(r.body).as_object();
    if (e.line != 0) body["line"] = e.line;
    if (!e.column.empty()) body["column"] = e.column;
    r.body = to_json_text(body);
  }
  return r;
}

// A dataset upload's route: PUT /v1/datasets/{name}/{split}[/images|/labels].
struct UploadRoute {
  std::string name, split;
  DatasetCatalog::UploadPart part = DatasetCatalog::UploadPart::kWhole;
};
std::optional<UploadRoute> upload_route(const std::string& method, const std::vector<std::string>& p) {
  if (method != "PUT" || p.size() < 4 || p.size() > 5 || p[0] != "v1" || p[1] != "datasets") return std::nullopt;
  if (p.size() == 4 && p[3] == "split") return std::nullopt;  // POST /v1/datasets/{name}/split
  UploadRoute r{p[2], p[3]};
  if (p.size() == 5) {
    if (p[4] == "images") {
      r.part = DatasetCatalog::UploadPart::kImages;
    } else if (p[4] == "labels") {
      r.part = DatasetCatalog::UploadPart::kLabels;
    } else {
      return std::nullopt;
    }
  }
  return r;
}

// The upload's format from its media type and part; else a 415 naming what is accepted.
std::variant<DatasetCatalog::UploadFormat, HttpResponse> upload_format(const HttpRequest& request,
                                                                       DatasetCatalog::UploadPart part) {
  const std::string type = media_type(request.content_type);
  if (part != DatasetCatalog::UploadPart::kWhole) {
    if (type == "application/octet-stream" || type == "application/gzip" || type == "application/x-gzip" ||
        type == "application/x-idx") {
      return DatasetCatalog::UploadFormat::kIdx;
    }
    return problem(415, "unsupported-media-type", "Unsupported media type",
                   "an IDX file (gzip'd or plain) must be sent as application/octet-stream, application/gzip or "
                   "application/x-idx, not '" + request.content_type + "'",
                   "Content-Type");
  }
  if (type == "text/csv") return DatasetCatalog::UploadFormat::kCsv;
  if (type == "application/x-npz" || type == "application/zip") return DatasetCatalog::UploadFormat::kNpz;
  return problem(415, "unsupported-media-type", "Unsupported media type",
                 "a split must be sent as text/csv (CSV with a header row) or application/x-npz (NumPy .npz with "
                 "arrays x and y), not '" + request.content_type + "'; IDX pairs go to .../images and .../labels",
                 "Content-Type");
}

// A sample's value: integers exactly (steps pass 10^6), the rest with 10 significant digits.
std::string sample_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char text[40];
  if (v == std::trunc(v) && std::fabs(v) < 9007199254740992.0) {
    std::snprintf(text, sizeof text, "%.0f", v);
  } else {
    std::snprintf(text, sizeof text, "%.10g", v);
  }
  return text;
}

}  // namespace

HttpResponse problem(unsigned status, const std::string& type, const std::string& title, const std::string& detail,
                     const std::string& field) {
  boost::json::object body{{"type", "urn:pstrain:problem:" + type}, {"title", title}, {"status", status},
                           {"detail", detail}};
  if (!field.empty()) body["field"] = field;
  HttpResponse r;
  r.status = status;
  r.content_type = "application/problem+json";
  r.body = to_json_text(body);
  return r;
}

RestApi::RestApi(JobStore& store, JobCommands& commands, std::string openapi_json, DatasetCatalog* catalog,
                 ModelService* models, const WebUi* web)
    : store_(store),
      commands_(commands),
      openapi_json_(std::move(openapi_json)),
      catalog_(catalog),
      models_(models),
      web_(web) {}

void RestApi::count(const std::string& route, unsigned status) {
  std::lock_guard lock(counters_mutex_);
  ++counters_[{route, status}];
}

HttpResponse RestApi::handle(const HttpRequest& request) {
  std::promise<HttpResponse> answer;
  handle_async(request, [&answer](HttpResponse r) { answer.set_value(std::move(r)); });
  return answer.get_future().get();
}

HttpResponse RestApi::handle_now(const HttpRequest& request) {
  std::string label = "unknown";
  HttpResponse response;
  try {
    response = route(request, &label);
  } catch (const std::exception& e) {
    response = problem(500, "internal", "Internal error", e.what());
  }
  count(label, response.status);
  return response;
}

HttpResponse RestApi::route(const HttpRequest& request, std::string* label) {
  const std::vector<std::string> p = split_path(request.target);
  const std::string& m = request.method;
  const std::string path = request.target.substr(0, request.target.find('?'));
  auto only = [&](const char* method, const char* route_label, auto&& handler) -> HttpResponse {
    *label = route_label;
    const std::string allow = std::string(method) == "GET" ? "GET, HEAD" : method;
    if (m != method && !(std::string(method) == "GET" && m == "HEAD")) return method_not_allowed(m, path, allow);
    return handler();
  };

  if (web_ != nullptr && WebUi::is_web_path(path)) {
    return only("GET", path == "/" ? "/" : "/ui/{file}", [&] { return web_->get(path, request.if_none_match); });
  }
  if (p.size() == 1 && p[0] == "healthz") {
    return only("GET", "/healthz", [] { return json_response(200, R"({"status":"ok"})"); });
  }
  if (p.size() == 1 && p[0] == "metrics") {
    return only("GET", "/metrics", [&] { return prometheus(); });
  }
  if (p.size() >= 1 && p[0] == "v1") {
    if (p.size() == 2 && p[1] == "openapi.json") {
      return only("GET", "/v1/openapi.json", [&] { return json_response(200, openapi_json_); });
    }
    if (p.size() == 2 && p[1] == "events") {
      return only("GET", "/v1/events", [&] { return event_stream(request, ""); });
    }
    if (p.size() == 2 && p[1] == "cluster") {
      return only("GET", "/v1/cluster", [&] { return json_response(200, cluster_json(store_.nodes())); });
    }
    if (p.size() >= 2 && p[1] == "datasets" && catalog_ != nullptr) return datasets_route(request, p, label);
    if (p.size() == 2 && p[1] == "models" && models_ != nullptr) {
      *label = "/v1/models";
      if (m == "GET" || m == "HEAD") return json_response(200, model_list_json(store_.list(), store_.uploads().list()));
      return method_not_allowed(m, path, "GET, HEAD, POST");  // a POST was answered by async_route
    }
    if (p.size() == 3 && p[1] == "models" && models_ != nullptr) {
      for (const char* verb : {":predict", ":evaluate"}) {
        if (p[2].ends_with(verb)) {
          *label = std::string("/v1/models/{id}") + verb;
          return method_not_allowed(m, path, "POST");  // a POST was answered by async_route
        }
      }
      *label = "/v1/models/{id}";
      if (m == "GET" || m == "HEAD") {
        if (const auto upload = store_.uploads().get(p[2])) return json_response(200, uploaded_model_json(*upload));
        const auto job = store_.get(p[2]);
        if (!job || !job->has_model) {
          return problem(404, "model-not-found", "No such model",
                         "there is no model '" + p[2] + "' (a model is an uploaded one, model-N, or a job that SUCCEEDED)");
        }
        return json_response(200, model_json(*job));
      }
      return method_not_allowed(m, path, "GET, HEAD, DELETE");  // a DELETE was answered by async_route
    }
    if (p.size() == 4 && p[1] == "models" && p[3] == "file" && models_ != nullptr) {
      *label = "/v1/models/{id}/file";
      return method_not_allowed(m, path, "GET, HEAD");  // a GET was answered by async_route
    }
    if (p.size() == 2 && p[1] == "jobs") {
      *label = "/v1/jobs";
      if (m == "GET" || m == "HEAD") return json_response(200, job_list_json(store_.list()));
      if (m == "POST") return submit(request);
      return method_not_allowed(m, path, "GET, HEAD, POST");
    }
    if (p.size() >= 3 && p[1] == "jobs") {
      const std::string& id = p[2];
      auto not_found = [&] { return problem(404, "job-not-found", "No such job", "there is no job '" + id + "'"); };
      if (p.size() == 3) {
        return only("GET", "/v1/jobs/{id}", [&] {
          const auto body = cached_status(id);
          return body ? json_response(200, *body) : not_found();
        });
      }
      if (p.size() == 4 && p[3] == "events") {
        return only("GET", "/v1/jobs/{id}/events", [&] { return event_stream(request, id); });
      }
      if (p.size() == 4 && p[3] == "metrics") {
        return only("GET", "/v1/jobs/{id}/metrics", [&] {
          const auto job = store_.get(id);
          return job ? json_response(200, job_metrics_json(*job)) : not_found();
        });
      }
      if (p.size() == 4 && p[3] == "cancel") {
        return only("POST", "/v1/jobs/{id}/cancel", [&] {
          const auto result = commands_.cancel(id);
          invalidate_status(id);
          switch (result) {
            case JobCommands::CancelResult::kNotFound:
              return not_found();
            case JobCommands::CancelResult::kAlreadyFinished: {
              const auto job = store_.get(id);
              return problem(409, "job-finished", "Job already finished",
                             "job '" + id + "' is " + (job ? std::string(job_state_name(job->state)) : std::string("finished")) +
                                 " and cannot be cancelled");
            }
            case JobCommands::CancelResult::kCancelled:
              break;
          }
          const auto job = store_.get(id);
          return json_response(200, job ? job_status_json(*job, store_.nodes()) : "{}");
        });
      }
      if (p.size() == 4 && p[3] == "evaluate" && models_ != nullptr) {
        return only("POST", "/v1/jobs/{id}/evaluate", [&] {  // a POST was answered by async_route
          return problem(400, "bad-request", "Bad request", "the request did not reach the model service");
        });
      }
      if (p.size() == 4 && p[3] == "checkpoints") {
        return only("GET", "/v1/jobs/{id}/checkpoints", [&] {
          const auto job = store_.get(id);
          return job ? json_response(200, checkpoint_list_json(*job)) : not_found();
        });
      }
      if (p.size() == 5 && p[3] == "checkpoints" && models_ != nullptr) {
        return only("GET", "/v1/jobs/{id}/checkpoints/{step}", [&] {  // a GET was answered by async_route
          return problem(400, "bad-request", "Bad request", "the request did not reach the model service");
        });
      }
      if (p.size() == 4 && p[3] == "model") {
        return only("GET", "/v1/jobs/{id}/model", [&] {
          const auto job = store_.get(id);
          if (!job) return not_found();
          if (!job->has_model) {
            return problem(409, "model-not-ready", "No trained model yet",
                           "job '" + id + "' is " + job_state_name(job->state) + "; the model is available once it has SUCCEEDED");
          }
          auto file = store_.model_pieces(id);
          if (!file) return problem(500, "model-missing", "Model missing", "the stored model of '" + id + "' is unreadable");
          HttpResponse r;
          r.content_type = "application/octet-stream";
          r.file = std::make_shared<const StoredFile>(std::move(*file));  // sent piece by piece
          r.headers.emplace_back("Content-Disposition", "attachment; filename=\"" + id + ".safetensors\"");
          return r;
        });
      }
    }
  }
  return problem(404, "not-found", "Not found", "no route for " + path);
}

std::optional<std::string> RestApi::cached_status(const std::string& id) {
  const auto now = std::chrono::steady_clock::now();
  uint64_t invalidations = 0;
  {
    std::lock_guard lock(cache_mutex_);
    const auto it = status_cache_.find(id);
    if (it != status_cache_.end() && now - it->second.first < kStatusCacheAge) return it->second.second;
    invalidations = invalidations_;
  }
  const auto job = store_.get(id);
  if (!job) return std::nullopt;
  std::string body = job_status_json(*job, store_.nodes());
  std::lock_guard lock(cache_mutex_);
  // A command that ended while this body was built may have read an older record: caching it
  // would undo the command's invalidation for up to kStatusCacheAge.
  if (invalidations_ == invalidations) status_cache_[id] = {now, body};
  return body;
}

void RestApi::invalidate_status(const std::string& id) {
  std::lock_guard lock(cache_mutex_);
  status_cache_.erase(id);
  ++invalidations_;
}

HttpResponse RestApi::submit(const HttpRequest& request) {
  const std::string type = request.content_type.substr(0, request.content_type.find(';'));
  std::string lowered;
  for (char c : type) {
    if (c != ' ') lowered += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  if (lowered != "application/json") {
    return problem(415, "unsupported-media-type", "Unsupported media type",
                   "a job spec must be sent as application/json, not '" + request.content_type + "'");
  }
  if (request.body.size() > kMaxBodyBytes) {
    return problem(413, "body-too-large", "Body too large",
                   "the body has " + std::to_string(request.body.size()) + " bytes; the limit is " +
                       std::to_string(kMaxBodyBytes));
  }
  JobSpec spec;
  try {
    spec = parse_job_spec(request.body);
    check_init_from(spec, store_);
  } catch (const SpecError& e) {
    if (e.kind() == SpecError::Kind::kMalformed) {
      return problem(400, "malformed-json", "Malformed JSON", e.detail());
    }
    return problem(422, "invalid-spec", "Invalid job spec", e.what(), e.path());
  }
  std::string id;
  if (catalog_ != nullptr) {
    std::string why;
    std::optional<HttpResponse> invalid;
    const bool found = catalog_->with_dataset(spec.dataset.name, &why, [&](const DatasetInfo& dataset) {
      try {
        check_spec_against_dataset(spec, dataset);
      } catch (const SpecError& e) {
        invalid = problem(422, "invalid-spec", "Invalid job spec", e.what(), e.path());
        return;
      }
      id = commands_.submit(std::move(spec));
    });
    if (!found) return problem(422, "invalid-spec", "Invalid job spec", "/dataset/name " + why, "/dataset/name");
    if (invalid) return *invalid;
  } else {
    try {
      validate_job_spec(spec, known_datasets());
    } catch (const SpecError& e) {
      return problem(422, "invalid-spec", "Invalid job spec", e.what(), e.path());
    }
    id = commands_.submit(std::move(spec));
  }
  const auto job = store_.get(id);
  HttpResponse r = json_response(201, job ? job_status_json(*job, store_.nodes()) : "{\"id\":\"" + id + "\"}");
  r.headers.emplace_back("Location", "/v1/jobs/" + id);
  return r;
}

HttpResponse RestApi::event_stream(const HttpRequest& request, const std::string& id) {
  // Where to resume: the Last-Event-ID header (an EventSource reconnecting) wins over ?after=N.
  auto number = [](const std::string& text) -> std::optional<uint64_t> {
    if (text.empty() || text.size() > 19 || !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      return std::nullopt;
    }
    return std::stoull(text);
  };
  uint64_t after = 0;
  for (const auto& [key, value] : query_params(request.target)) {
    // access_token: the dashboard's token (EventSource cannot send an Authorization header); the
    // API's auth, when there is one, reads it.
    if (key == "access_token") continue;
    if (key != "after") {
      return problem(400, "unknown-parameter", "Unknown query parameter",
                     key + " is not a parameter of an event stream (known: after, access_token)", key);
    }
    const auto n = number(value);
    if (!n) return problem(400, "invalid-parameter", "Invalid query parameter",
                           "after must be an event id (a non-negative integer), not '" + value + "'", "after");
    after = *n;
  }
  if (!request.last_event_id.empty()) {
    const auto n = number(request.last_event_id);
    if (!n) return problem(400, "invalid-header", "Invalid header",
                           "Last-Event-ID must be an event id (a non-negative integer), not '" + request.last_event_id + "'",
                           "Last-Event-ID");
    after = *n;
  }
  HttpResponse r;
  r.content_type = "text/event-stream";
  r.headers.emplace_back("Cache-Control", "no-store");
  r.headers.emplace_back("X-Accel-Buffering", "no");  // nginx: do not buffer the stream
  if (request.method == "HEAD") {
    if (!id.empty() && !store_.get(id)) return problem(404, "job-not-found", "No such job", "there is no job '" + id + "'");
    return r;
  }
  auto subscriber = std::make_shared<EventSubscriber>(event_limits_, &store_.event_stats());
  if (!store_.subscribe(id, after, subscriber)) {
    return problem(404, "job-not-found", "No such job", "there is no job '" + id + "'");
  }
  r.events = std::move(subscriber);
  return r;
}

HttpResponse RestApi::prometheus() const {
  std::ostringstream out;
  const auto jobs = store_.list();
  std::map<std::string, int> by_state;
  for (JobState state : kAllJobStates) by_state[job_state_name(state)] = 0;
  for (const auto& j : jobs) ++by_state[job_state_name(j.state)];
  out << "# HELP pstrain_jobs Jobs by state.\n# TYPE pstrain_jobs gauge\n";
  for (const auto& [state, n] : by_state) out << "pstrain_jobs{state=\"" << state << "\"} " << n << "\n";
  // Per-job series: the unfinished jobs and the last finished ones (newest first).
  std::vector<const JobRecord*> shown, done;
  for (const auto& j : jobs) (is_finished(j.state) ? done : shown).push_back(&j);
  std::sort(done.begin(), done.end(), [](const JobRecord* a, const JobRecord* b) {
    return a->finished_ms != b->finished_ms ? a->finished_ms > b->finished_ms : a->id > b->id;
  });
  if (done.size() > kMetricsFinishedJobs) done.resize(kMetricsFinishedJobs);
  shown.insert(shown.end(), done.begin(), done.end());
  auto per_job = [&](const char* name, const char* help, auto&& value) {
    out << "# HELP " << name << " " << help << "\n# TYPE " << name << " gauge\n";
    for (const JobRecord* j : shown) {
      const std::optional<double> v = value(*j);
      if (v) out << name << "{job=\"" << escape_label(j->id) << "\"} " << sample_value(*v) << "\n";
    }
  };
  using Value = std::optional<double>;
  out << "# HELP pstrain_job_info A job's name, state and mode (value 1), for the unfinished jobs and the "
      << kMetricsFinishedJobs << " that finished last, as every pstrain_job_* series.\n# TYPE pstrain_job_info gauge\n";
  for (const JobRecord* j : shown) {
    out << "pstrain_job_info{job=\"" << escape_label(j->id) << "\",name=\"" << escape_label(j->name) << "\",state=\""
        << job_state_name(j->state) << "\",mode=\"" << escape_label(j->mode) << "\"} 1\n";
  }
  per_job("pstrain_job_steps", "Steps done by a job.", [](const JobRecord& j) -> Value { return j.steps_done; });
  per_job("pstrain_job_progress_ratio", "Steps done over the job's total steps (0 to 1).",
          [](const JobRecord& j) -> Value {
            return j.total_steps > 0 ? std::min(1.0, static_cast<double>(j.steps_done) / j.total_steps) : 0.0;
          });
  per_job("pstrain_job_epoch", "The epoch a job is in (1-based; its last once finished).",
          [](const JobRecord& j) -> Value { return j.current_epoch; });
  per_job("pstrain_job_samples_per_second", "Training throughput of a job.",
          [](const JobRecord& j) -> Value { return j.samples_per_second; });
  per_job("pstrain_job_train_loss", "Latest training loss of a job.", [](const JobRecord& j) { return j.train_loss; });
  per_job("pstrain_job_train_accuracy", "Latest training accuracy of a job.",
          [](const JobRecord& j) { return j.train_accuracy; });
  per_job("pstrain_job_test_loss", "Test loss of a job's last epoch.", [](const JobRecord& j) { return j.test_loss; });
  per_job("pstrain_job_test_accuracy", "Test accuracy of a job's last epoch.",
          [](const JobRecord& j) { return j.test_accuracy; });
  per_job("pstrain_job_recoveries", "Recoveries a job went through.",
          [](const JobRecord& j) -> Value { return j.recoveries; });
  out << "# HELP pstrain_divergence_total Divergence warnings of jobs (a loss that became NaN or infinite, stayed "
         "above its start for an epoch, or a test accuracy at chance), by reason, since the coordinator started.\n"
         "# TYPE pstrain_divergence_total counter\n";
  {
    const WarningCounts counts = store_.warning_counts();
    for (DivergenceReason reason : kDivergenceReasons) {
      const auto it = counts.by_reason.find(divergence_reason_name(reason));
      out << "pstrain_divergence_total{reason=\"" << divergence_reason_name(reason) << "\"} "
          << (it == counts.by_reason.end() ? 0 : it->second) << "\n";
    }
  }
  out << "# HELP pstrain_nodes_alive Registered nodes that heartbeat.\n# TYPE pstrain_nodes_alive gauge\n";
  std::map<std::string, int> alive = {{"server", 0}, {"worker", 0}};
  for (const auto& n : store_.nodes()) {
    if (n.alive) ++alive[n.role];
  }
  for (const auto& [role, n] : alive) out << "pstrain_nodes_alive{role=\"" << role << "\"} " << n << "\n";
  out << "# HELP pstrain_nodes_stalled Live nodes in a job whose progress has stopped advancing (see the job's "
         "notes).\n# TYPE pstrain_nodes_stalled gauge\n";
  std::map<std::string, int> stalled = {{"server", 0}, {"worker", 0}};
  for (const auto& n : store_.nodes()) {
    if (n.alive && n.stalled) ++stalled[n.role];
  }
  for (const auto& [role, n] : stalled) out << "pstrain_nodes_stalled{role=\"" << role << "\"} " << n << "\n";
  out << "# HELP pstrain_http_requests_total HTTP requests by route and status.\n"
         "# TYPE pstrain_http_requests_total counter\n";
  {
    std::lock_guard lock(counters_mutex_);
    for (const auto& [key, n] : counters_) {
      out << "pstrain_http_requests_total{route=\"" << escape_label(key.first) << "\",status=\"" << key.second << "\"} "
          << n << "\n";
    }
  }
  out << "# HELP pstrain_http_auth_failures_total Requests refused: no token (missing), an unknown one (invalid), "
         "a role too weak (forbidden).\n# TYPE pstrain_http_auth_failures_total counter\n"
      << "pstrain_http_auth_failures_total{reason=\"missing\"} " << auth_missing_.load() << "\n"
      << "pstrain_http_auth_failures_total{reason=\"invalid\"} " << auth_invalid_.load() << "\n"
      << "pstrain_http_auth_failures_total{reason=\"forbidden\"} " << auth_forbidden_.load() << "\n";
  if (rpc_refusals_) {
    out << "# HELP pstrain_rpc_auth_refusals_total Cluster connections to the coordinator refused at their "
           "handshake (no or a wrong cluster secret).\n# TYPE pstrain_rpc_auth_refusals_total counter\n"
        << "pstrain_rpc_auth_refusals_total " << rpc_refusals_->count() << "\n";
  }
  const EventStreamStats& events = store_.event_stats();
  out << "# HELP pstrain_event_streams Open event streams (Server-Sent Events clients).\n"
         "# TYPE pstrain_event_streams gauge\n"
      << "pstrain_event_streams " << events.open.load() << "\n";
  out << "# HELP pstrain_event_streams_dropped_total Event streams closed because the client did not keep up.\n"
         "# TYPE pstrain_event_streams_dropped_total counter\n"
      << "pstrain_event_streams_dropped_total " << events.dropped.load() << "\n";
  out << "# HELP pstrain_events_total Job events recorded by this coordinator process.\n"
         "# TYPE pstrain_events_total counter\n"
      << "pstrain_events_total " << events.events.load() << "\n";
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4";
  r.body = out.str();
  return r;
}

// --- Datasets ------------------------------------------------------------------------------

std::vector<std::string> RestApi::jobs_using(const std::string& dataset) const { return jobs_using_dataset(store_, dataset); }

HttpResponse RestApi::datasets_route(const HttpRequest& request, const std::vector<std::string>& p, std::string* label) {
  const std::string& m = request.method;
  const std::string path = request.target.substr(0, request.target.find('?'));
  if (p.size() == 2) {
    *label = "/v1/datasets";
    if (m != "GET" && m != "HEAD") return method_not_allowed(m, path, "GET, HEAD");
    boost::json::array list;
    for (const DatasetRecord& r : catalog_->list()) list.push_back(boost::json::parse(dataset_json(r, jobs_using(r.name))));
    return json_response(200, to_json_text(boost::json::object{{"datasets", list}}));
  }
  const std::string& name = p[2];
  if (p.size() == 3) {
    *label = "/v1/datasets/{name}";
    if (m == "GET" || m == "HEAD") {
      const auto r = catalog_->get(name);
      if (!r) return problem(404, "dataset-not-found", "No such dataset", "there is no dataset '" + name + "'");
      return json_response(200, dataset_json(*r, jobs_using(name)));
    }
    if (m == "DELETE") {  // answered by async_route: this is only reached through a test's handle_now
      return problem(400, "bad-request", "Bad request", "the request did not reach the dataset catalog");
    }
    return method_not_allowed(m, path, "GET, HEAD, DELETE");
  }
  if (p.size() == 4 && p[3] == "split") {
    *label = "/v1/datasets/{name}/split";
    return method_not_allowed(m, path, "POST");  // a POST was answered by async_route
  }
  if (upload_route("PUT", p)) {
    *label = p.size() == 5 ? "/v1/datasets/{name}/{split}/{part}" : "/v1/datasets/{name}/{split}";
    return method_not_allowed(m, path, "PUT");  // a PUT was answered by async_route
  }
  return problem(404, "not-found", "Not found", "no route for " + path);
}

BodyPlan RestApi::plan_body(const HttpRequest& head) {
  BodyPlan plan;
  if (head.method != "GET" && head.method != "HEAD") {
    // A caller who may not make the request does not get to send its body.
    HttpRequest copy = head;
    if (auto refused = authorize(copy)) {
      plan.kind = BodyPlan::Kind::kReject;
      refused->close = true;  // the body is never read: the connection cannot carry another request
      plan.reject = std::move(*refused);
      return plan;
    }
  }
  if (models_ != nullptr && head.method == "POST") {
    const auto p = split_path(head.target);
    if (p.size() == 3 && p[0] == "v1" && p[1] == "models" && p[2].ends_with(":predict")) {
      plan.max_bytes = kMaxPredictBodyBytes;
      return plan;
    }
    if (p.size() == 2 && p[0] == "v1" && p[1] == "models") return plan_model_upload(head);
  }
  if (catalog_ == nullptr) return plan;
  const auto route = upload_route(head.method, split_path(head.target));
  if (!route) return plan;
  auto reject = [&](HttpResponse r) {
    count(route->part == DatasetCatalog::UploadPart::kWhole ? "/v1/datasets/{name}/{split}" : "/v1/datasets/{name}/{split}/{part}",
          r.status);
    plan.kind = BodyPlan::Kind::kReject;
    r.close = true;  // the body is never read: the connection cannot carry another request
    plan.reject = std::move(r);
    return plan;
  };
  const auto params = query_params(head.target);
  for (const auto& [key, value] : params) {
    if (key != "replace" && !(key == "label" && route->part == DatasetCatalog::UploadPart::kWhole)) {
      return reject(problem(400, "unknown-parameter", "Unknown query parameter",
                            "'" + key + "' is not a parameter of this upload (known: replace" +
                                (route->part == DatasetCatalog::UploadPart::kWhole ? ", label" : "") + ")",
                            key));
    }
  }
  bool replace = false;
  if (const auto it = params.find("replace"); it != params.end()) {
    if (it->second != "true" && it->second != "false") {
      return reject(problem(400, "invalid-parameter", "Invalid query parameter",
                            "replace must be true or false, not '" + it->second + "'", "replace"));
    }
    replace = it->second == "true";
  }
  if (const auto e = catalog_->precheck(route->name, route->split, replace)) return reject(service_problem(*e));
  const auto format = upload_format(head, route->part);
  if (const auto* r = std::get_if<HttpResponse>(&format)) return reject(*r);
  const uint64_t max = catalog_->options().max_upload_bytes;
  if (head.content_length && *head.content_length > max) {
    return reject(problem(413, "body-too-large", "Body too large",
                          "the upload has " + std::to_string(*head.content_length) + " bytes; the limit is " +
                              std::to_string(max) + " (coordinator flag --max-upload-bytes)"));
  }
  plan.kind = BodyPlan::Kind::kFile;
  plan.path = catalog_->new_staging_path();
  plan.max_bytes = max;
  return plan;
}

BodyPlan RestApi::plan_model_upload(const HttpRequest& head) {
  BodyPlan plan;
  auto reject = [&](HttpResponse r) {
    count("/v1/models", r.status);
    plan.kind = BodyPlan::Kind::kReject;
    r.close = true;  // the body is never read: the connection cannot carry another request
    plan.reject = std::move(r);
    return plan;
  };
  for (const auto& [key, value] : query_params(head.target)) {
    if (key != "name") {
      return reject(problem(400, "unknown-parameter", "Unknown query parameter",
                            "'" + key + "' is not a parameter of a model upload (known: name)", key));
    }
    if (value.empty() || value.size() > 200 ||
        std::any_of(value.begin(), value.end(), [](unsigned char c) { return c < 0x20 || c == 0x7f; })) {
      return reject(problem(400, "invalid-parameter", "Invalid query parameter",
                            "name must be 1 to 200 printable characters", "name"));
    }
  }
  const std::string type = media_type(head.content_type);
  if (type != "application/octet-stream") {
    return reject(problem(415, "unsupported-media-type", "Unsupported media type",
                          "send the safetensors file as application/octet-stream, not '" + head.content_type + "'",
                          "Content-Type"));
  }
  // Streamed to the dataset catalog's staging directory (same disk, same size limit as dataset
  // uploads); in memory, up to the predict limit, for an API without a catalog (tests).
  const uint64_t max = catalog_ != nullptr ? catalog_->options().max_upload_bytes : kMaxPredictBodyBytes;
  if (head.content_length && *head.content_length > max) {
    return reject(problem(413, "body-too-large", "Body too large",
                          "the upload has " + std::to_string(*head.content_length) + " bytes; the limit is " +
                              std::to_string(max) + " (coordinator flag --max-upload-bytes)"));
  }
  plan.max_bytes = max;
  if (catalog_ != nullptr) {
    plan.kind = BodyPlan::Kind::kFile;
    plan.path = catalog_->new_staging_path();
  }
  return plan;
}

bool RestApi::async_route(const HttpRequest& request, const Responder& respond) {
  const std::vector<std::string> p = split_path(request.target);
  auto answer = [this, respond](const std::string& label, HttpResponse r) {
    count(label, r.status);
    respond(std::move(r));
  };
  auto download = [answer](const std::string& label) {
    return [answer, label](ModelService::Result result) {
      if (result.error) return answer(label, service_problem(*result.error));
      HttpResponse r;
      r.content_type = result.content_type;
      if (result.file) {
        r.file = std::make_shared<const StoredFile>(std::move(*result.file));  // sent piece by piece
      } else {
        r.body = std::move(result.json);
      }
      r.headers.emplace_back("Content-Disposition", "attachment; filename=\"" + result.filename + "\"");
      answer(label, std::move(r));
    };
  };
  if (models_ != nullptr && p.size() >= 2 && p[0] == "v1" && p[1] == "models") {
    if (request.method == "POST" && p.size() == 2) {
      ModelService::Upload upload;
      upload.path = request.body_file;
      upload.bytes = request.body_file.empty() ? request.body.size() : request.body_bytes;
      upload.sha256 = request.body_sha256;
      upload.body = request.body;
      if (const auto params = query_params(request.target); params.count("name") != 0) upload.name = params.at("name");
      if (media_type(request.content_type) != "application/octet-stream") {  // only a test gets here (plan_body)
        answer("/v1/models", problem(415, "unsupported-media-type", "Unsupported media type",
                                     "send the safetensors file as application/octet-stream", "Content-Type"));
        return true;
      }
      models_->upload(std::move(upload), [answer](ModelService::Result result) {
        if (result.error) return answer("/v1/models", service_problem(*result.error));
        HttpResponse r = json_response(201, std::move(result.json));
        const auto id = boost::json::parse(r.body).as_object().at("id").as_string();
        r.headers.emplace_back("Location", "/v1/models/" + std::string(id));
        answer("/v1/models", std::move(r));
      });
      return true;
    }
    if ((request.method == "GET" || request.method == "HEAD") && p.size() == 4 && p[3] == "file") {
      models_->file(p[2], download("/v1/models/{id}/file"));
      return true;
    }
    if (request.method == "DELETE" && p.size() == 3 && !p[2].ends_with(":predict") && !p[2].ends_with(":evaluate")) {
      models_->erase(p[2], [answer](ModelService::Result result) {
        if (result.error) return answer("/v1/models/{id}", service_problem(*result.error));
        HttpResponse r;
        r.status = 204;
        answer("/v1/models/{id}", std::move(r));
      });
      return true;
    }
  }
  if (models_ != nullptr && (request.method == "GET" || request.method == "HEAD") && p.size() == 5 && p[0] == "v1" &&
      p[1] == "jobs" && p[3] == "checkpoints") {
    const std::string label = "/v1/jobs/{id}/checkpoints/{step}";
    bool optimizer = false;
    for (const auto& [key, value] : query_params(request.target)) {
      if (key != "optimizer") {
        answer(label, problem(400, "unknown-parameter", "Unknown query parameter",
                              "'" + key + "' is not a parameter of a checkpoint download (known: optimizer)", key));
        return true;
      }
      if (value != "true" && value != "false") {
        answer(label, problem(400, "invalid-parameter", "Invalid query parameter",
                              "optimizer must be true or false, not '" + value + "'", "optimizer"));
        return true;
      }
      optimizer = value == "true";
    }
    models_->checkpoint(p[2], p[4], optimizer, download(label));
    return true;
  }
  if (models_ != nullptr && request.method == "POST" && p.size() >= 3 && p[0] == "v1") {
    const bool predict = p.size() == 3 && p[1] == "models" && p[2].ends_with(":predict");
    const bool model_evaluate = p.size() == 3 && p[1] == "models" && p[2].ends_with(":evaluate");
    const bool evaluate = model_evaluate || (p.size() == 4 && p[1] == "jobs" && p[3] == "evaluate");
    if (predict || evaluate) {
      const std::string label = predict ? "/v1/models/{id}:predict"
                                : model_evaluate ? "/v1/models/{id}:evaluate"
                                                 : "/v1/jobs/{id}/evaluate";
      const std::string type = media_type(request.content_type);
      if (type != "application/json" && !(evaluate && request.body.empty())) {
        answer(label, problem(415, "unsupported-media-type", "Unsupported media type",
                              "send application/json, not '" + request.content_type + "'", "Content-Type"));
        return true;
      }
      auto done = [this, answer, label](ModelService::Result result) {
        if (result.error) return answer(label, service_problem(*result.error));
        answer(label, json_response(200, std::move(result.json)));
      };
      if (predict) {
        models_->predict(p[2].substr(0, p[2].size() - std::string(":predict").size()), request.body, done);
      } else if (model_evaluate) {
        models_->evaluate(p[2].substr(0, p[2].size() - std::string(":evaluate").size()), request.body, done, true);
      } else {
        models_->evaluate(p[2], request.body, done);
      }
      return true;
    }
  }
  if (catalog_ == nullptr) return false;
  if (request.method == "DELETE" && p.size() == 3 && p[0] == "v1" && p[1] == "datasets") {
    // Renames and a synced write: on the catalog's thread, not this one.
    catalog_->erase(p[2], [answer](std::optional<CatalogError> e) {
      if (e) return answer("/v1/datasets/{name}", service_problem(*e));
      HttpResponse r;
      r.status = 204;
      answer("/v1/datasets/{name}", std::move(r));
    });
    return true;
  }
  if (const auto route = upload_route(request.method, p)) {
    const std::string route_label = p.size() == 5 ? "/v1/datasets/{name}/{split}/{part}" : "/v1/datasets/{name}/{split}";
    if (request.body_file.empty()) {
      // Not streamed (the plan said otherwise): only a rejected plan gets here, or a test.
      answer(route_label, problem(400, "bad-request", "Bad request", "the upload's body was not received"));
      return true;
    }
    const auto format = upload_format(request, route->part);
    DatasetCatalog::Upload upload;
    upload.name = route->name;
    upload.split = route->split;
    upload.part = route->part;
    upload.format = std::get<DatasetCatalog::UploadFormat>(format);  // plan_body checked it
    const auto params = query_params(request.target);
    if (const auto it = params.find("label"); it != params.end()) upload.label_column = it->second;
    if (const auto it = params.find("replace"); it != params.end()) upload.replace = it->second == "true";
    upload.body_path = request.body_file;
    upload.body_bytes = request.body_bytes;
    upload.body_sha256 = request.body_sha256;
    const std::string name = route->name;
    catalog_->ingest(std::move(upload), [this, answer, route_label, name, bytes = request.body_bytes,
                                         sha = request.body_sha256](DatasetCatalog::UploadResult result) {
      if (result.error) return answer(route_label, service_problem(*result.error));
      if (result.status == 202) {
        return answer(route_label,
                      json_response(202, to_json_text(boost::json::object{{"name", name},
                                                                          {"waiting_for", result.waiting_for},
                                                                          {"received_bytes", bytes},
                                                                          {"sha256", sha}})));
      }
      boost::json::object body = boost::json::parse(dataset_json(*result.record, jobs_using(name))).as_object();
      body["upload"] = boost::json::object{{"bytes", bytes}, {"sha256", sha}};
      HttpResponse r = json_response(result.status, to_json_text(body));
      r.headers.emplace_back("Location", "/v1/datasets/" + name);
      answer(route_label, std::move(r));
    });
    return true;
  }
  if (request.method == "POST" && p.size() == 4 && p[0] == "v1" && p[1] == "datasets" && p[3] == "split") {
    const std::string label = "/v1/datasets/{name}/split";
    const std::string name = p[2];
    if (media_type(request.content_type) != "application/json") {
      answer(label, problem(415, "unsupported-media-type", "Unsupported media type",
                            "send the split's options as application/json, not '" + request.content_type + "'"));
      return true;
    }
    boost::system::error_code ec;
    const boost::json::value body = boost::json::parse(request.body, ec);
    if (ec || !body.is_object()) {
      answer(label, problem(400, "malformed-json", "Malformed JSON", "the body must be a JSON object"));
      return true;
    }
    double fraction = 0.1;
    uint64_t seed = 1;
    for (const auto& field : body.as_object()) {
      if (field.key() == "test_fraction") {
        const auto& v = field.value();
        const double f = v.is_double() ? v.as_double() : v.is_int64() ? static_cast<double>(v.as_int64()) : -1;
        if (!(f > 0 && f < 1)) {
          answer(label, problem(422, "invalid-split", "Invalid split", "/test_fraction must be a number in (0, 1)", "/test_fraction"));
          return true;
        }
        fraction = f;
      } else if (field.key() == "seed") {
        if (!field.value().is_int64() || field.value().as_int64() < 0) {
          answer(label, problem(422, "invalid-split", "Invalid split", "/seed must be a non-negative integer", "/seed"));
          return true;
        }
        seed = static_cast<uint64_t>(field.value().as_int64());
      } else {
        answer(label, problem(422, "invalid-split", "Invalid split",
                              "/" + std::string(field.key()) + " is not a known field (known: test_fraction, seed)",
                              "/" + std::string(field.key())));
        return true;
      }
    }
    catalog_->split(name, fraction, seed, [this, answer, label, name](DatasetCatalog::SplitResult result) {
      if (result.error) return answer(label, service_problem(*result.error));
      answer(label, json_response(200, dataset_json(*result.record, jobs_using(name))));
    });
    return true;
  }
  return false;
}

std::optional<HttpResponse> RestApi::authorize(HttpRequest& request) {
  if (!tokens_) return std::nullopt;
  std::string token;
  const std::string& a = request.authorization;
  if (a.size() > 7 && (a.compare(0, 7, "Bearer ") == 0 || a.compare(0, 7, "bearer ") == 0)) token = a.substr(7);
  const bool read = request.method == "GET" || request.method == "HEAD";
  if (const size_t q = request.target.find('?'); q != std::string::npos && read) {
    // Rebuild the query without access_token (kept as sent otherwise: routes decode it).
    std::string kept;
    std::string_view rest(request.target);
    rest.remove_prefix(q + 1);
    while (true) {
      const size_t amp = rest.find('&');
      const std::string_view pair = rest.substr(0, amp);
      if (pair.starts_with("access_token=")) {
        if (token.empty()) token = query_params("?" + std::string(pair)).at("access_token");
      } else if (!pair.empty()) {
        kept += (kept.empty() ? "?" : "&") + std::string(pair);
      }
      if (amp == std::string_view::npos) break;
      rest.remove_prefix(amp + 1);
    }
    request.target = request.target.substr(0, q) + kept;
  }
  const std::vector<std::string> p = split_path(request.target);
  const std::optional<Role> needed = required_role(request.method, p);
  if (!needed) return std::nullopt;
  const std::string path = request.target.substr(0, request.target.find('?'));
  auto unauthorized = [&](const std::string& detail, const char* error) {
    HttpResponse r = problem(401, "unauthorized", "Unauthorized", detail);
    r.headers.emplace_back("WWW-Authenticate", std::string("Bearer realm=\"pstrain\"") + error);
    count("(unauthorized)", r.status);
    return r;
  };
  if (token.empty()) {
    ++auth_missing_;
    return unauthorized(request.method + " " + path + " needs a bearer token (Authorization: Bearer TOKEN)", "");
  }
  const std::optional<AccessTokens::Match> match = tokens_->find(token);
  if (!match) {
    ++auth_invalid_;
    PSLOG(kWarning) << "REST: refused " << request.method << " " << path << ": an unknown token";
    return unauthorized("the bearer token is not valid", ", error=\"invalid_token\"");
  }
  if (static_cast<int>(match->role) < static_cast<int>(*needed)) {
    ++auth_forbidden_;
    PSLOG(kInfo) << "REST: refused " << request.method << " " << path << " to " << match->name << " ("
                 << role_name(match->role) << ")";
    HttpResponse r = problem(403, "forbidden", "Forbidden",
                             request.method + " " + path + " needs the " + role_name(*needed) + " role; this token is " +
                                 role_name(match->role));
    count("(forbidden)", r.status);
    return r;
  }
  return std::nullopt;
}

void RestApi::handle_async(HttpRequest request, Responder respond) {
  try {
    if (auto refused = authorize(request)) return respond(std::move(*refused));
    if (async_route(request, respond)) return;
  } catch (const std::exception& e) {
    HttpResponse r = problem(500, "internal", "Internal error", e.what());
    count("unknown", r.status);
    return respond(std::move(r));
  }
  respond(handle_now(request));
}

}  // namespace pstrain
