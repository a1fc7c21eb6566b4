#include "coordinator/http/web_ui.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "common/base/log.h"

namespace pstrain {
namespace {

// FNV-1a, 64 bits: enough to tell two versions of a file apart in an ETag.
std::string etag_of(const std::string& body) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : body) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  char text[24];
  std::snprintf(text, sizeof text, "\"%016llx\"", static_cast<unsigned long long>(h));
  return text;
}

// Whether an If-None-Match header names `etag` ("*", one tag or a list; W/ prefixes ignored).
bool matches(const std::string& header, const std::string& etag) {
  if (header.empty()) return false;
  size_t i = 0;
  while (i < header.size()) {
    while (i < header.size() && (header[i] == ' ' || header[i] == ',')) ++i;
    size_t end = header.find(',', i);
    if (end == std::string::npos) end = header.size();
    std::string tag = header.substr(i, end - i);
    while (!tag.empty() && tag.back() == ' ') tag.pop_back();
    if (tag.rfind("W/", 0) == 0) tag = tag.substr(2);
    if (tag == "*" || tag == etag) return true;
    i = end;
  }
  return false;
}

}  // namespace

WebUi::WebUi(std::vector<WebAsset> assets) {
  for (auto& a : assets) {
    std::string etag = etag_of(a.body);
    files_[a.path] = Entry{std::move(a.content_type), std::move(a.body), std::move(etag)};
  }
}

WebUi WebUi::embedded() {
  std::vector<WebAsset> assets = embedded_web_assets();
  if (!kChartJsEmbedded) {
    std::ifstream in(kChartJsPath, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    if (in && !text.str().empty()) {
      assets.push_back({"/ui/chart.min.js", "text/javascript; charset=utf-8", text.str()});
    } else {
      PSLOG(kWarning) << "dashboard: no Chart.js at " << kChartJsPath
                      << " (install libjs-chart.js); the pages show no charts";
    }
  }
  return WebUi(std::move(assets));
}

bool WebUi::is_web_path(const std::string& path) {
  return path == "/" || path == "/ui" || path.rfind("/ui/", 0) == 0;
}

HttpResponse WebUi::get(const std::string& path, const std::string& if_none_match) const {
  const std::string key = path == "/" || path == "/ui" || path == "/ui/" ? "/ui/index.html" : path;
  const auto it = files_.find(key);
  if (it == files_.end()) return problem(404, "not-found", "Not found", "no dashboard file " + path);
  const Entry& e = it->second;
  HttpResponse r;
  r.headers.emplace_back("ETag", e.etag);
  r.headers.emplace_back("Cache-Control", "no-cache");
  if (matches(if_none_match, e.etag)) {
    r.status = 304;
    r.content_type = e.content_type;
    return r;
  }
  r.content_type = e.content_type;
  r.body = e.body;
  return r;
}

size_t WebUi::total_bytes() const {
  size_t n = 0;
  for (const auto& [path, e] : files_) n += e.body.size();
  return n;
}

}  // namespace pstrain
