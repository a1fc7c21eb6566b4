// The REST API's route table: (method, path template) -> handler. One table answers three
// questions: which handler serves a request, what its route is called in /metrics
// (pstrain_http_requests_total's `route` label: the template), and which methods a path allows
// (the 405's Allow header).
//
// Templates are paths of segments: a literal ("v1"), a capture ("{id}"), a capture restricted to
// some values ("{part:images|labels}", labelled "{part}"), or a capture with a literal suffix
// ("{id}:predict"). A request's path is matched against the templates in the order they were
// added, the first match wins (add the more specific first); a GET route also answers HEAD.
//
// Thread rules: built once (add), then read from any thread (find).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "coordinator/http/http_types.h"

namespace pstrain {

class Router {
 public:
  // The request, the captured segments in template order, and where the answer goes.
  using Handler = std::function<void(const HttpRequest&, const std::vector<std::string>& args, const Responder&)>;

  void add(const std::string& method, const std::string& path_template, Handler handler);

  struct Match {
    std::string label;               // the route's template as /metrics names it; empty: no route
    const Handler* handler = nullptr;  // null: the path has a route, not for this method (405)
    std::vector<std::string> args;
    std::string allow;               // the methods of the route: "GET, HEAD, POST"
  };
  Match find(const std::string& method, const std::string& path) const;

  // The segments of a request target's path ("/v1/jobs/x?y" -> v1, jobs, x; a trailing slash
  // ignored).
  static std::vector<std::string> segments(const std::string& target);

 private:
  struct Segment {
    std::string literal;              // a literal segment (capture false)
    bool capture = false;
    std::vector<std::string> values;  // a restricted capture's values (empty: any)
    std::string suffix;               // a capture's literal suffix (":predict")
  };
  struct Route {
    std::string label;
    std::vector<Segment> segments;
    std::vector<std::pair<std::string, Handler>> methods;
  };
  static bool matches(const Route& route, const std::vector<std::string>& parts, std::vector<std::string>* args);

  std::vector<Route> routes_;
};

}  // namespace pstrain
