// The job routes of the REST API: health, the OpenAPI document, /metrics, the event streams, the
// cluster view, jobs (list, submit, status, metrics, cancel, checkpoints, model download).
#include <boost/json.hpp>

#include <algorithm>

#include "common/base/error.h"
#include "coordinator/http/responses.h"
#include "coordinator/http/rest_api.h"
#include "coordinator/models/init_from_check.h"
#include "coordinator/datasets/dataset_catalog.h"
#include "coordinator/store/job_json.h"

namespace pstrain {

void RestApi::add_job_routes() {
  auto now = [](auto&& answer) {  // a handler that answers at once
    return [answer](const HttpRequest& request, const std::vector<std::string>& args, const Responder& respond) {
      respond(answer(request, args));
    };
  };
  using Args = const std::vector<std::string>&;
  router_.add("GET", "/healthz", now([](const HttpRequest&, Args) { return json_response(200, R"({"status":"ok"})"); }));
  router_.add("GET", "/metrics", now([this](const HttpRequest&, Args) { return prometheus(); }));
  router_.add("GET", "/v1/openapi.json", now([this](const HttpRequest&, Args) { return json_response(200, openapi_json_); }));
  router_.add("GET", "/v1/events", now([this](const HttpRequest& r, Args) { return event_stream(r, ""); }));
  router_.add("GET", "/v1/cluster",
              now([this](const HttpRequest&, Args) { return json_response(200, cluster_json(store_.nodes())); }));
  router_.add("GET", "/v1/jobs",
              now([this](const HttpRequest&, Args) { return json_response(200, job_list_json(store_.list())); }));
  router_.add("POST", "/v1/jobs", now([this](const HttpRequest& r, Args) { return submit(r); }));
  auto not_found = [](const std::string& id) {
    return problem(404, "job-not-found", "No such job", "there is no job '" + id + "'");
  };
  router_.add("GET", "/v1/jobs/{id}", now([this, not_found](const HttpRequest&, Args a) {
                const auto body = status_cache_.get(a[0], [&]() -> std::optional<std::string> {
                  const auto job = store_.get(a[0]);
                  if (!job) return std::nullopt;
                  return job_status_json(*job, store_.nodes());
                });
                return body ? json_response(200, *body) : not_found(a[0]);
              }));
  router_.add("GET", "/v1/jobs/{id}/events", now([this](const HttpRequest& r, Args a) { return event_stream(r, a[0]); }));
  router_.add("GET", "/v1/jobs/{id}/metrics", now([this, not_found](const HttpRequest&, Args a) {
                const auto job = store_.get(a[0]);
                return job ? json_response(200, job_metrics_json(*job)) : not_found(a[0]);
              }));
  router_.add("POST", "/v1/jobs/{id}/cancel", now([this, not_found](const HttpRequest&, Args a) {
                const std::string& id = a[0];
                const auto result = commands_.cancel(id);
                status_cache_.invalidate(id);
                switch (result) {
                  case JobCommands::CancelResult::kNotFound:
                    return not_found(id);
                  case JobCommands::CancelResult::kAlreadyFinished: {
                    const auto job = store_.get(id);
                    return problem(409, "job-finished", "Job already finished",
                                   "job '" + id + "' is " +
                                       (job ? std::string(job_state_name(job->state)) : std::string("finished")) +
                                       " and cannot be cancelled");
                  }
                  case JobCommands::CancelResult::kCancelled:
                    break;
                }
                const auto job = store_.get(id);
                return json_response(200, job ? job_status_json(*job, store_.nodes()) : "{}");
              }));
  router_.add("GET", "/v1/jobs/{id}/checkpoints", now([this, not_found](const HttpRequest&, Args a) {
                const auto job = store_.get(a[0]);
                return job ? json_response(200, checkpoint_list_json(*job)) : not_found(a[0]);
              }));
  router_.add("GET", "/v1/jobs/{id}/model", now([this, not_found](const HttpRequest&, Args a) {
                const std::string& id = a[0];
                const auto job = store_.get(id);
                if (!job) return not_found(id);
                if (!job->has_model) {
                  return problem(409, "model-not-ready", "No trained model yet",
                                 "job '" + id + "' is " + job_state_name(job->state) +
                                     "; the model is available once it has SUCCEEDED");
                }
                auto file = store_.model_pieces(id);
                if (!file) return problem(500, "model-missing", "Model missing", "the stored model of '" + id + "' is unreadable");
                HttpResponse r;
                r.content_type = "application/octet-stream";
                r.file = std::make_shared<const StoredFile>(std::move(*file));  // sent piece by piece
                r.headers.emplace_back("Content-Disposition", "attachment; filename=\"" + id + ".safetensors\"");
                return r;
              }));
}

std::string spec_with_input_shape(const std::string& spec_json, DatasetCatalog* catalog) {
  const std::string name = spec_dataset_name(spec_json);
  if (name.empty()) return spec_json;
  if (catalog == nullptr) {
    const DatasetInfo* d = find_dataset(name);
    return d == nullptr ? spec_json : with_inferred_input_shape(spec_json, *d);
  }
  std::string why;
  const std::optional<DatasetInfo> d = catalog->info(name, &why);
  return d ? with_inferred_input_shape(spec_json, *d) : spec_json;
}

HttpResponse RestApi::submit(const HttpRequest& request) {
  if (auto refused = json_document_problem(request, "a job spec", kMaxBodyBytes)) return *refused;
  JobSpec spec;
  try {
    spec = parse_job_spec(spec_with_input_shape(request.body, catalog_));
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

}  // namespace pstrain
