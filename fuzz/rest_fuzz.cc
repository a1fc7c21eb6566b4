// Fuzz target: the REST layer as the coordinator's HTTP server drives it (coordinator/http/
// http_server.cc), without sockets: bytes → Beast's request parser with the server's limits
// (16 KiB of headers; the body's limit from RestApi::plan_body, else RestApi::kMaxBodyBytes, a
// declared Content-Length over it refused before any of the body is read) → RestApi::handle.
// The API runs on an in-memory JobStore (a JobStore on KvStore::in_memory()) holding one running job with metrics,
// and a stub JobCommands that changes nothing: the parser, router and checks are under test, not
// the event loop. No dataset catalog and no model service: those
// routes answer 404 here (their bodies go to files, on the catalog's thread).
//
// An input may hold up to 4 pipelined requests (as on a keep-alive connection). Every answer must
// be a status in 100..599; an error (4xx, 5xx) must be problem+json whose body parses and carries
// the same status.
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "common/base/json_parse.h"
#include "common/data/job_spec.h"
#include "coordinator/http/rest_api.h"
#include "coordinator/store/job_json.h"
#include "coordinator/store/job_store.h"
#include "fuzz/fuzz_check.h"

namespace http = boost::beast::http;

namespace {

using pstrain::fuzz::broken;

// Commands that change nothing, so that every input meets the same API (a fresh store per input
// costs a writer thread and its hand-offs: 20x slower): submit answers the existing job's id,
// cancel cancels job-1 and finds no other.
class StubCommands final : public pstrain::JobCommands {
 public:
  std::string submit(pstrain::JobSpec) override { return "job-1"; }
  CancelResult cancel(const std::string& id) override {
    return id == "job-1" ? CancelResult::kCancelled : CancelResult::kNotFound;
  }
};

// Studies the same way: submit answers study-1 (in the fixture's store), cancel finds it.
class StubStudyCommands final : public pstrain::StudyCommands {
 public:
  std::string submit(pstrain::StudySpec) override { return "study-1"; }
  CancelResult cancel(const std::string& id) override {
    return id == "study-1" ? CancelResult::kAlreadyFinished : CancelResult::kNotFound;
  }
};

const std::string& job_1_spec() {
  static const std::string spec = [] {
    pstrain::JobSpec s = pstrain::parse_job_spec(R"({"name": "mnist-mlp", "dataset": {"name": "mnist10k"},
      "model": {"input_shape": [784], "layers": [{"type": "dense", "units": 10}]}, "optimizer": {"type": "sgd"},
      "training": {"global_batch_size": 32, "epochs": 2}})");
    return pstrain::job_spec_to_json(s);
  }();
  return spec;
}

void check_response(const pstrain::HttpResponse& r) {
  if (r.status < 100 || r.status > 599) broken("status " + std::to_string(r.status));
  if (r.status < 400) return;
  if (r.content_type != "application/problem+json") broken("an error that is not problem+json: " + r.content_type);
  boost::system::error_code ec;
  const boost::json::value body = pstrain::parse_json(r.body, ec);
  if (ec || !body.is_object()) broken("problem body is not a JSON object: " + r.body);
  const auto* status = body.as_object().if_contains("status");
  if (status == nullptr || !status->is_number() || status->to_number<int64_t>() != r.status) {
    broken("problem status differs from the response's: " + r.body);
  }
}

// One request from `bytes` (consumed as parsed); nullopt when the bytes end before it does.
// `answer` gets what the server would answer (its own 400/413/431, or the API's).
bool serve_one(std::string_view& bytes, pstrain::RestApi& api) {
  boost::beast::error_code ec;
  http::request_parser<http::empty_body> header_parser;
  header_parser.header_limit(16 * 1024);
  header_parser.body_limit(boost::none);
  header_parser.eager(false);
  while (!header_parser.is_header_done()) {
    const size_t used = header_parser.put(boost::asio::buffer(bytes.data(), bytes.size()), ec);
    bytes.remove_prefix(used);
    if (ec == http::error::need_more) return false;  // the server would time out (408)
    if (ec) return false;                             // 400 / 431: the connection closes
    if (used == 0) return false;
  }
  const auto& header = header_parser.get();
  pstrain::HttpRequest request;
  request.method = std::string(header.method_string());
  request.target = std::string(header.target());
  if (const auto it = header.find(http::field::content_type); it != header.end()) request.content_type = std::string(it->value());
  if (const auto it = header.find(http::field::if_none_match); it != header.end()) request.if_none_match = std::string(it->value());
  if (const auto length = header_parser.content_length()) request.content_length = *length;
  if (const auto it = header.find("Last-Event-ID"); it != header.end()) request.last_event_id = std::string(it->value());

  pstrain::BodyPlan plan = api.plan_body(request);
  if (plan.kind == pstrain::BodyPlan::Kind::kReject) {
    check_response(*plan.reject);
    return false;  // the body is never read: the connection closes
  }
  if (plan.kind == pstrain::BodyPlan::Kind::kFile) broken("a body to a file without a catalog");
  const uint64_t limit = plan.max_bytes != 0 ? plan.max_bytes : pstrain::RestApi::kMaxBodyBytes;
  if (request.content_length && *request.content_length > limit) return false;  // 413, closes
  http::request_parser<http::string_body> body_parser(std::move(header_parser));
  body_parser.body_limit(limit);
  while (!body_parser.is_done()) {
    const size_t used = body_parser.put(boost::asio::buffer(bytes.data(), bytes.size()), ec);
    bytes.remove_prefix(used);
    if (ec && ec != http::error::need_more) return false;  // 400 or 413: closes
    if (used == 0) {
      // Every byte left was offered: the request is incomplete, unless its body ends at EOF.
      if (!body_parser.need_eof()) return false;  // the server would time out (408)
      body_parser.put_eof(ec);
      if (ec) return false;
      break;
    }
  }
  request.body = std::move(body_parser.get().body());
  const bool keep_alive = body_parser.get().keep_alive();
  const pstrain::HttpResponse response = api.handle(request);
  check_response(response);
  return keep_alive && !response.close;
}

struct Fixture {
  std::unique_ptr<pstrain::KvStore> kv = pstrain::KvStore::in_memory();
  pstrain::JobStore store{*kv};
  StubCommands commands;
  pstrain::RestApi api{store, commands, "{\"openapi\": \"3.0.3\"}"};
  pstrain::StudyStore studies{*kv};
  StubStudyCommands study_commands;

  Fixture() {
    pstrain::StudyRecord study;
    study.id = "study-1";
    study.spec = pstrain::parse_study_spec(
        R"({"spec": )" + job_1_spec() + R"(, "search_space": {"/optimizer/learning_rate": {"choice": [0.1, 0.2]}}})",
        [](const std::string&) {});
    study.trials.push_back({0, pstrain::TrialState::kCompleted, "", {{2, "job-1", 0.5, 0, 0}}, 10, 5});
    studies.add(study);
    api.set_studies(&studies, &study_commands);
    pstrain::JobRecord job;
    job.id = "job-1";
    job.name = "mnist-mlp";
    job.spec_json = job_1_spec();
    job.state = pstrain::JobState::kRunning;
    job.mode = "sync";
    job.epochs = 2;
    job.submitted_ms = 1700000000000;
    store.add(job);
    store.append_step("job-1", {.worker = 0, .epoch = 1, .step = 1, .loss = 2.3, .accuracy = 0.1, .time_ms = 1700000001000});
    store.append_epoch("job-1", {.epoch = 1, .train_loss = 1.0, .train_accuracy = 0.5, .time_ms = 1700000002000});
    store.flush();
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture* fixture = new Fixture;  // for the whole run: the API's state stays bounded
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  for (int i = 0; i < 4 && !bytes.empty(); ++i) {
    if (!serve_one(bytes, fixture->api)) break;
  }
  return 0;
}
