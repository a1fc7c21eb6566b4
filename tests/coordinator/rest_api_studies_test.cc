// RestApi's study routes over a StudyStore, with a fake StudyCommands (the cluster tests run them
// for real).
#include <doctest/doctest.h>

#include "tests/coordinator/rest_api_support.h"

using namespace pstrain;
using namespace pstrain::rest_test;  // (with its json alias and std::chrono_literals)

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
