// The dashboard's files (coordinator/http/web_ui.h): what the build embedded, their answers
// (content types, ETag, 304 on If-None-Match, 404), and their routes in RestApi (`/`, `/ui/...`
// beside /v1, /healthz and /metrics, which they must not shadow).
#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <memory>
#include <set>
#include <stdexcept>
#include <string>

#include "common/storage/kv_store.h"
#include "coordinator/http/rest_api.h"
#include "coordinator/http/web_ui.h"
#include "coordinator/store/job_store.h"
#include "tests/test_support.h"

using namespace pstrain;
namespace json = boost::json;

namespace {

std::string header(const HttpResponse& r, const std::string& name) {
  for (const auto& [k, v] : r.headers) {
    if (k == name) return v;
  }
  return "";
}

class NoCommands final : public JobCommands {
 public:
  std::string submit(JobSpec) override { throw std::runtime_error("no submit here"); }
  CancelResult cancel(const std::string&) override { return CancelResult::kNotFound; }
};

}  // namespace

TEST_CASE("WebUi: the build embedded the pages, the script, Chart.js and every spec of deploy/jobs") {
  std::set<std::string> paths;
  for (const WebAsset& a : embedded_web_assets()) {
    CAPTURE(a.path);
    CHECK(!a.body.empty());
    paths.insert(a.path);
  }
  for (const char* p : {"/ui/index.html", "/ui/app.js", "/ui/job.js", "/ui/app.css", "/ui/favicon.svg", "/ui/jobs/index.json",
                        "/ui/jobs/mnist-mlp.json"}) {
    CHECK_MESSAGE(paths.count(p) == 1, p);
  }
  if (kChartJsEmbedded) CHECK(paths.count("/ui/chart.min.js") == 1);

  const WebUi web = WebUi::embedded();
  // The spec list names files that are served, and each is the JSON of a job spec.
  const HttpResponse index = web.get("/ui/jobs/index.json", "");
  REQUIRE(index.status == 200);
  CHECK(index.content_type == "application/json");
  const json::array specs = json::parse(index.body).at("specs").as_array();
  CHECK(specs.size() >= 2);
  for (const auto& name : specs) {
    const HttpResponse spec = web.get("/ui/jobs/" + std::string(name.as_string()), "");
    CAPTURE(name);
    REQUIRE(spec.status == 200);
    CHECK(json::parse(spec.body).as_object().contains("training"));
  }
  // The page loads what is served.
  const std::string page = web.get("/", "").body;
  for (const char* ref : {"/ui/app.js", "/ui/job.js", "/ui/app.css", "/ui/chart.min.js"}) {
    CHECK_MESSAGE(page.find(ref) != std::string::npos, ref);
    CHECK_MESSAGE(web.get(ref, "").status == 200, ref);
  }
}

TEST_CASE("WebUi: content types, a strong ETag per body, 304 on a matching If-None-Match, 404 otherwise") {
  const WebUi web({{"/ui/index.html", "text/html; charset=utf-8", "<html>one</html>"},
                   {"/ui/app.js", "text/javascript; charset=utf-8", "let x = 1;"},
                   {"/ui/other.js", "text/javascript; charset=utf-8", "let x = 2;"}});
  for (const char* root : {"/", "/ui", "/ui/", "/ui/index.html"}) {
    CAPTURE(root);
    const HttpResponse r = web.get(root, "");
    CHECK(r.status == 200);
    CHECK(r.content_type == "text/html; charset=utf-8");
    CHECK(r.body == "<html>one</html>");
  }
  const HttpResponse js = web.get("/ui/app.js", "");
  CHECK(js.content_type == "text/javascript; charset=utf-8");
  CHECK(header(js, "Cache-Control") == "no-cache");
  const std::string etag = header(js, "ETag");
  CHECK(etag.size() == 18);
  CHECK(etag.front() == '"');
  CHECK(etag != header(web.get("/ui/other.js", ""), "ETag"));  // another body, another tag

  for (const std::string& match : {etag, "\"x\", " + etag, "W/" + etag, std::string("*")}) {
    CAPTURE(match);
    const HttpResponse r = web.get("/ui/app.js", match);
    CHECK(r.status == 304);
    CHECK(r.body.empty());
    CHECK(header(r, "ETag") == etag);
  }
  CHECK(web.get("/ui/app.js", header(web.get("/ui/other.js", ""), "ETag")).status == 200);
  const HttpResponse missing = web.get("/ui/nope.js", "");
  CHECK(missing.status == 404);
  CHECK(missing.content_type == "application/problem+json");
  CHECK(web.total_bytes() == std::string("<html>one</html>let x = 1;let x = 2;").size());
}

TEST_CASE("WebUi in RestApi: / and /ui/ are the dashboard's, GET and HEAD only, and the API's routes are untouched") {
  testing::TempDir dir;
  std::string error;
  auto kv = KvStore::open(dir.path(), &error);
  REQUIRE(kv != nullptr);
  JobStore store{*kv};
  NoCommands commands;
  const WebUi web({{"/ui/index.html", "text/html; charset=utf-8", "<html></html>"}});
  RestApi api(store, commands, "{\"openapi\":\"3.0.3\"}", nullptr, nullptr, &web);
  auto call = [&](const std::string& method, const std::string& target) {
    HttpRequest r;
    r.method = method;
    r.target = target;
    return api.handle(r);
  };
  CHECK(call("GET", "/").content_type == "text/html; charset=utf-8");
  CHECK(call("GET", "/?x=1").status == 200);
  CHECK(call("HEAD", "/ui/").status == 200);
  const HttpResponse post = call("POST", "/");
  CHECK(post.status == 405);
  CHECK(header(post, "Allow") == "GET, HEAD");
  CHECK(call("GET", "/ui/missing.css").status == 404);
  HttpRequest conditional;
  conditional.method = "GET";
  conditional.target = "/";
  conditional.if_none_match = header(call("GET", "/"), "ETag");
  CHECK(api.handle(conditional).status == 304);
  // Not the dashboard's: the API answers as before.
  CHECK(call("GET", "/healthz").body == R"({"status":"ok"})");
  CHECK(call("GET", "/v1/openapi.json").body == "{\"openapi\":\"3.0.3\"}");
  CHECK(call("GET", "/v1/jobs").content_type == "application/json");
  CHECK(call("GET", "/uix").status == 404);
  // The page's token reaches event streams as ?access_token= (EventSource sends no headers): it
  // is accepted there, where another parameter is refused.
  CHECK(call("GET", "/v1/jobs/nope/events?access_token=abc").body.find("job-not-found") != std::string::npos);
  CHECK(call("GET", "/v1/jobs/nope/events?token=abc").status == 400);
  CHECK(call("GET", "/metrics").body.find("pstrain_http_requests_total{route=\"/\",status=\"200\"}") != std::string::npos);
}
