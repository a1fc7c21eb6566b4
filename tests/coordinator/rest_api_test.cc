// RestApi (coordinator/http/rest_api.h) driven directly, without sockets: every route and every
// status it answers, with a fake JobCommands that records the commands it is given and a real
// JobStore on RocksDB in a temporary directory. What the HTTP server answers by itself (408, 431,
// 503, a body over the limit while it is read) is tests/integration/rest_test.cc's.
#include <doctest/doctest.h>

#include "tests/coordinator/rest_api_support.h"

using namespace pstrain;
using namespace pstrain::rest_test;  // (with its json alias and std::chrono_literals)


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
