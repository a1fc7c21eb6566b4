// The study routes of the REST API (docs/REST.md "Studies"): POST /v1/studies (checked here,
// every trial's spec included, then created on the event loop through StudyCommands), GET
// /v1/studies, GET /v1/studies/{id}, POST /v1/studies/{id}/cancel.
#include <boost/json.hpp>

#include "common/base/error.h"
#include "common/base/json_parse.h"
#include "coordinator/datasets/dataset_catalog.h"
#include "coordinator/http/responses.h"
#include "coordinator/http/rest_api.h"
#include "coordinator/study/study_json.h"

namespace pstrain {

void RestApi::check_job_spec(const std::string& spec_json) const {
  JobSpec spec = parse_job_spec(spec_json);
  if (catalog_ == nullptr) {
    validate_job_spec(spec, known_datasets());
    return;
  }
  std::string why;
  const bool found = catalog_->with_dataset(spec.dataset.name, &why, [&](const DatasetInfo& dataset) {
    check_spec_against_dataset(spec, dataset);
  });
  if (!found) throw SpecError("/dataset/name", why);
}

HttpResponse RestApi::submit_study(const HttpRequest& request) {
  if (auto refused = json_document_problem(request, "a study", kMaxBodyBytes)) return *refused;
  // The template's input shape, when it has none, from its dataset (as POST /v1/jobs does).
  std::string body = request.body;
  boost::system::error_code ec;
  if (boost::json::value v = parse_json(body, ec); !ec && v.is_object()) {
    if (boost::json::value* t = v.as_object().if_contains("spec"); t != nullptr && t->is_object()) {
      const std::string filled = spec_with_input_shape(boost::json::serialize(*t), catalog_);
      *t = parse_json(filled);
      body = boost::json::serialize(v);
    }
  }
  StudySpec spec;
  try {
    spec = parse_study_spec(body, [this](const std::string& job) { check_job_spec(job); });
  } catch (const SpecError& e) {
    if (e.kind() == SpecError::Kind::kMalformed) return problem(400, "malformed-json", "Malformed JSON", e.detail());
    return problem(422, "invalid-study", "Invalid study", e.what(), e.path());
  }
  const std::string id = study_commands_->submit(std::move(spec));
  const auto study = studies_->get(id);
  HttpResponse r = json_response(201, study ? study_view_json(*study, store_) : "{\"id\":\"" + id + "\"}");
  r.headers.emplace_back("Location", "/v1/studies/" + id);
  return r;
}

void RestApi::add_study_routes() {
  using Args = const std::vector<std::string>&;
  // Every study route: 404 when this API serves no studies.
  auto route = [this](auto&& answer) {
    return [this, answer](const HttpRequest& request, Args args, const Responder& respond) {
      if (studies_ == nullptr || study_commands_ == nullptr) {
        respond(problem(404, "studies-not-served", "No studies", "this coordinator does not run studies"));
        return;
      }
      respond(answer(request, args));
    };
  };
  auto not_found = [](const std::string& id) {
    return problem(404, "study-not-found", "No such study", "there is no study '" + id + "'");
  };
  router_.add("GET", "/v1/studies",
              route([this](const HttpRequest&, Args) { return json_response(200, study_list_json(studies_->list())); }));
  router_.add("POST", "/v1/studies", route([this](const HttpRequest& r, Args) { return submit_study(r); }));
  router_.add("GET", "/v1/studies/{id}", route([this, not_found](const HttpRequest&, Args a) {
                const auto study = studies_->get(a[0]);
                return study ? json_response(200, study_view_json(*study, store_)) : not_found(a[0]);
              }));
  router_.add("POST", "/v1/studies/{id}/cancel", route([this, not_found](const HttpRequest&, Args a) {
                const auto result = study_commands_->cancel(a[0]);
                if (result == StudyCommands::CancelResult::kNotFound) return not_found(a[0]);
                const auto study = studies_->get(a[0]);
                if (result == StudyCommands::CancelResult::kAlreadyFinished) {
                  return problem(409, "study-finished", "Study already finished",
                                 "study '" + a[0] + "' is " + (study ? study_state_name(study->state) : "finished") +
                                     " and cannot be cancelled");
                }
                return json_response(200, study_view_json(*study, store_));
              }));
}

}  // namespace pstrain
