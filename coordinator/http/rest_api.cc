#include "coordinator/http/rest_api.h"

#include <future>

#include "common/base/log.h"
#include "coordinator/http/request_counters.h"  // its inline code is checked here (tests/lint/thread_safety.sh)
#include "coordinator/http/responses.h"
#include "coordinator/http/web_ui.h"

namespace pstrain {

RestApi::RestApi(JobStore& store, JobCommands& commands, std::string openapi_json, DatasetCatalog* catalog,
                 ModelService* models, const WebUi* web)
    : store_(store),
      commands_(commands),
      openapi_json_(std::move(openapi_json)),
      catalog_(catalog),
      models_(models),
      web_(web) {
  add_job_routes();
  if (catalog_ != nullptr) add_dataset_routes();
  if (models_ != nullptr) add_model_routes();
  add_study_routes();
}

HttpResponse RestApi::handle(const HttpRequest& request) {
  std::promise<HttpResponse> answer;
  handle_async(request, [&answer](HttpResponse r) { answer.set_value(std::move(r)); });
  return answer.get_future().get();
}

void RestApi::handle_async(HttpRequest request, Responder respond) {
  std::string label = "unknown";
  // Every answer is counted under its route's label (pstrain_http_requests_total).
  auto answer = [this, &label, respond](HttpResponse r) {
    count(label, r.status);
    respond(std::move(r));
  };
  try {
    if (auto refused = authorize(request)) return respond(std::move(*refused));
    const std::string path = path_of(request.target);
    if (web_ != nullptr && WebUi::is_web_path(path)) {
      label = path == "/" ? "/" : "/ui/{file}";
      if (request.method != "GET" && request.method != "HEAD") return answer(method_not_allowed(request.method, path, "GET, HEAD"));
      return answer(web_->get(path, request.if_none_match));
    }
    const Router::Match match = router_.find(request.method, path);
    if (match.label.empty()) return answer(problem(404, "not-found", "Not found", "no route for " + path));
    label = match.label;
    if (match.handler == nullptr) return answer(method_not_allowed(request.method, path, match.allow));
    // The handler may answer later, on another thread: the label goes with the responder.
    (*match.handler)(request, match.args, [this, label, respond](HttpResponse r) {
      count(label, r.status);
      respond(std::move(r));
    });
  } catch (const std::exception& e) {
    answer(problem(500, "internal", "Internal error", e.what()));
  }
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
  const Router::Match match = router_.find(head.method, path_of(head.target));
  if (match.handler == nullptr) return plan;  // answered without a body: 404 or 405
  if (match.label == "/v1/models/{id}:predict") {
    plan.max_bytes = kMaxPredictBodyBytes;
  } else if (match.label == "/v1/models" && head.method == "POST") {
    return plan_model_upload(head);
  } else if (match.label.starts_with("/v1/datasets/{name}/{split}")) {
    return plan_dataset_upload(head, match);
  }
  return plan;
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
  const std::vector<std::string> p = Router::segments(request.target);
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
    ++counters_.auth_missing;
    return unauthorized(request.method + " " + path + " needs a bearer token (Authorization: Bearer TOKEN)", "");
  }
  const std::optional<AccessTokens::Match> match = tokens_->find(token);
  if (!match) {
    ++counters_.auth_invalid;
    PSLOG(kWarning) << "REST: refused " << request.method << " " << path << ": an unknown token";
    return unauthorized("the bearer token is not valid", ", error=\"invalid_token\"");
  }
  if (static_cast<int>(match->role) < static_cast<int>(*needed)) {
    ++counters_.auth_forbidden;
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

}  // namespace pstrain
