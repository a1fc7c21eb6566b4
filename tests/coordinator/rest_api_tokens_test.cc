// RestApi with bearer tokens (access_control.h): every route's role, ?access_token=, uploads
// refused from their headers, and the tokens file's own checks.
#include <doctest/doctest.h>

#include "tests/coordinator/rest_api_support.h"

using namespace pstrain;
using namespace pstrain::rest_test;  // (with its json alias and std::chrono_literals)

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
