// What the RestApi tests share (tests/coordinator/rest_api*_test.cc): a fake JobCommands that
// records the commands it is given, the API over a real JobStore on RocksDB in a temporary
// directory, lenient readers of its answers, a parser of the Prometheus text format, and the
// table of routes. Header-only; each test file includes it once.
#pragma once

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
#include "tests/json_fields.h"

namespace pstrain::rest_test {

namespace json = boost::json;
using namespace std::chrono_literals;

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

inline std::unique_ptr<KvStore> open_kv(const testing::TempDir& dir) {
  std::string error;
  auto kv = KvStore::open(dir.path(), &error);
  if (kv == nullptr) throw std::runtime_error("opening the job store: " + error);
  return kv;
}

inline JobRecord job(const std::string& id, const std::string& state) {
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

inline std::string describe(const HttpResponse& r) {
  std::string text = "HTTP " + std::to_string(r.status) + " [" + r.content_type + "] ";
  return text + (r.body.size() > 600 ? r.body.substr(0, 600) + "..." : r.body);
}

inline std::string header(const HttpResponse& r, const std::string& name) {
  for (const auto& [key, value] : r.headers) {
    if (key == name) return value;
  }
  return "(none)";
}

inline json::object object_of(const HttpResponse& r) {
  boost::system::error_code ec;
  json::value v = json::parse(r.body, ec);
  if (ec || !v.is_object()) {
    FAIL_CHECK("the body is not a JSON object: " << describe(r));
    return {};
  }
  return std::move(v.as_object());
}

// The member at `key`, or a string that says it is missing (no JSON value serializes like it).
inline std::string field(const json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  return v == nullptr ? "(missing)" : to_json_text(*v);
}

inline std::string str(const json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : "(not a string: " + field(o, key) + ")";
}

using testing::json_fields::num;
using testing::json_fields::arr;

inline json::object obj(const json::value& v) { return v.is_object() ? v.as_object() : json::object(); }

// A 200 (or `status`) application/json answer; its body.
inline json::object ok_json(const HttpResponse& r, unsigned status = 200) {
  INFO(describe(r));
  CHECK(r.status == status);
  CHECK(r.content_type == "application/json");
  return object_of(r);
}

// A problem+json answer (RFC 9457) of `status` and urn:pstrain:problem:`type`, naming `field_at_fault`
// (and starting its detail with it) if given, else without a field. Returns the detail.
inline std::string check_problem(const HttpResponse& r, unsigned status, const std::string& type,
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

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// ---- Prometheus text format (0.0.4).

struct Exposition {
  std::map<std::string, double> samples;  // "name{labels}" as written -> value
  std::vector<std::string> errors;        // lines that break the format
};

inline bool metric_name(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != ':') return false;
  }
  return true;
}

// The end of the label set `{name="value",...}` that starts at line[i], or npos if it is malformed
// (label values may escape \\, \" and \n, nothing else).
inline size_t labels_end(const std::string& line, size_t i) {
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
inline Exposition parse_exposition(const std::string& text) {
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
inline std::map<std::string, double> family(const Exposition& e, const std::string& name) {
  std::map<std::string, double> out;
  for (const auto& [key, value] : e.samples) {
    if (key.rfind(name + "{", 0) == 0) out[key.substr(name.size())] = value;
  }
  return out;
}

inline Exposition scrape(Api& a) {
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

inline std::string counter(const std::string& route, unsigned status) {
  return "{route=\"" + route + "\",status=\"" + std::to_string(status) + "\"}";
}

// ---- Routes and specs.

// Every route of the API, with the methods it allows (its Allow header on a 405).
struct Route {
  std::string path;  // with {id} where the job id goes
  std::string allow;
};
inline const std::vector<Route> kRoutes = {
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
inline std::string with_id(std::string path, const std::string& id) {
  for (const auto& [param, value] : std::vector<std::pair<std::string, std::string>>{
           {"{id}", id}, {"{name}", "ds"}, {"{split}", "train"}, {"{part}", "images"}, {"{step}", "latest"}}) {
    if (const size_t at = path.find(param); at != std::string::npos) path.replace(at, param.size(), value);
  }
  return path;
}

inline std::string valid_spec() { return job_spec_to_json(testing::mlp_job(16, 8, 2)); }

// The valid spec with one change.
inline std::string spec_with(const std::function<void(json::object&)>& change) {
  json::value v = json::parse(valid_spec());
  change(v.as_object());
  return to_json_text(v);
}

inline json::object& layer(json::object& spec, size_t i) {
  return spec["model"].as_object()["layers"].as_array()[i].as_object();
}

}  // namespace pstrain::rest_test
