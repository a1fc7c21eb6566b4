// The REST API of the coordinator as a pure function from request to response (no sockets, so
// it is testable on its own): routing, input checks, and one error form: problem+json (RFC 9457)
// with the right status, naming the field at fault.
//
// Reads are served from the JobStore; commands (submit, cancel) go through JobCommands, which the
// coordinator implements by running them on its event-loop thread.
//
// Thread rules: thread-safe (the HTTP thread calls handle(); state is in JobStore and atomics).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/data/job_spec.h"
#include "coordinator/base/event_stream.h"
#include "coordinator/http/access_control.h"
#include "coordinator/http/http_types.h"
#include "coordinator/http/request_counters.h"
#include "coordinator/http/router.h"
#include "coordinator/store/job_store.h"
#include "coordinator/base/stored_file.h"
#include "coordinator/study/study_store.h"

namespace pstrain {

namespace rpc {
class AuthRefusals;
}  // namespace rpc

class JobCommands {
 public:
  virtual ~JobCommands() = default;
  virtual std::string submit(JobSpec spec) = 0;  // returns the new job's id
  enum class CancelResult { kCancelled, kNotFound, kAlreadyFinished };
  virtual CancelResult cancel(const std::string& id) = 0;
};

// Study commands (create, cancel), run by the coordinator on its event-loop thread
// (KjStudyCommands); answered once durable.
class StudyCommands {
 public:
  virtual ~StudyCommands() = default;
  virtual std::string submit(StudySpec spec) = 0;  // returns the new study's id
  enum class CancelResult { kCancelled, kNotFound, kAlreadyFinished };
  virtual CancelResult cancel(const std::string& id) = 0;
};

class DatasetCatalog;
class ModelService;
class WebUi;

// A job spec text with /model/input_shape filled in from its dataset when the model has none
// (with_inferred_input_shape, job_spec.h): the catalog's record of the dataset, or the built-in
// table's without a catalog. Any other text as it is (the parse then says what is wrong).
std::string spec_with_input_shape(const std::string& spec_json, DatasetCatalog* catalog);

class RestApi {
 public:
  static constexpr size_t kMaxBodyBytes = 1 << 20;

  // `catalog` may be null: no dataset routes, and jobs are checked against the built-in table.
  // `models` may be null: no predictions or evaluations. `web` may be null: no dashboard at `/`.
  RestApi(JobStore& store, JobCommands& commands, std::string openapi_json, DatasetCatalog* catalog = nullptr,
          ModelService* models = nullptr, const WebUi* web = nullptr);
  // Largest body of a predict request (instances as JSON text).
  static constexpr size_t kMaxPredictBodyBytes = size_t{64} << 20;
  // /metrics has per-job series (labelled job="ID") for every unfinished job and for the
  // kMetricsFinishedJobs that finished last: a scrape's size does not grow with the job history.
  static constexpr size_t kMetricsFinishedJobs = 10;

  // Any request, waiting for the answer (for dataset uploads and splits, until the catalog's
  // thread is done): for tests and callers that may block.
  HttpResponse handle(const HttpRequest& request);
  // Any request: answers at once through `respond` (handle()), or later for work that runs on
  // the catalog's thread. The HTTP server calls this.
  void handle_async(HttpRequest request, Responder respond);
  // Called with a request's headers (body empty): where its body goes. Dataset uploads stream to
  // a file in the catalog's staging directory, after the checks that need no body (name, split,
  // media type, Content-Length over the limit, an existing split) so a refused upload is not sent.
  BodyPlan plan_body(const HttpRequest& head);

  // With tokens, every request but the public ones (access_control.h) needs a bearer token of a
  // role that may make it: 401 without one (or with an unknown one), 403 for a weaker role.
  // Without (the default), the API is open. Set before serving.
  void set_access_tokens(std::shared_ptr<const AccessTokens> tokens) { tokens_ = std::move(tokens); }

  // The cluster's connections refused at their handshake (wrong or missing cluster secret), counted
  // by the coordinator's RPC listener (thread-safe), shown in /metrics. Set before serving; must
  // outlive this object.
  void set_cluster_auth_refusals(const rpc::AuthRefusals* refusals) { rpc_refusals_ = refusals; }

  // Serves /v1/studies from `store` with `commands` (set before serving; both must outlive this
  // object). Without, the study routes answer 404 studies-not-served.
  void set_studies(const StudyStore* store, StudyCommands* commands) {
    studies_ = store;
    study_commands_ = commands;
  }

  // Bounds of each event stream's queue (set before serving).
  void set_event_limits(EventQueueLimits limits) { event_limits_ = limits; }

  // Counts a response for /metrics (the HTTP server calls this for responses it makes itself,
  // such as 413 or 408, too).
  void count(const std::string& route, unsigned status) { counters_.count(route, status); }

 private:
  // The route table, by area: each adds its routes (job_routes.cc, dataset_routes.cc,
  // model_routes.cc); the order of the calls is the order of matching.
  void add_job_routes();
  void add_dataset_routes();
  void add_model_routes();
  void add_study_routes();  // study_routes.cc
  // The refusal of a request its caller may not make, or nullopt. Takes an access_token query
  // parameter (GET and HEAD: event streams and download links cannot send a header) out of the
  // target, so that no route sees it.
  std::optional<HttpResponse> authorize(HttpRequest& request);
  // plan_body for a dataset upload (PUT /v1/datasets/{name}/{split}[/{part}]) and a model upload
  // (POST /v1/models).
  BodyPlan plan_dataset_upload(const HttpRequest& head, const Router::Match& route);
  BodyPlan plan_model_upload(const HttpRequest& head);
  HttpResponse submit(const HttpRequest& request);
  HttpResponse submit_study(const HttpRequest& request);
  // Checks a job spec (a study's trial) as POST /v1/jobs does; throws SpecError.
  void check_job_spec(const std::string& spec_json) const;
  std::vector<std::string> jobs_using(const std::string& dataset) const;
  HttpResponse prometheus() const;  // prometheus.cc
  // GET /v1/jobs/{id}/events (empty id: GET /v1/events).
  HttpResponse event_stream(const HttpRequest& request, const std::string& id);

  Router router_;  // built by the constructor, read-only after
  JobStore& store_;
  JobCommands& commands_;
  std::shared_ptr<const AccessTokens> tokens_;  // null: open
  const rpc::AuthRefusals* rpc_refusals_ = nullptr;
  std::string openapi_json_;
  DatasetCatalog* catalog_;
  ModelService* models_;
  const WebUi* web_;
  const StudyStore* studies_ = nullptr;
  StudyCommands* study_commands_ = nullptr;
  EventQueueLimits event_limits_;
  RequestCounters counters_;
  StatusCache status_cache_;
};

}  // namespace pstrain
