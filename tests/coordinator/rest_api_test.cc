// RestApi (coordinator/http/rest_api.h) driven directly, without sockets: every route and every
// status it answers, with a fake JobCommands that records the commands it is given and a real
// JobStore on RocksDB in a temporary directory. What the HTTP server answers by itself (408, 431,
// 503, a body over the limit while it is read) is tests/integration/rest_test.cc's.
#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/data/job_spec.h"
#include "common/base/json_text.h"
#include "common/storage/kv_store.h"
#include "coordinator/http/rest_api.h"
#include "coordinator/store/job_store.h"
#include "coordinator/datasets/dataset_catalog.h"
#include "coordinator/models/model_service.h"
#include "coordinator/openapi_document.h"
#include "tests/test_support.h"

using namespace pstrain;
using namespace std::chrono_literals;
namespace json = boost::json;

namespace {

// ---- The fake commands.

// Records every command; answers with the id and CancelResult the test chose. Like the real
// coordinator, a submit adds the job's record to the store and a cancel marks it CANCELLED.
class FakeCommands final : public JobCommands {
 public:
  explicit FakeCommands(JobStore& store) : store_(store) {}

  std::string submit(JobSpec spec) override {
    calls.push_back("submit " + spec.name);
    specs.push_back(spec);
    if (!submit_error.empty()) throw std::runtime_error(submit_error);
    if (record_submissions) {
      JobRecord record;
      record.id = submit_id;
      record.name = spec.name;
      record.spec_json = job_spec_to_json(spec);
      record.mode = "sync";
      record.epochs = spec.training.epochs;
      record.submitted_ms = now_ms();
      store_.add(std::move(record));
    }
    return submit_id;
  }

  CancelResult cancel(const std::string& id) override {
    calls.push_back("cancel " + id);
    if (cancel_result == CancelResult::kCancelled) {
      store_.update(id, [](JobRecord& r) {
        r.state = JobState::kCancelled;
        r.reason = "cancelled by request";
        r.finished_ms = now_ms();
      });
      store_.flush();  // as KjJobCommands does: the answer waits until the change is durable
    }
    return cancel_result;
  }

  // What the next commands answer.
  std::string submit_id = "job-1";
  bool record_submissions = true;  // false: the id comes back, but no record is in the store
  std::string submit_error;        // not empty: submit throws std::runtime_error with this text
  CancelResult cancel_result = CancelResult::kCancelled;

  std::vector<std::string> calls;  // "submit <name>", "cancel <id>", in order
  std::vector<JobSpec> specs;      // what submit received

 private:
  JobStore& store_;
};

using Calls = std::vector<std::string>;

// ---- The API under test, on a store in a temporary RocksDB.

std::unique_ptr<KvStore> open_kv(const testing::TempDir& dir) {
  std::string error;
  auto kv = KvStore::open(dir.path(), &error);
  if (kv == nullptr) throw std::runtime_error("opening the job store: " + error);
  return kv;
}

JobRecord job(const std::string& id, const std::string& state) {
  JobRecord r;
  r.id = id;
  r.name = "mnist-mlp";
  r.state = parse_job_state(state).value();
  r.mode = "sync";
  r.spec_json = job_spec_to_json(testing::mlp_job(16, 8, 3));
  r.submitted_ms = 1700000000000;
  r.epochs = 3;
  return r;
}

struct Api {
  testing::TempDir dir;
  std::unique_ptr<KvStore> kv = open_kv(dir);
  JobStore store{*kv};
  FakeCommands commands{store};
  DatasetCatalog catalog{DatasetCatalog::Options{testing::data_dir(), "", 1 << 20, {}}, *kv, nullptr};
  ModelService models{store, catalog};
  RestApi api{store, commands, openapi_document(), &catalog, &models};

  HttpResponse call(const std::string& method, const std::string& target, std::string body = {},
                    std::string content_type = {}) {
    return api.handle(HttpRequest{method, target, std::move(content_type), std::move(body)});
  }
  HttpResponse get(const std::string& target) { return call("GET", target); }
  HttpResponse post_json(const std::string& target, std::string body) {
    return call("POST", target, std::move(body), "application/json");
  }
  void add(const std::string& id, const std::string& state) { store.add(job(id, state)); }
};

// ---- Reading responses: lenient, so that a wrong answer fails a CHECK instead of throwing.

std::string describe(const HttpResponse& r) {
  std::string text = "HTTP " + std::to_string(r.status) + " [" + r.content_type + "] ";
  return text + (r.body.size() > 600 ? r.body.substr(0, 600) + "..." : r.body);
}

std::string header(const HttpResponse& r, const std::string& name) {
  for (const auto& [key, value] : r.headers) {
    if (key == name) return value;
  }
  return "(none)";
}

json::object object_of(const HttpResponse& r) {
  boost::system::error_code ec;
  json::value v = json::parse(r.body, ec);
  if (ec || !v.is_object()) {
    FAIL_CHECK("the body is not a JSON object: " << describe(r));
    return {};
  }
  return std::move(v.as_object());
}

// The member at `key`, or a string that says it is missing (no JSON value serializes like it).
std::string field(const json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  return v == nullptr ? "(missing)" : to_json_text(*v);
}

std::string str(const json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : "(not a string: " + field(o, key) + ")";
}

double num(const json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  return v != nullptr && v->is_number() ? v->to_number<double>() : std::nan("");
}

json::array arr(const json::object& o, std::string_view key) {  // a copy: `o` may be a temporary
  const auto* v = o.if_contains(key);
  return v != nullptr && v->is_array() ? v->as_array() : json::array();
}

json::object obj(const json::value& v) { return v.is_object() ? v.as_object() : json::object(); }

// A 200 (or `status`) application/json answer; its body.
json::object ok_json(const HttpResponse& r, unsigned status = 200) {
  INFO(describe(r));
  CHECK(r.status == status);
  CHECK(r.content_type == "application/json");
  return object_of(r);
}

// A problem+json answer (RFC 9457) of `status` and urn:pstrain:problem:`type`, naming `field_at_fault`
// (and starting its detail with it) if given, else without a field. Returns the detail.
std::string check_problem(const HttpResponse& r, unsigned status, const std::string& type,
                          const std::string& field_at_fault = {}) {
  INFO(describe(r));
  CHECK(r.status == status);
  CHECK(r.content_type == "application/problem+json");
  const json::object o = object_of(r);
  CHECK(str(o, "type") == "urn:pstrain:problem:" + type);
  CHECK(!str(o, "title").empty());
  CHECK(field(o, "status") == std::to_string(status));
  const std::string detail = str(o, "detail");
  CHECK(!detail.empty());
  if (field_at_fault.empty()) {
    CHECK(field(o, "field") == "(missing)");
  } else {
    CHECK(str(o, "field") == field_at_fault);
    CHECK(detail.rfind(field_at_fault + " ", 0) == 0);
  }
  return detail;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// ---- Prometheus text format (0.0.4).

struct Exposition {
  std::map<std::string, double> samples;  // "name{labels}" as written -> value
  std::vector<std::string> errors;        // lines that break the format
};

bool metric_name(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != ':') return false;
  }
  return true;
}

// The end of the label set `{name="value",...}` that starts at line[i], or npos if it is malformed
// (label values may escape \\, \" and \n, nothing else).
size_t labels_end(const std::string& line, size_t i) {
  for (++i; i < line.size() && line[i] != '}';) {
    const size_t eq = line.find('=', i);
    if (eq == std::string::npos || !metric_name(line.substr(i, eq - i)) || line.compare(eq, 2, "=\"") != 0) {
      return std::string::npos;
    }
    for (i = eq + 2; i < line.size() && line[i] != '"'; ++i) {
      if (line[i] == '\\' && (++i == line.size() || std::string_view("\\\"n").find(line[i]) == std::string::npos)) {
        return std::string::npos;
      }
    }
    if (i == line.size()) return std::string::npos;
    if (++i < line.size() && line[i] == ',') ++i;
  }
  return i < line.size() ? i + 1 : std::string::npos;
}

// Parses the exposition strictly: HELP and TYPE once per family and before its samples, then
// `name{labels} value` lines with numbers for values.
Exposition parse_exposition(const std::string& text) {
  Exposition out;
  std::set<std::string> typed, helped;
  if (text.empty() || text.back() != '\n') out.errors.push_back("the text does not end with a newline");
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    const std::string line = text.substr(start, end - start);
    start = end == std::string::npos ? text.size() : end + 1;
    auto error = [&](const std::string& what) { out.errors.push_back(what + ": '" + line + "'"); };
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
      const std::string rest = line.substr(7);
      const size_t space = rest.find(' ');
      const std::string name = rest.substr(0, space), value = space == std::string::npos ? "" : rest.substr(space + 1);
      if (!metric_name(name) || value.empty()) error("a comment without name and text");
      if (!(line[2] == 'H' ? helped : typed).insert(name).second) {
        error("a second " + line.substr(2, 4) + " for " + name);
      }
      if (line[2] == 'T' && value != "counter" && value != "gauge") error("an unexpected type");
      continue;
    }
    const size_t name_end = std::min(line.find_first_of("{ "), line.size());
    const std::string name = line.substr(0, name_end);
    if (!metric_name(name)) {
      error("not a sample");
      continue;
    }
    if (typed.count(name) == 0) error("a sample before its # TYPE");
    const size_t key_end = line[name_end] == '{' ? labels_end(line, name_end) : name_end;
    if (key_end == std::string::npos || key_end >= line.size() || line[key_end] != ' ') {
      error("malformed labels or no value");
      continue;
    }
    const std::string value = line.substr(key_end + 1);
    char* parsed_end = nullptr;
    const double v = std::strtod(value.c_str(), &parsed_end);
    if (value.empty() || *parsed_end != '\0') error("a value that is not a number");
    if (!out.samples.emplace(line.substr(0, key_end), v).second) error("a repeated sample");
  }
  return out;
}

// The samples of `name` (with their labels), for comparing a whole family at once.
std::map<std::string, double> family(const Exposition& e, const std::string& name) {
  std::map<std::string, double> out;
  for (const auto& [key, value] : e.samples) {
    if (key.rfind(name + "{", 0) == 0) out[key.substr(name.size())] = value;
  }
  return out;
}

Exposition scrape(Api& a) {
  const HttpResponse r = a.get("/metrics");
  INFO(describe(r));
  CHECK(r.status == 200);
  CHECK(r.content_type == "text/plain; version=0.0.4");
  Exposition e = parse_exposition(r.body);
  std::string errors;
  for (const std::string& error : e.errors) errors += error + "\n";
  CHECK(errors == "");
  return e;
}

std::string counter(const std::string& route, unsigned status) {
  return "{route=\"" + route + "\",status=\"" + std::to_string(status) + "\"}";
}

// ---- Routes and specs.

// Every route of the API, with the methods it allows (its Allow header on a 405).
struct Route {
  std::string path;  // with {id} where the job id goes
  std::string allow;
};
const std::vector<Route> kRoutes = {
    {"/healthz", "GET, HEAD"},
    {"/metrics", "GET, HEAD"},
    {"/v1/openapi.json", "GET, HEAD"},
    {"/v1/cluster", "GET, HEAD"},
    {"/v1/events", "GET, HEAD"},
    {"/v1/jobs", "GET, HEAD, POST"},
    {"/v1/jobs/{id}", "GET, HEAD"},
    {"/v1/jobs/{id}/metrics", "GET, HEAD"},
    {"/v1/jobs/{id}/events", "GET, HEAD"},
    {"/v1/jobs/{id}/cancel", "POST"},
    {"/v1/jobs/{id}/model", "GET, HEAD"},
    {"/v1/jobs/{id}/evaluate", "POST"},
    {"/v1/jobs/{id}/checkpoints", "GET, HEAD"},
    {"/v1/jobs/{id}/checkpoints/{step}", "GET, HEAD"},
    {"/v1/models", "GET, HEAD, POST"},
    {"/v1/models/{id}", "GET, HEAD, DELETE"},
    {"/v1/models/{id}/file", "GET, HEAD"},
    {"/v1/models/{id}:predict", "POST"},
    {"/v1/models/{id}:evaluate", "POST"},
    {"/v1/datasets", "GET, HEAD"},
    {"/v1/datasets/{name}", "GET, HEAD, DELETE"},
    {"/v1/datasets/{name}/split", "POST"},
    {"/v1/studies", "GET, HEAD, POST"},
    {"/v1/studies/{id}", "GET, HEAD"},
    {"/v1/studies/{id}/cancel", "POST"},
    {"/v1/datasets/{name}/{split}", "PUT"},
    {"/v1/datasets/{name}/{split}/{part}", "PUT"},
};

// A route's path with its parameters filled in: the job id, dataset "ds", split "train", part
// "images", step "latest".
std::string with_id(std::string path, const std::string& id) {
  for (const auto& [param, value] : std::vector<std::pair<std::string, std::string>>{
           {"{id}", id}, {"{name}", "ds"}, {"{split}", "train"}, {"{part}", "images"}, {"{step}", "latest"}}) {
    if (const size_t at = path.find(param); at != std::string::npos) path.replace(at, param.size(), value);
  }
  return path;
}

std::string valid_spec() { return job_spec_to_json(testing::mlp_job(16, 8, 2)); }

// The valid spec with one change.
std::string spec_with(const std::function<void(json::object&)>& change) {
  json::value v = json::parse(valid_spec());
  change(v.as_object());
  return to_json_text(v);
}

json::object& layer(json::object& spec, size_t i) {
  return spec["model"].as_object()["layers"].as_array()[i].as_object();
}

}  // namespace

TEST_CASE("RestApi: GET /healthz answers ok, also to HEAD") {
  Api a;
  for (const char* method : {"GET", "HEAD"}) {
    INFO("method: " << method);
    const json::object o = ok_json(a.call(method, "/healthz"));
    CHECK(to_json_text(o) == R"({"status":"ok"})");
  }
  CHECK(a.commands.calls == Calls{});
}

TEST_CASE("RestApi: POST /v1/jobs submits the parsed spec and answers 201 with its status and Location") {
  Api a;
  a.commands.submit_id = "job-7";
  const HttpResponse r = a.post_json("/v1/jobs", valid_spec());
  const json::object o = ok_json(r, 201);
  CHECK(header(r, "Location") == "/v1/jobs/job-7");
  CHECK(str(o, "id") == "job-7");
  CHECK(str(o, "name") == "mnist-mlp");
  CHECK(str(o, "state") == "PENDING");
  CHECK(str(o, "mode") == "sync");
  CHECK(num(o, "epochs") == 2);
  CHECK(num(o, "step") == 0);
  CHECK(field(o, "reason") == "null");
  CHECK(field(o, "model") == "null");
  CHECK(to_json_text(o.at("spec")) == to_json_text(json::parse(valid_spec())));
  REQUIRE(a.commands.calls == Calls{"submit mnist-mlp"});
  CHECK(job_spec_to_json(a.commands.specs.at(0)) == valid_spec());

  SUBCASE("the media type may have parameters and any case") {
    for (const char* type : {"Application/JSON; charset=utf-8", "application/json ;charset=UTF-8"}) {
      INFO("type: " << type);
      CHECK(a.call("POST", "/v1/jobs", valid_spec(), type).status == 201);
    }
    CHECK(a.commands.calls.size() == 3);
  }
  SUBCASE("without model.input_shape, the dataset's example shape is the model's (the record shows it)") {
    a.commands.submit_id = "job-9";
    const std::string bare = spec_with([](json::object& o) { o["model"].as_object().erase("input_shape"); });
    const json::object submitted = ok_json(a.post_json("/v1/jobs", bare), 201);
    CHECK(to_json_text(submitted.at("spec").as_object().at("model").as_object().at("input_shape")) == "[28,28,1]");
    CHECK(job_spec_to_json(a.commands.specs.back()) == valid_spec());
    // A shape that does not fit stays a 422 naming the right one.
    const std::string wrong = spec_with([](json::object& o) { o["model"].as_object()["input_shape"] = json::array{27, 28, 1}; });
    const HttpResponse refused = a.post_json("/v1/jobs", wrong);
    CHECK(refused.status == 422);
    CHECK(refused.body.find("/model/input_shape") != std::string::npos);
    CHECK(refused.body.find("28x28x1") != std::string::npos);
  }
  SUBCASE("a sparse embedding table is taken: the servers hold it in row pieces") {
    const std::string sparse = spec_with([](json::object& o) {
      json::object& model = o["model"].as_object();
      model["input_shape"] = json::array{784};
      model["layers"] = json::parse(R"([{"type": "embedding", "input_dim": 256, "output_dim": 2, "sparse": true},
          {"type": "flatten"}, {"type": "dense", "units": 10}])");
    });
    ok_json(a.post_json("/v1/jobs", sparse), 201);
  }
  SUBCASE("without a record in the store, the answer still names the job") {
    a.commands.record_submissions = false;
    a.commands.submit_id = "job-8";
    const HttpResponse bare = a.post_json("/v1/jobs", valid_spec());
    CHECK(to_json_text(ok_json(bare, 201)) == R"({"id":"job-8"})");
    CHECK(header(bare, "Location") == "/v1/jobs/job-8");
  }
}

TEST_CASE("RestApi: GET /v1/jobs lists every job in submission order, and GET /v1/jobs/{id} gives one's full status") {
  Api a;
  CHECK(to_json_text(ok_json(a.get("/v1/jobs"))) == R"({"jobs":[]})");

  a.add("job-1", "SUCCEEDED");
  JobRecord running = job("job-2", "RUNNING");
  running.submitted_ms += 1000;
  running.started_ms = running.submitted_ms + 10;
  running.total_steps = 120;
  running.steps_per_epoch = 40;
  running.steps_done = 30;
  running.current_epoch = 1;
  running.samples_per_second = 2114.64;
  running.train_loss = 0.5;
  running.workers = {1, 9};
  running.servers = {3};
  running.last_backup_step = 20;
  a.store.add(running);
  a.store.set_nodes({{.id = 1, .role = "worker", .name = "w", .job = "job-2", .last_heartbeat_ms = now_ms()},
                     {.id = 3, .role = "server", .name = "s", .address = "127.0.0.1:4000", .job = "job-2"}});

  for (const char* target : {"/v1/jobs", "/v1/jobs/", "/v1/jobs?state=RUNNING"}) {
    INFO("target: " << target);
    const json::array jobs = arr(ok_json(a.get(target)), "jobs");
    REQUIRE(jobs.size() == 2);
    CHECK(str(obj(jobs[0]), "id") == "job-1");
    CHECK(str(obj(jobs[0]), "state") == "SUCCEEDED");
    const json::object second = obj(jobs[1]);
    CHECK(str(second, "id") == "job-2");
    CHECK(num(second, "percent") == 25);
    CHECK(num(second, "samples_per_second") == 2114.6);
    CHECK(field(second, "spec") == "(missing)");  // the list has summaries only
  }

  for (const char* target : {"/v1/jobs/job-2", "/v1/jobs/job-2/", "/v1/jobs/job-2?fields=all"}) {
    INFO("target: " << target);
    const json::object o = ok_json(a.get(target));
    CHECK(str(o, "id") == "job-2");
    CHECK(str(o, "state") == "RUNNING");
    CHECK(num(o, "epoch") == 1);
    CHECK(num(o, "step") == 30);
    CHECK(num(o, "total_steps") == 120);
    CHECK(num(o, "steps_per_epoch") == 40);
    CHECK(num(o, "percent") == 25);
    CHECK(num(o, "train_loss") == 0.5);
    CHECK(field(o, "test_loss") == "null");
    CHECK(num(o, "eta_seconds") >= 0);
    CHECK(num(o, "last_backup_step") == 20);
    CHECK(num(o, "started_at_ms") == static_cast<double>(running.started_ms));
    CHECK(field(o, "finished_at_ms") == "null");
    CHECK(field(o, "recoveries") == R"({"count":0,"replayed_steps":[]})");
    CHECK(str(obj(o.at("spec")), "name") == "mnist-mlp");
    const json::array workers = arr(o, "workers"), servers = arr(o, "servers");
    REQUIRE(workers.size() == 2);
    CHECK(str(obj(workers[0]), "role") == "worker");
    CHECK(field(obj(workers[0]), "address") == "null");
    CHECK(to_json_text(workers[1]) == R"({"id":9,"alive":false})");  // a node the store does not know
    REQUIRE(servers.size() == 1);
    CHECK(str(obj(servers[0]), "address") == "127.0.0.1:4000");
  }
  CHECK(a.commands.calls == Calls{});
}

TEST_CASE("RestApi: GET /v1/jobs/{id}/metrics gives the step and epoch history") {
  Api a;
  a.add("job-1", "RUNNING");
  a.store.append_step("job-1", {.worker = 1, .epoch = 1, .step = 10, .loss = 1.25, .accuracy = 0.5,
                                .samples_per_second = 100, .time_ms = 5});
  a.store.append_epoch("job-1", {.epoch = 1, .train_loss = 0.75, .train_accuracy = 0.8, .test_loss = 0.5,
                                 .test_accuracy = 0.875, .samples_per_second = 200, .time_ms = 6});
  const json::object o = ok_json(a.get("/v1/jobs/job-1/metrics"));
  CHECK(str(o, "id") == "job-1");
  CHECK(field(o, "steps") ==
        R"([{"worker":1,"epoch":1,"step":10,"loss":1.25,"accuracy":0.5,"samples_per_second":100,"time_ms":5,)"
        R"("bytes_pushed_per_step":0,"bytes_pulled_per_step":0}])");
  CHECK(field(o, "epochs") ==
        R"([{"epoch":1,"train_loss":0.75,"train_accuracy":0.8,"test_loss":0.5,"test_accuracy":0.875,)"
        R"("samples_per_second":200,"time_ms":6}])");
}

TEST_CASE("RestApi: GET /v1/cluster lists the nodes the store has") {
  Api a;
  CHECK(to_json_text(ok_json(a.get("/v1/cluster"))) == R"({"nodes":[]})");
  const int64_t now = now_ms();
  a.store.set_nodes({{.id = 3, .role = "server", .name = "s", .address = "10.0.0.1:7000", .registered_ms = 11,
                      .last_heartbeat_ms = now},
                     {.id = 4, .role = "worker", .name = "w", .job = "job-1", .registered_ms = 12,
                      .last_heartbeat_ms = now - 60000, .alive = false}});
  const json::array nodes = arr(ok_json(a.get("/v1/cluster")), "nodes");
  REQUIRE(nodes.size() == 2);
  const json::object server = obj(nodes[0]), worker = obj(nodes[1]);
  CHECK(num(server, "id") == 3);
  CHECK(str(server, "role") == "server");
  CHECK(str(server, "address") == "10.0.0.1:7000");
  CHECK(field(server, "alive") == "true");
  CHECK(field(server, "job") == "null");
  CHECK(num(server, "registered_at_ms") == 11);
  CHECK(num(server, "last_heartbeat_ms_ago") >= 0);
  CHECK(num(server, "last_heartbeat_ms_ago") < 60000);
  CHECK(str(worker, "role") == "worker");
  CHECK(field(worker, "address") == "null");
  CHECK(field(worker, "alive") == "false");
  CHECK(str(worker, "job") == "job-1");
  CHECK(num(worker, "last_heartbeat_ms_ago") >= 60000);
}

TEST_CASE("RestApi: POST /v1/jobs refuses what is not a JSON job spec, before it reaches submit") {
  Api a;
  SUBCASE("415 for another media type or none") {
    for (const char* type : {"", "text/plain", "application/x-www-form-urlencoded", "application/jsonl",
                             "application/problem+json"}) {
      INFO("type: " << type);
      const std::string detail = check_problem(a.call("POST", "/v1/jobs", valid_spec(), type), 415,
                                               "unsupported-media-type");
      CHECK(contains(detail, std::string("'") + type + "'"));
    }
  }
  SUBCASE("400 for a body that is not JSON") {
    for (const std::string& body : {std::string(R"({"dataset": )"), std::string(),
                                    std::string("{\"name\": \"\xff\xfe\x80\", \"dataset\": {}}"),
                                    std::string(5000, '[') + std::string(5000, ']')}) {
      CAPTURE(body.substr(0, 40));
      const std::string detail = check_problem(a.post_json("/v1/jobs", body), 400, "malformed-json");
      CHECK(contains(detail, "not valid JSON"));
    }
  }
  SUBCASE("422 for an invalid spec, naming the field") {
    struct Case {
      const char* what;
      std::string body;
      const char* field;
    };
    const std::vector<Case> cases = {
        {"an array", "[1, 2]", "/"},
        {"a string batch size",
         spec_with([](json::object& s) { s["training"].as_object()["global_batch_size"] = "128"; }),
         "/training/global_batch_size"},
        {"negative units", spec_with([](json::object& s) { layer(s, 1)["units"] = -5; }), "/model/layers/1/units"},
        {"an unknown field", spec_with([](json::object& s) { s["optimizer"].as_object()["learning_rat"] = 0.1; }),
         "/optimizer/learning_rat"},
        {"an unknown dataset", spec_with([](json::object& s) { s["dataset"].as_object()["name"] = "imagenet"; }),
         "/dataset/name"},
        {"an unknown layer type", spec_with([](json::object& s) { layer(s, 1)["type"] = "capsule"; }),
         "/model/layers/1/type"},
        {"no training section", spec_with([](json::object& s) { s.erase("training"); }), "/training"},
        {"2^24 units", spec_with([](json::object& s) { layer(s, 1)["units"] = 1 << 24; }), "/model/layers/1"},
        {"100000 input dimensions", spec_with([](json::object& s) {
           s["model"].as_object()["input_shape"] = json::array(100000, json::value(1));
         }),
         "/model/input_shape"},
        {"an unknown async_lr", spec_with([](json::object& s) {
           s["training"].as_object()["mode"] = "async";
           s["training"].as_object()["async_lr"] = "linear";
         }),
         "/training/async_lr"},
        {"async_lr in sync mode", spec_with([](json::object& s) { s["training"].as_object()["async_lr"] = "staleness"; }),
         "/training/async_lr"},
        {"a number for async_lr", spec_with([](json::object& s) {
           s["training"].as_object()["mode"] = "async";
           s["training"].as_object()["async_lr"] = 1;
         }),
         "/training/async_lr"},
        {"an unknown on_divergence", spec_with([](json::object& s) { s["training"].as_object()["on_divergence"] = "stop"; }),
         "/training/on_divergence"},
    };
    for (const Case& c : cases) {
      INFO(c.what);
      check_problem(a.post_json("/v1/jobs", c.body), 422, "invalid-spec", c.field);
    }
  }
  SUBCASE("422 for a model that does not fit its dataset, naming the field and both sides") {
    const std::string units = check_problem(
        a.post_json("/v1/jobs", spec_with([](json::object& s) { layer(s, 3)["units"] = 5; })), 422, "invalid-spec",
        "/model/layers/3");
    CHECK(units == "/model/layers/3 must output 10 logits (the classes of mnist10k) but outputs [5]");
    const std::string shape = check_problem(a.post_json("/v1/jobs", spec_with([](json::object& s) {
                                                          s["model"].as_object()["input_shape"] = json::array{8, 8, 1};
                                                        })),
                                            422, "invalid-spec", "/model/input_shape");
    CHECK(shape == "/model/input_shape [8, 8, 1] does not match mnist10k's 28x28x1 images");
    // The flat form of the dataset's images is accepted (the dense layers then need no flatten).
    CHECK(a.post_json("/v1/jobs", spec_with([](json::object& s) {
                        s["model"].as_object()["input_shape"] = json::array{784};
                        s["model"].as_object()["layers"].as_array().erase(s["model"].as_object()["layers"].as_array().begin());
                      })).status == 201);
    CHECK(a.commands.calls == Calls{"submit mnist-mlp"});
    a.commands.calls.clear();
  }
  SUBCASE("413 for a body over kMaxBodyBytes, which is itself accepted") {
    std::string body = valid_spec();
    body.resize(RestApi::kMaxBodyBytes, ' ');  // JSON with trailing white space
    CHECK(a.post_json("/v1/jobs", body).status == 201);
    CHECK(a.commands.calls == Calls{"submit mnist-mlp"});
    a.commands.calls.clear();
    body += ' ';
    const std::string detail = check_problem(a.post_json("/v1/jobs", body), 413, "body-too-large");
    CHECK(detail == "the body has 1048577 bytes; the limit is 1048576");
  }
  CHECK(a.commands.calls == Calls{});
}

TEST_CASE("RestApi: an unknown job is 404 job-not-found on every job route") {
  Api a;
  a.commands.cancel_result = JobCommands::CancelResult::kNotFound;
  for (const Route& route : kRoutes) {
    if (route.path.find("{id}") == std::string::npos || route.path.rfind("/v1/studies", 0) == 0) continue;
    CAPTURE(route.path);
    const std::string method = route.allow == "POST" ? "POST" : "GET";
    const HttpResponse r = a.call(method, with_id(route.path, "job-99"), "{}", "application/json");
    if (route.path.rfind("/v1/models/", 0) == 0) {  // a model's id is its job's
      const std::string detail = check_problem(r, 404, "model-not-found");
      CHECK(detail.find("there is no model 'job-99'") == 0);
      continue;
    }
    const std::string detail = check_problem(r, 404, "job-not-found");
    CHECK(detail == "there is no job 'job-99'");
  }
  CHECK(a.commands.calls == Calls{"cancel job-99"});  // only cancel asks the commands
}

TEST_CASE("RestApi: unknown routes are 404 not-found, whatever the method") {
  Api a;
  a.add("job-1", "RUNNING");
  for (const char* target : {"/", "", "/v1", "/v2/jobs", "/v1/job", "/healthz/x", "/metricsx", "/v1//jobs",
                             "/v1/openapi.yaml", "/v1/cluster/3", "/v1/jobs/job-1/logs", "/v1/jobs/job-1/metrics/x",
                             "/v1/jobs/job-1/cancel/now", "/V1/jobs"}) {
    for (const char* method : {"GET", "POST", "DELETE"}) {
      INFO("target: " << target);
      INFO("method: " << method);
      const std::string detail = check_problem(a.call(method, target), 404, "not-found");
      CHECK(detail == "no route for " + std::string(target));
    }
  }
  CHECK(check_problem(a.get("/nowhere?x=/v1/jobs"), 404, "not-found") == "no route for /nowhere");
  CHECK(a.commands.calls == Calls{});
}

TEST_CASE("RestApi: another method on a known route is 405 with the Allow header") {
  Api a;
  a.add("job-1", "RUNNING");
  for (const Route& route : kRoutes) {
    const std::string target = with_id(route.path, "job-1");
    for (const char* method : {"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"}) {
      if (contains(", " + route.allow + ",", std::string(", ") + method + ",")) continue;
      INFO("target: " << target);
      INFO("method: " << method);
      const HttpResponse r = a.call(method, target + "?q=1", "{}", "application/json");
      const std::string detail = check_problem(r, 405, "method-not-allowed");
      CHECK(header(r, "Allow") == route.allow);
      CHECK(detail == std::string(method) + " is not allowed on " + target + "; allowed: " + route.allow);
    }
  }
  CHECK(a.commands.calls == Calls{});
  // Each is counted under its route.
  const auto counted = family(scrape(a), "pstrain_http_requests_total");
  for (const Route& route : kRoutes) {
    CAPTURE(route.path);
    CHECK(counted.count(counter(route.path, 405)) == 1);
  }
}

TEST_CASE("RestApi: POST /v1/jobs/{id}/cancel: 200 with the cancelled status, 409 for a finished job") {
  Api a;
  a.add("job-1", "RUNNING");
  const json::object o = ok_json(a.call("POST", "/v1/jobs/job-1/cancel"));
  CHECK(str(o, "id") == "job-1");
  CHECK(str(o, "state") == "CANCELLED");
  CHECK(str(o, "reason") == "cancelled by request");
  CHECK(num(o, "finished_at_ms") > 0);

  a.commands.cancel_result = JobCommands::CancelResult::kAlreadyFinished;
  const std::string detail = check_problem(a.call("POST", "/v1/jobs/job-1/cancel"), 409, "job-finished");
  CHECK(detail == "job 'job-1' is CANCELLED and cannot be cancelled");
  a.add("job-2", "SUCCEEDED");
  CHECK(check_problem(a.call("POST", "/v1/jobs/job-2/cancel", "{}", "application/json"), 409, "job-finished") ==
        "job 'job-2' is SUCCEEDED and cannot be cancelled");
  CHECK(a.commands.calls == Calls{"cancel job-1", "cancel job-1", "cancel job-2"});
}

TEST_CASE("RestApi: GET /v1/jobs/{id}/model: 409 before there is one, the safetensors bytes after") {
  Api a;
  a.add("job-1", "RUNNING");
  CHECK(check_problem(a.get("/v1/jobs/job-1/model"), 409, "model-not-ready") ==
        "job 'job-1' is RUNNING; the model is available once it has SUCCEEDED");

  const std::string model("\x10\0\0\0\0\0\0\0{\"a\":1}    \xff\x80\0\x01", 24);
  a.store.update("job-1", [](JobRecord& r) { r.state = JobState::kSucceeded; });
  a.store.set_model("job-1", {model.substr(0, 10), model.substr(10)});  // in two pieces
  a.store.flush();
  auto check_model = [&](RestApi& api) {
    const HttpResponse r = api.handle({"GET", "/v1/jobs/job-1/model", "", ""});
    CHECK(r.status == 200);
    CHECK(r.content_type == "application/octet-stream");
    // Not one body: the stored pieces, read one at a time as the server sends them.
    CHECK(r.body.empty());
    REQUIRE(r.file != nullptr);
    CHECK(r.file->bytes == 24);
    std::string sent;
    for (size_t i = 0; static_cast<int64_t>(sent.size()) < r.file->bytes; ++i) {
      const auto piece = r.file->read_piece(i);
      REQUIRE(piece.has_value());
      CHECK(piece->size() == (i == 0 ? 10u : 14u));
      sent += *piece;
    }
    CHECK(sent == model);
    CHECK(header(r, "Content-Disposition") == "attachment; filename=\"job-1.safetensors\"");
  };
  check_model(a.api);
  CHECK(field(ok_json(a.get("/v1/jobs/job-1")), "model") ==
        R"({"href":"/v1/jobs/job-1/model","format":"safetensors","bytes":24})");

  SUBCASE("after a restart, from RocksDB") {
    JobStore reloaded(*a.kv);
    CHECK(reloaded.load().size() == 1);
    FakeCommands commands(reloaded);
    RestApi api(reloaded, commands, "{}");
    check_model(api);
  }
  SUBCASE("500 model-missing when the record has a model the store cannot read") {
    a.add("job-2", "SUCCEEDED");
    a.store.update("job-2", [](JobRecord& r) { r.has_model = true; });
    check_problem(a.get("/v1/jobs/job-2/model"), 500, "model-missing");
  }
  CHECK(a.commands.calls == Calls{});
}

TEST_CASE("RestApi: GET /v1/jobs/{id} is cached for a moment, and a command invalidates it at once") {
  Api a;
  a.add("job-1", "RUNNING");
  auto status = [&] { return ok_json(a.get("/v1/jobs/job-1")); };
  auto progress = [&](int64_t steps) { a.store.update("job-1", [steps](JobRecord& r) { r.steps_done = steps; }); };

  // Progress the runner records shows within the cache's age (100 ms), not necessarily at once.
  const auto cached_at = std::chrono::steady_clock::now();
  CHECK(num(status(), "step") == 0);
  progress(5);
  const double second = num(status(), "step");
  if (std::chrono::steady_clock::now() - cached_at < 100ms) {
    CHECK(second == 0);  // served from the cache
  } else {
    MESSAGE("the second read came over 100 ms after the first: not checked that it was cached");
  }
  CHECK(num(obj(arr(ok_json(a.get("/v1/jobs")), "jobs").at(0)), "step") == 5);  // the list is not cached
  std::this_thread::sleep_for(110ms);
  CHECK(num(status(), "step") == 5);

  // A command's effect shows at once, also where the cache is fresh.
  progress(6);
  CHECK(str(ok_json(a.call("POST", "/v1/jobs/job-1/cancel")), "state") == "CANCELLED");
  const json::object after = status();
  CHECK(str(after, "state") == "CANCELLED");
  CHECK(num(after, "step") == 6);
  CHECK(a.commands.calls == Calls{"cancel job-1"});
}

TEST_CASE("RestApi: GET /metrics exposes jobs, nodes and request counters in the Prometheus text format") {
  Api a;
  SUBCASE("the format check refuses what Prometheus would") {
    const std::string head = "# HELP m A metric.\n# TYPE m gauge\n";
    CHECK(parse_exposition(head + "m{a=\"x\\\"y\",b=\"\\n\"} 1.5\nm 2\n").errors.empty());
    for (const std::string& bad : {head + "m{a=\"x\"} 1", head + "m{a=\"x\\y\"} 1\n", head + "m{a=x} 1\n",
                                   head + "m{a=\"x\" 1\n", head + "m{a=\"x\"}\n", head + "m one\n",
                                   head + "m 1\nm 2\n", std::string("m 1\n"), head + "# TYPE m gauge\n",
                                   head + "1m 1\n"}) {
      INFO(bad);
      CHECK(!parse_exposition(bad).errors.empty());
    }
  }
  SUBCASE("with nothing in the store, every family is there with zeros") {
    const Exposition e = scrape(a);
    CHECK(family(e, "pstrain_jobs") ==
          std::map<std::string, double>{{"{state=\"CANCELLED\"}", 0}, {"{state=\"FAILED\"}", 0},
                                        {"{state=\"PENDING\"}", 0},   {"{state=\"RECOVERING\"}", 0},
                                        {"{state=\"RUNNING\"}", 0},   {"{state=\"SUCCEEDED\"}", 0}});
    CHECK(family(e, "pstrain_nodes_alive") ==
          std::map<std::string, double>{{"{role=\"server\"}", 0}, {"{role=\"worker\"}", 0}});
    CHECK(family(e, "pstrain_http_requests_total").empty());
  }
  SUBCASE("after requests") {
    JobRecord running = job("job-1", "RUNNING");
    running.steps_done = 30;
    running.samples_per_second = 250.5;
    running.train_loss = 0.25;
    a.store.add(running);
    a.add("odd\"id\\\n", "SUCCEEDED");  // label values escape \, " and newlines
    a.store.set_nodes(
        {{.id = 1, .role = "server"}, {.id = 2, .role = "worker"}, {.id = 3, .role = "worker", .alive = false}});
    a.commands.submit_id = "job-2";

    CHECK(a.get("/healthz").status == 200);
    CHECK(a.call("HEAD", "/healthz").status == 200);
    CHECK(a.get("/nowhere").status == 404);
    CHECK(a.post_json("/v1/jobs", valid_spec()).status == 201);
    CHECK(a.call("POST", "/v1/jobs", valid_spec(), "text/plain").status == 415);
    CHECK(a.post_json("/v1/jobs", "{").status == 400);
    CHECK(a.get("/v1/jobs/job-1").status == 200);
    CHECK(a.get("/v1/jobs/job-9/metrics").status == 404);
    CHECK(a.call("DELETE", "/v1/jobs").status == 405);
    a.api.count("unparsed", 408);  // what the HTTP server answers itself

    const Exposition e = scrape(a);
    CHECK(family(e, "pstrain_http_requests_total") ==
          std::map<std::string, double>{{counter("/healthz", 200), 2},
                                        {counter("unknown", 404), 1},
                                        {counter("/v1/jobs", 201), 1},
                                        {counter("/v1/jobs", 415), 1},
                                        {counter("/v1/jobs", 400), 1},
                                        {counter("/v1/jobs", 405), 1},
                                        {counter("/v1/jobs/{id}", 200), 1},
                                        {counter("/v1/jobs/{id}/metrics", 404), 1},
                                        {counter("unparsed", 408), 1}});
    CHECK(family(e, "pstrain_jobs") ==
          std::map<std::string, double>{{"{state=\"CANCELLED\"}", 0}, {"{state=\"FAILED\"}", 0},
                                        {"{state=\"PENDING\"}", 1},   {"{state=\"RECOVERING\"}", 0},
                                        {"{state=\"RUNNING\"}", 1},   {"{state=\"SUCCEEDED\"}", 1}});
    CHECK(family(e, "pstrain_job_steps") ==
          std::map<std::string, double>{
              {"{job=\"job-1\"}", 30}, {"{job=\"odd\\\"id\\\\\\n\"}", 0}, {"{job=\"job-2\"}", 0}});
    CHECK(family(e, "pstrain_job_samples_per_second").at("{job=\"job-1\"}") == 250.5);
    CHECK(family(e, "pstrain_job_train_loss") == std::map<std::string, double>{{"{job=\"job-1\"}", 0.25}});
    CHECK(family(e, "pstrain_nodes_alive") ==
          std::map<std::string, double>{{"{role=\"server\"}", 1}, {"{role=\"worker\"}", 1}});
    // The scrape itself is counted, for the next one.
    CHECK(family(scrape(a), "pstrain_http_requests_total").at(counter("/metrics", 200)) == 1);
  }
}

TEST_CASE("RestApi: divergence warnings are in the job's status, its events and pstrain_divergence_total") {
  Api a;
  a.add("job-1", "RUNNING");
  CHECK(family(scrape(a), "pstrain_divergence_total") ==
        std::map<std::string, double>{{"{reason=\"chance_accuracy\"}", 0}, {"{reason=\"loss_above_start\"}", 0},
                                      {"{reason=\"loss_not_finite\"}", 0}});
  const size_t events_before = a.store.event_count("job-1");
  a.store.update("job-1", [](JobRecord& r) {
    r.warnings.push_back({"chance_accuracy", 2, 0.098, 0.15, "epoch 2: test accuracy 0.0980 is at chance level", 1});
  });
  a.store.update("job-1", [](JobRecord& r) {
    r.warnings.push_back({"loss_above_start", 3, 9.5, 2.3, "epoch 3: the training loss stayed above", 2});
    r.warnings.push_back({"chance_accuracy", 3, 0.1, 0.15, "epoch 3: test accuracy 0.1000 is at chance level", 2});
  });
  CHECK(a.store.event_count("job-1") == events_before + 3);  // one "warning" event each
  CHECK(family(scrape(a), "pstrain_divergence_total") ==
        std::map<std::string, double>{{"{reason=\"chance_accuracy\"}", 2}, {"{reason=\"loss_above_start\"}", 1},
                                      {"{reason=\"loss_not_finite\"}", 0}});
  const json::object o = ok_json(a.get("/v1/jobs/job-1"));
  REQUIRE(o.contains("warnings"));
  const json::array& w = o.at("warnings").as_array();
  REQUIRE(w.size() == 3);
  CHECK(w[0].at("reason") == "chance_accuracy");
  CHECK(w[0].at("epoch") == 2);
  CHECK(w[0].at("value").to_number<double>() == doctest::Approx(0.098));
  CHECK(w[0].at("threshold").to_number<double>() == doctest::Approx(0.15));
  CHECK(w[1].at("reason") == "loss_above_start");
  // Stored with the record: a restarted coordinator has them.
  a.store.flush();
  JobStore again(*a.kv);
  const auto loaded = again.load();
  REQUIRE(loaded.size() == 1);
  REQUIRE(loaded[0].warnings.size() == 3);
  CHECK(loaded[0].warnings[1].reason == "loss_above_start");
  CHECK(loaded[0].warnings[1].value == doctest::Approx(9.5));
  CHECK(loaded[0].warnings[1].detail == "epoch 3: the training loss stayed above");
}

TEST_CASE("RestApi: GET /metrics has per-job gauges for the unfinished jobs and the last finished ones") {
  Api a;
  JobRecord running = job("job-run", "RUNNING");
  running.total_steps = 200;
  running.steps_done = 50;
  running.current_epoch = 2;
  running.samples_per_second = 23410.25;
  running.train_loss = 0.2913;
  running.train_accuracy = 0.9141;
  running.test_loss = 0.2001;
  running.test_accuracy = 0.9402;
  a.store.add(running);
  a.add("job-wait", "PENDING");  // no figures yet: only the ones every job has
  // More finished jobs than kMetricsFinishedJobs, finished in another order than their ids.
  const size_t finished = RestApi::kMetricsFinishedJobs + 3;
  for (size_t i = 0; i < finished; ++i) {
    JobRecord r = job("job-done-" + std::to_string(i), i % 2 ? "SUCCEEDED" : "FAILED");
    r.finished_ms = 1700000100000 + static_cast<int64_t>((i * 7) % finished) * 1000;
    r.total_steps = r.steps_done = 120 + static_cast<int64_t>(i);
    r.test_accuracy = 0.9;
    a.store.add(r);
  }
  const Exposition e = scrape(a);
  // Which finished jobs are shown: the kMetricsFinishedJobs with the latest finished_ms.
  std::set<std::string> expected = {"{job=\"job-run\"}", "{job=\"job-wait\"}"};
  for (size_t i = 0; i < finished; ++i) {
    if ((i * 7) % finished >= finished - RestApi::kMetricsFinishedJobs) {
      expected.insert("{job=\"job-done-" + std::to_string(i) + "\"}");
    }
  }
  for (const char* name : {"pstrain_job_steps", "pstrain_job_progress_ratio", "pstrain_job_epoch",
                           "pstrain_job_samples_per_second", "pstrain_job_recoveries"}) {
    CAPTURE(name);
    std::set<std::string> labels;
    for (const auto& [key, value] : family(e, name)) labels.insert(key);
    CHECK(labels == expected);
  }
  CHECK(family(e, "pstrain_job_info").size() == expected.size());
  CHECK(family(e, "pstrain_job_info").at("{job=\"job-run\",name=\"mnist-mlp\",state=\"RUNNING\",mode=\"sync\"}") == 1);
  // The running job's figures, as recorded; the pending one has none of the optional ones.
  const std::string run = "{job=\"job-run\"}";
  CHECK(family(e, "pstrain_job_steps").at(run) == 50);
  CHECK(family(e, "pstrain_job_progress_ratio").at(run) == 0.25);
  CHECK(family(e, "pstrain_job_epoch").at(run) == 2);
  CHECK(family(e, "pstrain_job_samples_per_second").at(run) == 23410.25);
  CHECK(family(e, "pstrain_job_train_loss") == std::map<std::string, double>{{run, 0.2913}});
  CHECK(family(e, "pstrain_job_train_accuracy") == std::map<std::string, double>{{run, 0.9141}});
  CHECK(family(e, "pstrain_job_test_loss") == std::map<std::string, double>{{run, 0.2001}});
  CHECK(family(e, "pstrain_job_test_accuracy").at(run) == 0.9402);
  CHECK(family(e, "pstrain_job_test_accuracy").size() == expected.size() - 1);
  CHECK(family(e, "pstrain_job_progress_ratio").at("{job=\"job-wait\"}") == 0);
  // Every job still counts in pstrain_jobs.
  CHECK(family(e, "pstrain_jobs").at("{state=\"SUCCEEDED\"}") + family(e, "pstrain_jobs").at("{state=\"FAILED\"}") ==
        static_cast<double>(finished));
}

TEST_CASE("RestApi: a command that throws is a 500 internal problem, counted, and the API goes on") {
  Api a;
  a.commands.submit_error = "the event loop has stopped";
  CHECK(check_problem(a.post_json("/v1/jobs", valid_spec()), 500, "internal") == "the event loop has stopped");
  CHECK(a.commands.calls == Calls{"submit mnist-mlp"});
  CHECK(a.get("/healthz").status == 200);
  CHECK(family(scrape(a), "pstrain_http_requests_total").at(counter("/v1/jobs", 500)) == 1);
}

TEST_CASE("RestApi: GET /v1/jobs/{id}/events answers a stream of the job's events after Last-Event-ID or ?after") {
  Api a;
  a.add("job-1", "PENDING");
  a.store.update("job-1", [](JobRecord& r) { r.state = JobState::kRunning; });
  a.store.update("job-1", [](JobRecord& r) { r.notes.push_back("a note"); });
  a.store.flush();  // events are sent once written
  auto events_of = [&](const std::string& target, const std::string& last_event_id = "") {
    HttpRequest request{"GET", target};
    request.last_event_id = last_event_id;
    return a.api.handle(request);
  };
  auto ids = [](const HttpResponse& r) {
    std::string out;
    REQUIRE(r.events);
    for (const EventFrame& f : r.events->take().frames) out += f->substr(0, f->find('\n')) + ";";
    return out;
  };
  const HttpResponse all = events_of("/v1/jobs/job-1/events");
  CHECK(all.status == 200);
  CHECK(all.content_type == "text/event-stream");
  CHECK(header(all, "Cache-Control") == "no-store");
  CHECK(ids(all) == "id: 1;id: 2;id: 3;");
  CHECK(ids(events_of("/v1/jobs/job-1/events?after=1")) == "id: 2;id: 3;");
  CHECK(ids(events_of("/v1/jobs/job-1/events?after=1", "2")) == "id: 3;");  // the header wins
  CHECK(ids(events_of("/v1/jobs/job-1/events", "3")).empty());
  CHECK(ids(events_of("/v1/events")) == "id: 1;id: 2;");  // state changes only
  check_problem(events_of("/v1/jobs/job-1/events", "x1"), 400, "invalid-header", "Last-Event-ID");
  check_problem(events_of("/v1/jobs/job-1/events?after=-1"), 400, "invalid-parameter", "after");
  check_problem(events_of("/v1/events?from=1"), 400, "unknown-parameter", "from");
  check_problem(events_of("/v1/jobs/job-2/events"), 404, "job-not-found");
  // Open streams, in /metrics.
  const HttpResponse open = events_of("/v1/jobs/job-1/events");
  const Exposition e = scrape(a);
  CHECK(e.samples.at("pstrain_event_streams") == 2);  // `all` and `open` hold theirs
  CHECK(e.samples.at("pstrain_events_total") == 3);
  CHECK(e.samples.at("pstrain_event_streams_dropped_total") == 0);
  CHECK(open.events != nullptr);
}

TEST_CASE("RestApi: GET /v1/openapi.json serves the OpenAPI document, which describes exactly these routes") {
  Api a;
  a.add("job-1", "SUCCEEDED");
  a.commands.cancel_result = JobCommands::CancelResult::kAlreadyFinished;
  const HttpResponse r = a.get("/v1/openapi.json");
  const json::object document = ok_json(r);
  CHECK(r.body == openapi_document());
  CHECK(str(document, "openapi").rfind("3.", 0) == 0);

  std::set<std::string> documented, routed;
  for (const auto& [path, item] : obj(document.at("paths"))) documented.insert(std::string(path));
  for (const Route& route : kRoutes) routed.insert(route.path);
  CHECK(documented == routed);
  // Every documented operation is one the API routes (neither 404 not-found nor 405).
  for (const auto& [path, item] : obj(document.at("paths"))) {
    for (const auto& [method, operation] : obj(item)) {
      if (method == "parameters") continue;
      std::string upper(method);
      for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      CAPTURE(path);
      CAPTURE(upper);
      const HttpResponse answer = a.call(upper, with_id(std::string(path), "job-1"));
      CHECK(answer.status != 405);
      CHECK(!(answer.status == 404 && str(object_of(answer), "type") == "urn:pstrain:problem:not-found"));
      // And its status is one the document lists for it.
      CHECK(obj(obj(operation).at("responses")).contains(std::to_string(answer.status)));
    }
  }
  CHECK(a.commands.calls == Calls{"cancel job-1"});
}

// ---- Bearer tokens (access_control.h).

namespace {

const std::string kAdminToken = "admin-0123456789abcdef";
const std::string kOperatorToken = "operator-0123456789abcdef";
const std::string kViewerToken = "viewer-0123456789abcdef";

std::shared_ptr<const AccessTokens> test_tokens() {
  return std::make_shared<const AccessTokens>(AccessTokens::parse(
      "# the test's tokens\n" + kAdminToken + ",admin,root\n\n" + kOperatorToken + ", operator ,ci\n" + kViewerToken +
          ",viewer\n",
      "tokens"));
}

// The role each route and method needs, written out from the policy (not from required_role):
// 0 none, 1 viewer, 2 operator, 3 admin.
int needed(const std::string& method, const std::string& path) {
  if (path == "/healthz") return 0;
  if (method == "GET" || method == "HEAD") return 1;
  if (method == "DELETE") return 3;
  if (path.ends_with(":predict") || path.ends_with(":evaluate") || path.ends_with("/evaluate")) return 1;
  return 2;
}

HttpResponse call_as(Api& a, const std::string& method, const std::string& target, const std::string& token,
                     std::string body = "{}", std::string type = "application/json") {
  HttpRequest request{method, target, std::move(type), std::move(body)};
  if (!token.empty()) request.authorization = "Bearer " + token;
  return a.api.handle(request);
}

}  // namespace

TEST_CASE("RestApi with tokens: every route is 401 without a token, 403 for a weaker role, served for the right one") {
  Api a;
  a.add("job-1", "SUCCEEDED");
  a.api.set_access_tokens(test_tokens());
  const std::vector<std::string> by_role = {"", kViewerToken, kOperatorToken, kAdminToken};
  std::vector<HttpResponse> seen;
  for (const Route& route : kRoutes) {
    for (std::string_view rest = route.allow; !rest.empty();) {
      const size_t comma = rest.find(", ");
      const std::string method(rest.substr(0, comma));
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 2);
      const std::string target = with_id(route.path, "job-1");
      const int role = needed(method, route.path);
      CAPTURE(method);
      CAPTURE(target);
      HttpResponse r = call_as(a, method, target, "");
      if (role == 0) {
        CHECK(r.status != 401);
        continue;
      }
      check_problem(r, 401, "unauthorized");
      CHECK(header(r, "WWW-Authenticate") == "Bearer realm=\"pstrain\"");
      seen.push_back(r);
      r = call_as(a, method, target, "not-a-token-0123456789");
      check_problem(r, 401, "unauthorized");
      CHECK(header(r, "WWW-Authenticate") == "Bearer realm=\"pstrain\", error=\"invalid_token\"");
      seen.push_back(r);
      for (int weaker = 1; weaker < role; ++weaker) {
        r = call_as(a, method, target, by_role[static_cast<size_t>(weaker)]);
        const std::string detail = check_problem(r, 403, "forbidden");
        CHECK(contains(detail, std::string("needs the ") + (role == 3 ? "admin" : "operator") + " role"));
        seen.push_back(r);
      }
      for (int enough = role; enough <= 3; ++enough) {
        r = call_as(a, method, target, by_role[static_cast<size_t>(enough)]);
        CHECK(r.status != 401);
        CHECK(r.status != 403);
        seen.push_back(r);
      }
      // "bearer" is a scheme name: case does not matter for its first letter either.
      HttpRequest lower{method, target, "application/json", "{}"};
      lower.authorization = "bearer " + by_role[3];
      CHECK(a.api.handle(lower).status != 401);
    }
  }
  // Only the calls with a strong enough token reached the commands; no answer echoes a token.
  for (const std::string& call : a.commands.calls) CHECK((call == "cancel job-1" || call.rfind("submit", 0) == 0));
  for (const HttpResponse& r : seen) {
    for (const std::string& token : {kAdminToken, kOperatorToken, kViewerToken}) {
      CHECK(!contains(r.body, token));
      for (const auto& [name, value] : r.headers) CHECK(!contains(value, token));
    }
  }
}

TEST_CASE("RestApi with tokens: ?access_token= on reads only, taken out of the target - failures counted") {
  Api a;
  a.add("job-1", "SUCCEEDED");
  a.api.set_access_tokens(test_tokens());
  CHECK(a.get("/v1/jobs/job-1?access_token=" + kViewerToken).status == 200);
  // A route that refuses unknown query parameters does not see it.
  const HttpResponse r = a.get("/v1/jobs/job-1/checkpoints/latest?access_token=" + kViewerToken + "&optimizer=true");
  CHECK(r.status == 404);  // not 400 unknown-parameter
  CHECK(!contains(r.body, "access_token"));
  // Percent-encoded, as the dashboard sends it.
  CHECK(a.get("/v1/jobs?access_token=" + std::string("viewer-0123456789abcdef")).status == 200);
  // Not for writes: a token in a URL ends up in logs and histories.
  check_problem(a.post_json("/v1/jobs?access_token=" + kAdminToken, valid_spec()), 401, "unauthorized");
  CHECK(a.commands.calls.empty());
  // The open routes stay open.
  CHECK(a.get("/healthz").status == 200);

  Api b;
  b.api.set_access_tokens(test_tokens());
  b.get("/v1/jobs");
  b.get("/v1/jobs");
  call_as(b, "GET", "/v1/jobs", "wrong-token-0123456789");
  call_as(b, "POST", "/v1/jobs", kViewerToken, valid_spec());
  const std::string metrics = call_as(b, "GET", "/metrics", kViewerToken).body;
  CHECK(contains(metrics, "pstrain_http_auth_failures_total{reason=\"missing\"} 2\n"));
  CHECK(contains(metrics, "pstrain_http_auth_failures_total{reason=\"invalid\"} 1\n"));
  CHECK(contains(metrics, "pstrain_http_auth_failures_total{reason=\"forbidden\"} 1\n"));
}

TEST_CASE("RestApi with tokens: a refused upload is refused from its headers, before its body") {
  Api a;
  a.api.set_access_tokens(test_tokens());
  HttpRequest head{"PUT", "/v1/datasets/ds/train", "text/csv", ""};
  head.content_length = 1 << 20;
  BodyPlan plan = a.api.plan_body(head);
  REQUIRE(plan.kind == BodyPlan::Kind::kReject);
  check_problem(*plan.reject, 401, "unauthorized");
  CHECK(plan.reject->close);
  head.authorization = "Bearer " + kViewerToken;
  plan = a.api.plan_body(head);
  REQUIRE(plan.kind == BodyPlan::Kind::kReject);
  check_problem(*plan.reject, 403, "forbidden");
  head.authorization = "Bearer " + kOperatorToken;
  CHECK(a.api.plan_body(head).kind == BodyPlan::Kind::kFile);
  HttpRequest model{"POST", "/v1/models", "application/octet-stream", ""};
  model.content_length = 100;
  CHECK(a.api.plan_body(model).kind == BodyPlan::Kind::kReject);
}

TEST_CASE("AccessTokens: the file's defects name their line - lookups find the role") {
  auto fails = [](const std::string& text, const std::string& what) {
    CAPTURE(text);
    try {
      AccessTokens::parse(text, "t");
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(contains(e.what(), what));
    }
  };
  fails("short,admin\n", "t:1: the token has 5 characters");
  fails("# c\n" + kAdminToken + ",root\n", "t:2: unknown role 'root'");
  fails(kAdminToken + "\n", "t:1: expected TOKEN,ROLE[,NAME]");
  fails(kAdminToken + ",admin,a,b\n", "t:1: expected TOKEN,ROLE[,NAME] (4 fields)");
  fails(kAdminToken + ",admin,a\n" + kAdminToken + ",viewer,b\n", "t:2: the same token as a");
  fails("with space 0123456789,admin\n", "not printable ASCII");
  fails("# nothing\n\n", "no tokens");
  const AccessTokens tokens = AccessTokens::parse(kAdminToken + ",admin\r\n" + kViewerToken + ",viewer,dash\n", "t");
  CHECK(tokens.size() == 2);
  REQUIRE(tokens.find(kViewerToken));
  CHECK(tokens.find(kViewerToken)->role == Role::kViewer);
  CHECK(tokens.find(kViewerToken)->name == "dash");
  CHECK(tokens.find(kAdminToken)->name == "line 1");
  CHECK(!tokens.find(kViewerToken + "x"));
  CHECK(!tokens.find(""));
}

// Regression (fuzz/rest_fuzz.cc): a problem's detail echoes what the client sent (here the
// Content-Type); bytes that are not UTF-8 made the body invalid JSON. They become U+FFFD.
TEST_CASE("a problem that echoes bytes which are not UTF-8 is still valid JSON") {
  Api a;
  const HttpResponse r = a.call("POST", "/v1/jobs", R"({"name": 3})", "application/\xff\xff\xff\xffjson");
  CHECK(r.status == 415);
  boost::system::error_code ec;
  const boost::json::value body = boost::json::parse(r.body, ec);
  REQUIRE_FALSE(ec);
  CHECK(std::string(body.at("detail").as_string()).find("'application/\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBDjson'") !=
        std::string::npos);
  // Well-formed multi-byte text passes unchanged, an overlong form or a lone surrogate does not.
  CHECK(to_json_text(boost::json::value("caf\xC3\xA9 \xF0\x9F\x98\x80")) == "\"caf\xC3\xA9 \xF0\x9F\x98\x80\"");
  CHECK(to_json_text(boost::json::value("\xC0\xAF")) == "\"\xEF\xBF\xBD\xEF\xBF\xBD\"");
  CHECK(to_json_text(boost::json::value("\xED\xA0\x80")) == "\"\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\"");
}

// ---- Studies (the routes over a StudyStore; the cluster tests run them for real).

namespace {

class FakeStudyCommands final : public StudyCommands {
 public:
  explicit FakeStudyCommands(StudyStore& store) : store_(store) {}
  std::string submit(StudySpec spec) override {
    StudyRecord s;
    s.id = "study-" + std::to_string(++made);
    s.spec = std::move(spec);
    store_.add(s);
    store_.flush();
    return s.id;
  }
  CancelResult cancel(const std::string& id) override {
    if (!store_.update(id, [](StudyRecord& r) { r.state = StudyState::kCancelled; })) return CancelResult::kNotFound;
    return CancelResult::kCancelled;
  }
  int made = 0;

 private:
  StudyStore& store_;
};

}  // namespace

TEST_CASE("RestApi: studies are 404 without a study store, and with one submit, get, list, cancel and refusals work") {
  Api a;
  check_problem(a.get("/v1/studies"), 404, "studies-not-served");
  StudyStore studies{*a.kv};
  FakeStudyCommands commands{studies};
  a.api.set_studies(&studies, &commands);
  check_problem(a.get("/v1/studies/study-9"), 404, "study-not-found");
  check_problem(a.post_json("/v1/studies/study-9/cancel", ""), 404, "study-not-found");
  const std::string spec = job_spec_to_json(testing::mlp_job(16, 8, 3));
  CHECK(check_problem(a.post_json("/v1/studies", "{\"spec\": " + spec + ", \"search_space\": {\"/optimizer/learning_rate\": {\"uniform\": [-1, 1]}}}"),
                      422, "invalid-study", "/search_space/~1optimizer~1learning_rate")
            .find("/search_space/~1optimizer~1learning_rate") == 0);
  check_problem(a.post_json("/v1/studies", "{"), 400, "malformed-json");
  check_problem(a.call("POST", "/v1/studies", "{}", "text/plain"), 415, "unsupported-media-type");
  CHECK(commands.made == 0);
  const HttpResponse created = a.post_json("/v1/studies", "{\"spec\": " + spec + ", \"algorithm\": \"grid\", "
      "\"search_space\": {\"/optimizer/learning_rate\": {\"choice\": [0.1, 0.2]}}}");
  CHECK(created.status == 201);
  const json::object o = ok_json(a.get("/v1/studies/study-1"));
  CHECK(str(o, "state") == "RUNNING");
  CHECK(str(o, "algorithm") == "grid");
  CHECK(obj(o.at("request")).at("max_trials").as_int64() == 2);
  CHECK(ok_json(a.get("/v1/studies")).at("studies").as_array().size() == 1);
  CHECK(str(ok_json(a.post_json("/v1/studies/study-1/cancel", "")), "state") == "CANCELLED");
}
