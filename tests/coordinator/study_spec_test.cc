// Studies' pure parts (coordinator/study/study_spec.h, study_store.h, study_json.h): the request
// read strictly with errors naming the field, the grid enumerated once in order, random draws a
// function of (seed, trial), ASHA's rungs, the trial's job spec, and the stored form's round trip.
#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <cmath>
#include <set>
#include <string>

#include "common/base/error.h"
#include "common/data/dataset.h"
#include "common/data/job_spec.h"
#include "coordinator/study/study_json.h"
#include "coordinator/study/study_spec.h"
#include "coordinator/study/study_store.h"

using namespace pstrain;
namespace json = boost::json;

namespace {

const std::string kSpec = R"({"name": "t", "dataset": {"name": "mnist10k"},
  "model": {"input_shape": [28, 28, 1], "layers": [{"type": "flatten"}, {"type": "dense", "units": 16, "activation": "relu"},
    {"type": "dense", "units": 10}]},
  "optimizer": {"type": "sgd", "learning_rate": 0.1},
  "training": {"mode": "sync", "global_batch_size": 100, "epochs": 4, "workers": 1, "servers": 1}})";

void check(const std::string& job) {
  JobSpec spec = parse_job_spec(job);
  validate_job_spec(spec, known_datasets());
}

StudySpec parse(const std::string& rest) {
  return parse_study_spec(R"({"name": "s", "spec": )" + kSpec + ", " + rest + "}", check);
}

std::string error_path(const std::string& rest) {
  try {
    parse(rest);
  } catch (const SpecError& e) {
    return e.path();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("study spec: a grid covers every point once, the last parameter fastest") {
  const StudySpec s = parse(R"("algorithm": "grid", "search_space": {
      "/optimizer/learning_rate": {"choice": [0.01, 0.1]}, "/model/layers/1/units": {"int": [8, 10]}})");
  CHECK(grid_size(s) == 6);
  CHECK(s.max_trials == 6);
  std::set<std::string> seen;
  for (int64_t n = 0; n < 6; ++n) {
    const auto v = trial_values(s, n);
    seen.insert(v[0] + "," + v[1]);
  }
  CHECK(seen.size() == 6);
  CHECK(trial_values(s, 0) == std::vector<std::string>{"1E-2", "8"});
  CHECK(trial_values(s, 1) == std::vector<std::string>{"1E-2", "9"});
  CHECK(trial_values(s, 3) == std::vector<std::string>{"1E-1", "8"});
}

TEST_CASE("study spec: random draws are a function of seed and trial number, inside their ranges") {
  const std::string space = R"("algorithm": "random", "max_trials": 50, "search_space": {
      "/optimizer/learning_rate": {"loguniform": [0.0001, 0.5]}, "/optimizer/momentum": {"uniform": [0.5, 0.9]},
      "/model/layers/1/units": {"int": [4, 64]}, "/training/global_batch_size": {"choice": [50, 100]}})";
  const StudySpec a = parse(space + R"(, "seed": 7)"), b = parse(space + R"(, "seed": 7)"), c = parse(space + R"(, "seed": 8)");
  int differ = 0;
  for (int64_t n = 0; n < 50; ++n) {
    const auto v = trial_values(a, n);
    CHECK(v == trial_values(b, n));
    differ += v != trial_values(c, n);
    const double lr = std::stod(v[0]), m = std::stod(v[1]);
    const int units = std::stoi(v[2]);
    CHECK(lr >= 0.0001);
    CHECK(lr <= 0.5);
    CHECK(m >= 0.5);
    CHECK(m <= 0.9);
    CHECK(units >= 4);
    CHECK(units <= 64);
    CHECK((v[3] == "50" || v[3] == "100"));
    // The trial's job spec carries the values, its name and checks out.
    const std::string job = trial_job_spec(a, v, n);
    const JobSpec spec = parse_job_spec(job);
    CHECK(spec.name == "s trial " + std::to_string(n));
    CHECK(spec.model.layers[1].units == units);
    CHECK(std::abs(spec.optimizer.learning_rate - lr) < 1e-6 * lr);
  }
  CHECK(differ > 45);
}

TEST_CASE("study spec: ASHA's rungs and each rung's epochs in the trial spec") {
  CHECK(asha_rungs({1, 9, 3}) == std::vector<int64_t>{1, 3, 9});
  CHECK(asha_rungs({1, 4, 2}) == std::vector<int64_t>{1, 2, 4});
  CHECK(asha_rungs({1, 5, 3}) == std::vector<int64_t>{1, 3, 5});
  CHECK(asha_rungs({2, 2, 3}) == std::vector<int64_t>{2});
  const StudySpec s = parse(R"("algorithm": "asha", "asha": {"min_epochs": 1, "reduction_factor": 2},
      "search_space": {"/optimizer/learning_rate": {"choice": [0.01, 0.1]}})");
  CHECK(s.asha.max_epochs == 4);  // the template's
  CHECK(parse_job_spec(trial_job_spec(s, trial_values(s, 0), 0, 2)).training.epochs == 2);
  // asha.grid: the grid's points, each once, in a seeded order (the configurations a grid study runs).
  const StudySpec g = parse(R"("algorithm": "asha", "asha": {"grid": true}, "search_space": {
      "/optimizer/learning_rate": {"choice": [0.01, 0.1]}, "/model/layers/1/units": {"int": [8, 9]}})");
  const StudySpec grid = parse(R"("algorithm": "grid", "search_space": {
      "/optimizer/learning_rate": {"choice": [0.01, 0.1]}, "/model/layers/1/units": {"int": [8, 9]}})");
  CHECK(g.max_trials == 4);
  std::set<std::vector<std::string>> a, b;
  for (int64_t n = 0; n < 4; ++n) {
    a.insert(trial_values(g, n));
    b.insert(trial_values(grid, n));
  }
  CHECK(a == b);
  CHECK(a.size() == 4);
  CHECK(study_from_json(study_to_json(StudyRecord{"study-1", g})).value().spec.asha.grid);
  CHECK_THROWS_AS(parse(R"("algorithm": "asha", "asha": {"grid": true}, "search_space": {
      "/optimizer/learning_rate": {"uniform": [0.01, 0.1]}})"), SpecError);
}

TEST_CASE("study spec: bad studies are refused naming the field") {
  CHECK(error_path(R"("search_space": {})") == "/search_space");
  CHECK(error_path(R"("search_space": {"optimizer/learning_rate": {"choice": [1]}})") == "/search_space/optimizer~1learning_rate");
  CHECK(error_path(R"("search_space": {"/optimizer/learning_rate": {"uniform": [1, 0.5]}})") ==
        "/search_space/~1optimizer~1learning_rate/uniform");
  CHECK(error_path(R"("search_space": {"/optimizer/learning_rate": {"loguniform": [0, 1]}})") ==
        "/search_space/~1optimizer~1learning_rate/loguniform");
  CHECK(error_path(R"("search_space": {"/optimizer/learning_rate": {"choice": [1], "int": [1, 2]}})") ==
        "/search_space/~1optimizer~1learning_rate");
  // A value that makes an invalid spec: a negative learning rate at the range's low end.
  CHECK(error_path(R"("search_space": {"/optimizer/learning_rate": {"uniform": [-1, 0.5]}})") ==
        "/search_space/~1optimizer~1learning_rate");
  // A choice that is not a number; an index past the layers; a parent the spec lacks.
  CHECK(error_path(R"("search_space": {"/model/layers/1/units": {"choice": [16, "wide"]}})") ==
        "/search_space/~1model~1layers~11~1units");
  CHECK(error_path(R"("search_space": {"/model/layers/7/units": {"choice": [16]}})") == "/search_space/~1model~1layers~17~1units");
  CHECK(error_path(R"("search_space": {"/nothing/here": {"choice": [16]}})") == "/search_space/~1nothing~1here");
  // A grid over a continuous range; more trials than the grid has.
  CHECK(error_path(R"("algorithm": "grid", "search_space": {"/optimizer/learning_rate": {"uniform": [0.1, 0.5]}})") ==
        "/search_space/~1optimizer~1learning_rate");
  CHECK(error_path(R"("algorithm": "grid", "max_trials": 3, "search_space": {"/optimizer/learning_rate": {"choice": [0.1, 0.5]}})") ==
        "/max_trials");
  CHECK(error_path(R"("metric": "accuracy", "search_space": {"/optimizer/learning_rate": {"choice": [0.1]}})") == "/metric");
  CHECK(error_path(R"("mode": "up", "search_space": {"/optimizer/learning_rate": {"choice": [0.1]}})") == "/mode");
  CHECK(error_path(R"("asha": {}, "search_space": {"/optimizer/learning_rate": {"choice": [0.1]}})") == "/asha");
  CHECK(error_path(R"("algorithm": "asha", "asha": {"min_epochs": 5}, "search_space": {"/optimizer/learning_rate": {"choice": [0.1]}})") ==
        "/asha/max_epochs");
  CHECK(error_path(R"("max_concurrent_trials": 0, "search_space": {"/optimizer/learning_rate": {"choice": [0.1]}})") ==
        "/max_concurrent_trials");
  CHECK(error_path(R"("search_space": {"/optimizer/learning_rate": {"choice": [0.1]}}, "colour": 1)") == "/colour");
  // The template itself: its own field, under /spec.
  CHECK_THROWS_AS(parse_study_spec(R"({"spec": {"name": "x"}, "search_space": {"/name": {"choice": ["a"]}}})", check),
                  SpecError);
  try {
    parse_study_spec(R"({"spec": )" + kSpec.substr(0, kSpec.size() - 1) + R"(, "colour": 1}, "search_space": {"/name": {"choice": ["a"]}}})",
                     check);
    FAIL("accepted");
  } catch (const SpecError& e) {
    CHECK(e.path() == "/spec/colour");
  }
}

TEST_CASE("study spec: the default mode follows the metric") {
  CHECK(parse(R"("search_space": {"/optimizer/learning_rate": {"choice": [0.1]}})").maximize == false);  // test_loss
  CHECK(parse(R"("metric": "test_accuracy", "search_space": {"/optimizer/learning_rate": {"choice": [0.1]}})").maximize);
  CHECK(!parse(R"("metric": "test_accuracy", "mode": "min", "search_space": {"/optimizer/learning_rate": {"choice": [0.1]}})").maximize);
}

TEST_CASE("study store: the stored form round-trips, and the best trial is the best at the most epochs") {
  StudyRecord s;
  s.id = "study-3";
  s.spec = parse(R"("algorithm": "asha", "metric": "test_accuracy", "asha": {"reduction_factor": 2},
      "search_space": {"/optimizer/learning_rate": {"loguniform": [0.001, 0.1]}}, "seed": 5)");
  s.created_ms = 100;
  TrialRecord a{0, TrialState::kStopped, "not promoted", {{1, "study-3-t0-r0", 0.95}}, 4, 2};
  TrialRecord b{1, TrialState::kCompleted, "", {{1, "study-3-t1-r0", 0.90}, {2, "study-3-t1-r1", 0.93, 2, 1}}, 8, 4};
  TrialRecord c{2, TrialState::kRunning, "", {{1, "study-3-t2-r0", 0.91}, {2, "study-3-t2-r1", std::nullopt, 2, 1}}, 5, 3};
  s.trials = {a, b, c};
  const auto back = study_from_json(study_to_json(s));
  REQUIRE(back.has_value());
  CHECK(study_to_json(*back) == study_to_json(s));
  CHECK(back->trials[1].rungs[1].node_seconds_before == 2);
  CHECK(study_spec_to_json(back->spec) == study_spec_to_json(s.spec));
  // Trial 0 has the higher figure but at 1 epoch; trial 1 is the best at 2.
  CHECK(best_trial(s) == std::optional<size_t>(1));
  CHECK_FALSE(study_from_json("{}").has_value());
}
