#include "coordinator/http/rest_api.h"

#include <boost/json.hpp>

#include <sstream>

#include "common/error.h"
#include "common/json_text.h"
#include "coordinator/job_json.h"

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

RestApi::RestApi(JobStore& store, JobCommands& commands, std::string openapi_json)
    : store_(store), commands_(commands), openapi_json_(std::move(openapi_json)) {}

void RestApi::count(const std::string& route, unsigned status) {
  std::lock_guard lock(counters_mutex_);
  ++counters_[{route, status}];
}

HttpResponse RestApi::handle(const HttpRequest& request) {
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
    if (p.size() == 2 && p[1] == "cluster") {
      return only("GET", "/v1/cluster", [&] { return json_response(200, cluster_json(store_.nodes())); });
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
      if (p.size() == 4 && p[3] == "model") {
        return only("GET", "/v1/jobs/{id}/model", [&] {
          const auto job = store_.get(id);
          if (!job) return not_found();
          if (!job->has_model) {
            return problem(409, "model-not-ready", "No trained model yet",
                           "job '" + id + "' is " + job_state_name(job->state) + "; the model is available once it has SUCCEEDED");
          }
          auto bytes = store_.model(id);
          if (!bytes) return problem(500, "model-missing", "Model missing", "the stored model of '" + id + "' is unreadable");
          HttpResponse r;
          r.content_type = "application/octet-stream";
          r.body = std::move(*bytes);  // the one copy of the file this download holds
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
  } catch (const SpecError& e) {
    if (e.kind() == SpecError::Kind::kMalformed) {
      return problem(400, "malformed-json", "Malformed JSON", e.detail());
    }
    return problem(422, "invalid-spec", "Invalid job spec", e.what(), e.path());
  }
  const std::string id = commands_.submit(std::move(spec));
  const auto job = store_.get(id);
  HttpResponse r = json_response(201, job ? job_status_json(*job, store_.nodes()) : "{\"id\":\"" + id + "\"}");
  r.headers.emplace_back("Location", "/v1/jobs/" + id);
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
  out << "# HELP pstrain_job_steps Steps done by a job.\n# TYPE pstrain_job_steps gauge\n";
  for (const auto& j : jobs) out << "pstrain_job_steps{job=\"" << escape_label(j.id) << "\"} " << j.steps_done << "\n";
  out << "# HELP pstrain_job_samples_per_second Training throughput of a job.\n"
         "# TYPE pstrain_job_samples_per_second gauge\n";
  for (const auto& j : jobs) {
    out << "pstrain_job_samples_per_second{job=\"" << escape_label(j.id) << "\"} " << j.samples_per_second << "\n";
  }
  out << "# HELP pstrain_job_train_loss Latest training loss of a job.\n# TYPE pstrain_job_train_loss gauge\n";
  for (const auto& j : jobs) {
    if (j.train_loss) out << "pstrain_job_train_loss{job=\"" << escape_label(j.id) << "\"} " << *j.train_loss << "\n";
  }
  out << "# HELP pstrain_nodes_alive Registered nodes that heartbeat.\n# TYPE pstrain_nodes_alive gauge\n";
  std::map<std::string, int> alive = {{"server", 0}, {"worker", 0}};
  for (const auto& n : store_.nodes()) {
    if (n.alive) ++alive[n.role];
  }
  for (const auto& [role, n] : alive) out << "pstrain_nodes_alive{role=\"" << role << "\"} " << n << "\n";
  out << "# HELP pstrain_http_requests_total HTTP requests by route and status.\n"
         "# TYPE pstrain_http_requests_total counter\n";
  {
    std::lock_guard lock(counters_mutex_);
    for (const auto& [key, n] : counters_) {
      out << "pstrain_http_requests_total{route=\"" << escape_label(key.first) << "\",status=\"" << key.second << "\"} "
          << n << "\n";
    }
  }
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4";
  r.body = out.str();
  return r;
}

}  // namespace pstrain
