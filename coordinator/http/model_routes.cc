// The model routes of the REST API: trained and uploaded models (list, record, file, delete,
// upload), predictions and evaluations (of a model or a job's), checkpoint downloads. The model
// service (model_service.h) does the work off the HTTP thread and answers from there.
#include <boost/json.hpp>

#include <algorithm>

#include "common/base/json_parse.h"
#include "coordinator/datasets/dataset_catalog.h"
#include "coordinator/http/responses.h"
#include "coordinator/http/rest_api.h"
#include "coordinator/store/job_json.h"
#include "coordinator/models/model_service.h"

namespace pstrain {
namespace {

// The answer of a download (a model's or checkpoint's file, or JSON), or its error.
HttpResponse download_response(ModelService::Result result) {
  if (result.error) return service_problem(*result.error);
  HttpResponse r;
  r.content_type = result.content_type;
  if (result.file) {
    r.file = std::make_shared<const StoredFile>(std::move(*result.file));  // sent piece by piece
  } else {
    r.body = std::move(result.json);
  }
  r.headers.emplace_back("Content-Disposition", "attachment; filename=\"" + result.filename + "\"");
  return r;
}

// A predict or evaluate request's body must be JSON (an evaluation may have none).
std::optional<HttpResponse> json_body_problem(const HttpRequest& request, bool may_be_empty) {
  if (media_type(request.content_type) == "application/json" || (may_be_empty && request.body.empty())) return std::nullopt;
  return problem(415, "unsupported-media-type", "Unsupported media type",
                 "send application/json, not '" + request.content_type + "'", "Content-Type");
}

}  // namespace

void RestApi::add_model_routes() {
  using Args = const std::vector<std::string>&;
  auto json_answer = [](const Responder& respond) {
    return [respond](ModelService::Result result) {
      if (result.error) return respond(service_problem(*result.error));
      respond(json_response(200, std::move(result.json)));
    };
  };
  router_.add("GET", "/v1/models", [this](const HttpRequest&, Args, const Responder& respond) {
    respond(json_response(200, model_list_json(store_.list(), store_.uploads().list())));
  });
  router_.add("POST", "/v1/models", [this](const HttpRequest& request, Args, const Responder& respond) {
    ModelService::Upload upload;
    upload.path = request.body_file;
    upload.bytes = request.body_file.empty() ? request.body.size() : request.body_bytes;
    upload.sha256 = request.body_sha256;
    upload.body = request.body;
    if (const auto params = query_params(request.target); params.count("name") != 0) upload.name = params.at("name");
    if (media_type(request.content_type) != "application/octet-stream") {  // only a test gets here (plan_body)
      return respond(problem(415, "unsupported-media-type", "Unsupported media type",
                             "send the safetensors file as application/octet-stream", "Content-Type"));
    }
    models_->upload(std::move(upload), [respond](ModelService::Result result) {
      if (result.error) return respond(service_problem(*result.error));
      HttpResponse r = json_response(201, std::move(result.json));
      const auto id = parse_json(r.body).as_object().at("id").as_string();
      r.headers.emplace_back("Location", "/v1/models/" + std::string(id));
      respond(std::move(r));
    });
  });
  router_.add("POST", "/v1/models/{id}:predict", [this, json_answer](const HttpRequest& request, Args a, const Responder& respond) {
    if (auto refused = json_body_problem(request, false)) return respond(std::move(*refused));
    models_->predict(a[0], request.body, json_answer(respond));
  });
  router_.add("POST", "/v1/models/{id}:evaluate", [this, json_answer](const HttpRequest& request, Args a, const Responder& respond) {
    if (auto refused = json_body_problem(request, true)) return respond(std::move(*refused));
    models_->evaluate(a[0], request.body, json_answer(respond), true);
  });
  router_.add("GET", "/v1/models/{id}", [this](const HttpRequest&, Args a, const Responder& respond) {
    const std::string& id = a[0];
    if (const auto upload = store_.uploads().get(id)) return respond(json_response(200, uploaded_model_json(*upload)));
    const auto job = store_.get(id);
    if (!job || !job->has_model) {
      return respond(problem(404, "model-not-found", "No such model",
                             "there is no model '" + id + "' (a model is an uploaded one, model-N, or a job that SUCCEEDED)"));
    }
    respond(json_response(200, model_json(*job)));
  });
  router_.add("DELETE", "/v1/models/{id}", [this](const HttpRequest&, Args a, const Responder& respond) {
    models_->erase(a[0], [respond](ModelService::Result result) {
      if (result.error) return respond(service_problem(*result.error));
      HttpResponse r;
      r.status = 204;
      respond(std::move(r));
    });
  });
  router_.add("GET", "/v1/models/{id}/file", [this](const HttpRequest& request, Args a, const Responder& respond) {
    std::string format = "safetensors";
    for (const auto& [key, value] : query_params(request.target)) {
      if (key != "format") {
        return respond(problem(400, "unknown-parameter", "Unknown query parameter",
                               "'" + key + "' is not a parameter of a model download (known: format)", key));
      }
      format = value;
    }
    auto answer = [respond](ModelService::Result result) { respond(download_response(std::move(result))); };
    if (format == "onnx") return models_->onnx(a[0], std::nullopt, answer);
    if (format != "safetensors") {
      return respond(problem(400, "invalid-parameter", "Invalid query parameter",
                             "format must be safetensors or onnx, not '" + format + "'", "format"));
    }
    models_->file(a[0], answer);
  });
  router_.add("POST", "/v1/jobs/{id}/evaluate", [this, json_answer](const HttpRequest& request, Args a, const Responder& respond) {
    if (auto refused = json_body_problem(request, true)) return respond(std::move(*refused));
    models_->evaluate(a[0], request.body, json_answer(respond));
  });
  router_.add("GET", "/v1/jobs/{id}/checkpoints/{step}", [this](const HttpRequest& request, Args a, const Responder& respond) {
    bool optimizer = false;
    for (const auto& [key, value] : query_params(request.target)) {
      if (key == "format" && (value == "onnx" || value == "safetensors")) {
        if (value == "onnx") {
          return models_->onnx(a[0], a[1], [respond](ModelService::Result result) {
            respond(download_response(std::move(result)));
          });
        }
        continue;
      }
      if (key == "format") {
        return respond(problem(400, "invalid-parameter", "Invalid query parameter",
                               "format must be safetensors or onnx, not '" + value + "'", "format"));
      }
      if (key != "optimizer") {
        return respond(problem(400, "unknown-parameter", "Unknown query parameter",
                               "'" + key + "' is not a parameter of a checkpoint download (known: optimizer, format)", key));
      }
      if (value != "true" && value != "false") {
        return respond(problem(400, "invalid-parameter", "Invalid query parameter",
                               "optimizer must be true or false, not '" + value + "'", "optimizer"));
      }
      optimizer = value == "true";
    }
    models_->checkpoint(a[0], a[1], optimizer, [respond](ModelService::Result result) {
      respond(download_response(std::move(result)));
    });
  });
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

}  // namespace pstrain
