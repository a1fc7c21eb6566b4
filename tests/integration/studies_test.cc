// Studies end to end on a real cluster over HTTP (docs/STUDIES.md): a grid covers its grid once
// with at most max_concurrent_trials at a time while another user's job still runs; random is
// reproducible from its seed (same parameters, same figures bit for bit); ASHA's jobs are exactly
// the promotions and new trials the algorithm (replayed here from the recorded figures) makes; a
// coordinator killed -9 mid-study resumes it with every trial once and the same figures and best
// trial; a cancel frees the nodes at once; bad studies are 422s naming the field.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <string>
#include <vector>

#include "tests/integration/cluster.h"
#include "tests/integration/http_test_client.h"
#include "tests/test_support.h"

using namespace pstrain;
using namespace pstrain::testing::http_test;
using namespace std::chrono_literals;

namespace {

// A small MLP on mnist10k (one worker, one server per trial); `epochs` per trial.
std::string template_spec(int epochs) {
  return R"({"name": "t", "dataset": {"name": "mnist10k", "shuffle_seed": 3},
    "model": {"input_shape": [28, 28, 1], "seed": 5, "layers": [{"type": "flatten"},
      {"type": "dense", "units": 16, "activation": "relu"}, {"type": "dense", "units": 10}]},
    "optimizer": {"type": "sgd", "learning_rate": 0.05},
    "training": {"mode": "sync", "global_batch_size": 250, "epochs": )" +
         std::to_string(epochs) + R"(, "workers": 1, "servers": 1}})";
}

std::string submit_study(testing::Cluster& cluster, const std::string& body) {
  const Reply r = post_json(cluster.http_port(), "/v1/studies", body);
  INFO("POST /v1/studies -> " << r.describe());
  REQUIRE(r.status == 201);
  const std::string id = str(object_of(r), "id");
  CHECK(r.header("location") == "/v1/studies/" + id);
  return id;
}

json::object wait_study(testing::Cluster& cluster, const std::string& id, const std::string& state,
                        std::chrono::seconds timeout = 240s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const Reply r = get(cluster.http_port(), "/v1/studies/" + id);
    if (r.status == 200) {
      json::object o = object_of(r);
      if (str(o, "state") == state) return o;
      if (str(o, "state") != "RUNNING") FAIL("study " << id << " ended " << str(o, "state") << ": " << r.body);
    }
    if (std::chrono::steady_clock::now() > deadline) {
      FAIL("study " << id << " not " << state << " in " << timeout.count() << " s: " << r.describe() << "\n"
                    << cluster.group().dump_logs(40));
    }
    std::this_thread::sleep_for(200ms);
  }
}

// The study's jobs from GET /v1/jobs, in submission order.
std::vector<json::object> study_jobs(int port, const std::string& study) {
  std::vector<json::object> jobs;
  for (const auto& j : arr(object_of(get(port, "/v1/jobs")), "jobs")) {
    const auto& o = j.as_object();
    if (o.at("study").is_string() && std::string(o.at("study").as_string()) == study) jobs.push_back(o);
  }
  return jobs;
}

std::string params_text(const json::object& trial) { return json::serialize(trial.at("parameters")); }

// The most jobs of `jobs` running at once (from their start and end times).
int most_at_once(int port, const std::vector<json::object>& jobs) {
  std::vector<std::pair<int64_t, int>> edges;
  for (const auto& j : jobs) {
    const auto o = object_of(get(port, "/v1/jobs/" + str(j, "id")));
    edges.push_back({static_cast<int64_t>(num(o, "started_at_ms")), +1});
    edges.push_back({static_cast<int64_t>(num(o, "finished_at_ms")), -1});
  }
  std::sort(edges.begin(), edges.end());  // an end before a start at the same millisecond
  int now = 0, most = 0;
  for (const auto& [t, d] : edges) most = std::max(most, now += d);
  return most;
}

}  // namespace

TEST_CASE("studies: a grid covers its grid once, within max_concurrent_trials, and other jobs still run") {
  testing::Cluster cluster({.servers = 2, .workers = 2});
  const int port = cluster.http_port();
  const std::string id = submit_study(cluster, R"({"name": "grid", "spec": )" + template_spec(1) + R"(,
      "algorithm": "grid", "metric": "test_accuracy", "max_concurrent_trials": 1,
      "search_space": {"/optimizer/learning_rate": {"choice": [0.02, 0.2]}, "/model/layers/1/units": {"int": [8, 9]}}})");
  // Another user's job, submitted after the study: it starts while the study runs (the study
  // takes one worker at a time).
  const std::string other = submit(cluster, template_spec(1));
  const auto other_done = wait_for_state(cluster, other, "SUCCEEDED", 240s);

  const json::object done = wait_study(cluster, id, "SUCCEEDED");
  const json::array trials = arr(done, "trials");
  REQUIRE(trials.size() == 4);
  std::set<std::string> points;
  double best = -1;
  int64_t best_trial = -1;
  for (const auto& t : trials) {
    const auto& o = t.as_object();
    CHECK(str(o, "state") == "COMPLETED");
    points.insert(params_text(o));
    if (num(o, "metric") > best) best = num(o, "metric"), best_trial = o.at("number").as_int64();
    // The trial's job is listed with its study and number, and its spec carries the parameters.
    const auto job = object_of(get(port, "/v1/jobs/" + str(o, "job")));
    CHECK(str(job, "study") == id);
    CHECK(job.at("trial").as_int64() == o.at("number").as_int64());
    CHECK(num(o, "metric") == num(job, "test_accuracy"));
    CHECK(o.at("epochs").as_int64() == 1);
    // Its state events, from the first (PENDING), name the study and the trial.
    const std::string events = get(port, "/v1/jobs/" + str(o, "job") + "/events").body;
    const std::string tag = "\"study\":\"" + id + "\",\"trial\":" + std::to_string(o.at("number").as_int64());
    CHECK(events.find("\"state\":\"PENDING\",\"reason\":\"\"," + tag) != std::string::npos);
    CHECK(events.find("\"state\":\"SUCCEEDED\",\"reason\":\"\"," + tag) != std::string::npos);
  }
  CHECK(points.size() == 4);
  CHECK(points.count(R"({"/optimizer/learning_rate":2E-2,"/model/layers/1/units":8})") == 1);
  CHECK(points.count(R"({"/optimizer/learning_rate":2E-1,"/model/layers/1/units":9})") == 1);
  CHECK(obj(done.at("best")).at("trial").as_int64() == best_trial);
  CHECK(num(obj(done.at("best")), "metric") == best);
  // The best trial's model answers :predict like any finished job's.
  const Reply predict = post_json(port, "/v1/models/" + str(obj(done.at("best")), "model") + ":predict",
                                  R"({"instances": [)" + [] {
                                    std::string zeros = "[";
                                    for (int i = 0; i < 784; ++i) zeros += i ? ",0" : "0";
                                    return zeros + "]";
                                  }() + "]}");
  CHECK(predict.status == 200);
  const auto jobs = study_jobs(port, id);
  CHECK(jobs.size() == 4);
  CHECK(most_at_once(port, jobs) == 1);
  // The other job started before the study's last trial did.
  const auto last = object_of(get(port, "/v1/jobs/" + str(jobs.back(), "id")));
  CHECK(num(other_done, "started_at_ms") < num(last, "started_at_ms"));
  CHECK(num(done, "worker_seconds") > 0);
  // Prometheus.
  const std::string metrics = get(port, "/metrics").body;
  CHECK(metrics.find("pstrain_studies{state=\"SUCCEEDED\"} 1\n") != std::string::npos);
  // The list.
  const auto list = arr(object_of(get(port, "/v1/studies")), "studies");
  REQUIRE(list.size() == 1);
  CHECK(str(obj(list[0]), "id") == id);
}

TEST_CASE("studies: random is reproducible from its seed, figures included") {
  testing::Cluster cluster({.servers = 2, .workers = 2});
  const int port = cluster.http_port();
  auto body = [](int seed) {
    return R"({"name": "random", "spec": )" + template_spec(1) + R"(, "algorithm": "random", "max_trials": 3,
      "max_concurrent_trials": 2, "seed": )" + std::to_string(seed) + R"(,
      "search_space": {"/optimizer/learning_rate": {"loguniform": [0.01, 0.3]}, "/model/layers/1/units": {"int": [4, 32]}}})";
  };
  const std::string a = submit_study(cluster, body(11)), b = submit_study(cluster, body(11)), c = submit_study(cluster, body(12));
  const auto ta = arr(wait_study(cluster, a, "SUCCEEDED"), "trials");
  const auto tb = arr(wait_study(cluster, b, "SUCCEEDED"), "trials");
  const auto tc = arr(wait_study(cluster, c, "SUCCEEDED"), "trials");
  REQUIRE(ta.size() == 3);
  REQUIRE(tb.size() == 3);
  REQUIRE(tc.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(params_text(obj(ta[i])) == params_text(obj(tb[i])));
    CHECK(num(obj(ta[i]), "metric") == num(obj(tb[i]), "metric"));  // sync jobs: bit for bit
    CHECK(params_text(obj(ta[i])) != params_text(obj(tc[i])));
  }
  CHECK(most_at_once(port, study_jobs(port, a)) <= 2);
}

TEST_CASE("studies: ASHA's jobs are exactly the algorithm's promotions and new trials") {
  testing::Cluster cluster({.servers = 2, .workers = 2});
  const int port = cluster.http_port();
  // Rungs at 1, 2 and 4 epochs; one trial at a time, so the order is the algorithm's alone.
  const std::string id = submit_study(cluster, R"({"name": "asha", "spec": )" + template_spec(4) + R"(,
      "algorithm": "asha", "asha": {"min_epochs": 1, "max_epochs": 4, "reduction_factor": 2}, "metric": "test_loss",
      "max_trials": 6, "max_concurrent_trials": 1, "seed": 3,
      "search_space": {"/optimizer/learning_rate": {"loguniform": [0.001, 0.5]}}})");
  const json::object done = wait_study(cluster, id, "SUCCEEDED", 400s);
  const auto trials = arr(done, "trials");
  REQUIRE(trials.size() == 6);
  // Each trial's figure per rung, as recorded.
  std::vector<std::vector<double>> metric(6);
  for (const auto& t : trials) {
    for (const auto& r : arr(obj(t), "rungs")) metric[obj(t).at("number").as_int64()].push_back(num(obj(r), "metric"));
  }
  // Replay ASHA (Li et al. 2020, Algorithm 2) over these figures, one job at a time.
  const std::vector<int64_t> rungs = {1, 2, 4};
  std::vector<size_t> reached(6, 0);  // rungs finished per trial
  std::vector<std::string> expected;
  size_t started = 0;
  while (true) {
    std::optional<size_t> promote;
    for (size_t k = rungs.size() - 1; k-- > 0 && !promote;) {
      std::vector<size_t> members;
      for (size_t i = 0; i < started; ++i) {
        if (reached[i] > k) members.push_back(i);
      }
      std::stable_sort(members.begin(), members.end(), [&](size_t x, size_t y) { return metric[x][k] < metric[y][k]; });
      for (size_t j = 0; j < members.size() / 2 && !promote; ++j) {
        if (reached[members[j]] == k + 1) promote = members[j];
      }
    }
    if (promote) {
      expected.push_back(id + "-t" + std::to_string(*promote) + "-r" + std::to_string(reached[*promote]));
      REQUIRE(metric[*promote].size() > reached[*promote]);
      ++reached[*promote];
    } else if (started < 6) {
      expected.push_back(id + "-t" + std::to_string(started) + "-r0");
      ++reached[started++];
    } else {
      break;
    }
  }
  std::vector<std::string> actual;
  for (const auto& j : study_jobs(port, id)) actual.push_back(str(j, "id"));
  CHECK(actual == expected);
  // States: the trials at 4 epochs COMPLETED, the others STOPPED; a promoted job goes on from the
  // previous rung's final checkpoint with its optimizer state.
  for (const auto& t : trials) {
    const auto& o = obj(t);
    const size_t n = static_cast<size_t>(o.at("number").as_int64());
    CHECK(str(o, "state") == (reached[n] == 3 ? "COMPLETED" : "STOPPED"));
    CHECK(arr(o, "history").size() == static_cast<size_t>(rungs[reached[n] - 1]));
  }
  const auto job = object_of(get(port, "/v1/jobs/" + id + "-t" + std::to_string(
      static_cast<size_t>(obj(done.at("best")).at("trial").as_int64())) + "-r1"));
  const auto spec = obj(job.at("spec"));
  CHECK(str(obj(spec.at("init_from")), "job").ends_with("-r0"));
  CHECK(obj(spec.at("init_from")).at("optimizer_state").as_bool());
  CHECK(num(obj(done.at("best")), "epochs") == 4);
  // The promoted chain (1, then 2, then 4 epochs, each from the previous job's final checkpoint)
  // ends exactly where one uninterrupted 4-epoch job of the same trial ends.
  const std::string last = str(obj(done.at("best")), "job");
  json::object plain = obj(object_of(get(port, "/v1/jobs/" + last)).at("spec"));
  plain.erase("init_from");
  plain["name"] = "asha-check";
  const std::string check = submit(cluster, json::serialize(plain));
  const auto check_done = wait_for_state(cluster, check, "SUCCEEDED", 120s);
  CHECK(num(check_done, "test_loss") == num(obj(done.at("best")), "metric"));
  // ASHA used fewer epochs than 6 trials x 4.
  size_t epochs = 0;
  for (auto r : reached) epochs += static_cast<size_t>(rungs[r - 1]);
  CHECK(epochs < 24);
}

TEST_CASE("studies: a coordinator killed -9 mid-study resumes it: every trial once, same figures and best") {
  testing::Cluster cluster({.servers = 2, .workers = 2, .coordinator_flags = {"--dead-after-ms", "1500"}});
  const int port = cluster.http_port();
  const std::string body = R"({"name": "kill", "spec": )" + template_spec(2) + R"(, "algorithm": "random",
      "max_trials": 5, "max_concurrent_trials": 2, "seed": 21, "metric": "test_accuracy",
      "search_space": {"/optimizer/learning_rate": {"loguniform": [0.01, 0.3]}, "/model/layers/1/units": {"int": [4, 32]}}})";
  const std::string calm = submit_study(cluster, body);
  const auto calm_done = wait_study(cluster, calm, "SUCCEEDED");

  const std::string id = submit_study(cluster, body);
  // Kill once two trials have finished and others run.
  const auto deadline = std::chrono::steady_clock::now() + 200s;
  while (true) {
    const auto o = object_of(get(port, "/v1/studies/" + id));
    const auto counts = obj(o.at("trial_counts"));
    if (counts.contains("COMPLETED") && counts.at("COMPLETED").as_int64() >= 2 && counts.contains("RUNNING")) break;
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(100ms);
  }
  cluster.restart_coordinator(/*hard=*/true);
  const auto done = wait_study(cluster, id, "SUCCEEDED");
  const auto trials = arr(done, "trials"), calm_trials = arr(calm_done, "trials");
  REQUIRE(trials.size() == 5);
  for (size_t i = 0; i < 5; ++i) {
    INFO("trial " << i << " after the kill: " << json::serialize(trials[i]) << "\nuninterrupted: " << json::serialize(calm_trials[i])
         << "\njob: " << get(port, "/v1/jobs/" + str(obj(trials[i]), "job")).body
         << "\nmetrics: " << get(port, "/v1/jobs/" + str(obj(trials[i]), "job") + "/metrics").body);
    CHECK(str(obj(trials[i]), "state") == "COMPLETED");
    CHECK(params_text(obj(trials[i])) == params_text(obj(calm_trials[i])));
    CHECK(num(obj(trials[i]), "metric") == num(obj(calm_trials[i]), "metric"));
  }
  // One job per trial, none twice.
  std::set<std::string> ids;
  for (const auto& j : study_jobs(port, id)) ids.insert(str(j, "id"));
  CHECK(ids.size() == 5);
  CHECK(obj(done.at("best")).at("trial") == obj(calm_done.at("best")).at("trial"));
  CHECK(num(obj(done.at("best")), "metric") == num(obj(calm_done.at("best")), "metric"));
}

TEST_CASE("studies: a cancel frees the nodes at once, and bad studies are 422s naming the field") {
  testing::Cluster cluster({.servers = 2, .workers = 2});
  const int port = cluster.http_port();
  check_problem(post_json(port, "/v1/studies", R"({"spec": )" + template_spec(1) + R"(, "search_space": {
      "/optimizer/learning_rate": {"uniform": [-0.1, 0.1]}}})"), 422, "negative rate", "/search_space/~1optimizer~1learning_rate");
  check_problem(post_json(port, "/v1/studies", R"({"spec": )" + template_spec(1) + R"(, "search_space": {
      "/model/layers/5/units": {"choice": [3]}}})"), 422, "no layer 5", "/search_space/~1model~1layers~15~1units");
  check_problem(post_json(port, "/v1/studies", R"({"spec": )" + template_spec(1) + R"(, "metric": "speed",
      "search_space": {"/optimizer/learning_rate": {"choice": [0.1]}}})"), 422, "metric", "/metric");
  check_problem(post_json(port, "/v1/studies", "{"), 400, "not JSON");
  check_problem(get(port, "/v1/studies/study-99"), 404, "unknown");
  CHECK(arr(object_of(get(port, "/v1/studies")), "studies").empty());

  const std::string id = submit_study(cluster, R"({"spec": )" + template_spec(50) + R"(, "max_trials": 4,
      "max_concurrent_trials": 2, "search_space": {"/optimizer/learning_rate": {"choice": [0.01, 0.02, 0.03, 0.04]}}})");
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (obj(object_of(get(port, "/v1/studies/" + id)).at("trial_counts")).if_contains("RUNNING") == nullptr ||
         obj(object_of(get(port, "/v1/studies/" + id)).at("trial_counts")).at("RUNNING").as_int64() < 2) {
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(100ms);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const Reply cancelled = post_json(port, "/v1/studies/" + id + "/cancel", "");
  REQUIRE(cancelled.status == 200);
  CHECK(str(object_of(cancelled), "state") == "CANCELLED");
  // Both trial jobs end CANCELLED and a new job gets both workers within two seconds.
  for (const auto& j : study_jobs(port, id)) wait_for_state(cluster, str(j, "id"), "CANCELLED", 5s);
  const std::string next = submit(cluster, R"({"name": "after", "dataset": {"name": "mnist10k"},
    "model": {"input_shape": [28, 28, 1], "layers": [{"type": "flatten"}, {"type": "dense", "units": 10}]},
    "optimizer": {"type": "sgd", "learning_rate": 0.05},
    "training": {"mode": "sync", "global_batch_size": 250, "epochs": 1, "workers": 2, "servers": 2}})");
  wait_for_state(cluster, next, "RUNNING", 10s);
  CHECK(std::chrono::steady_clock::now() - t0 < 2500ms);
  check_problem(post_json(port, "/v1/studies/" + id + "/cancel", ""), 409, "cancel twice");
  CHECK(study_jobs(port, id).size() == 2);  // nothing queued after the cancel
}
