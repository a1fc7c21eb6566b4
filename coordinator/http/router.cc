#include "coordinator/http/router.h"

#include <algorithm>

#include "common/base/error.h"

namespace pstrain {

std::vector<std::string> Router::segments(const std::string& target) {
  const std::string path = target.substr(0, target.find('?'));
  std::vector<std::string> parts;
  std::string part;
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      parts.push_back(part);
      part.clear();
    } else {
      part += path[i];
    }
  }
  if (!parts.empty() && parts.back().empty()) parts.pop_back();  // trailing slash
  return parts;
}

void Router::add(const std::string& method, const std::string& path_template, Handler handler) {
  std::vector<Segment> segments;
  std::string label;
  for (const std::string& text : Router::segments(path_template)) {
    Segment s;
    if (text.starts_with("{")) {
      const size_t close = text.find('}');
      if (close == std::string::npos) throw Error("route template " + path_template + ": '{' without '}'");
      std::string name = text.substr(1, close - 1);
      s.capture = true;
      s.suffix = text.substr(close + 1);
      if (const size_t colon = name.find(':'); colon != std::string::npos) {
        std::string values = name.substr(colon + 1) + "|";
        name.resize(colon);
        for (size_t bar; (bar = values.find('|')) != std::string::npos; values.erase(0, bar + 1)) {
          s.values.push_back(values.substr(0, bar));
        }
      }
      label += "/{" + name + "}" + s.suffix;
    } else {
      s.literal = text;
      label += "/" + text;
    }
    segments.push_back(std::move(s));
  }
  if (label.empty()) label = "/";
  const auto same = std::find_if(routes_.begin(), routes_.end(), [&](const Route& r) { return r.label == label; });
  Route& route = same != routes_.end() ? *same : routes_.emplace_back(Route{label, std::move(segments), {}});
  route.methods.emplace_back(method, std::move(handler));
}

bool Router::matches(const Route& route, const std::vector<std::string>& parts, std::vector<std::string>* args) {
  if (route.segments.size() != parts.size()) return false;
  args->clear();
  for (size_t i = 0; i < parts.size(); ++i) {
    const Segment& s = route.segments[i];
    const std::string& part = parts[i];
    if (!s.capture) {
      if (part != s.literal) return false;
      continue;
    }
    if (!part.ends_with(s.suffix)) return false;
    std::string value = part.substr(0, part.size() - s.suffix.size());
    if (!s.values.empty() && std::find(s.values.begin(), s.values.end(), value) == s.values.end()) return false;
    args->push_back(std::move(value));
  }
  return true;
}

Router::Match Router::find(const std::string& method, const std::string& path) const {
  const std::vector<std::string> parts = segments(path);
  Match m;
  for (const Route& route : routes_) {
    if (!matches(route, parts, &m.args)) continue;
    m.label = route.label;
    for (const auto& [allowed, handler] : route.methods) {
      if (!m.allow.empty()) m.allow += ", ";
      m.allow += allowed == "GET" ? "GET, HEAD" : allowed;
      if (m.handler == nullptr && (allowed == method || (allowed == "GET" && method == "HEAD"))) m.handler = &handler;
    }
    return m;
  }
  m.args.clear();
  return m;
}

}  // namespace pstrain
