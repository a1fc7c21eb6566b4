// RestApi's /metrics (the Prometheus text format, parsed strictly) and the counting of failed
// commands, driven directly as rest_api_test.cc drives the routes.
#include <doctest/doctest.h>

#include "tests/coordinator/rest_api_support.h"

using namespace pstrain;
using namespace pstrain::rest_test;  // (with its json alias and std::chrono_literals)

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
