#include "coordinator/http/responses.h"

#include <boost/json.hpp>

#include <cctype>
#include <string_view>

#include "common/base/json_parse.h"
#include "common/base/json_text.h"

namespace pstrain {

HttpResponse problem(unsigned status, const std::string& type, const std::string& title, const std::string& detail,
                     const std::string& field) {
  boost::json::object body{{"type", "urn:pstrain:problem:" + type}, {"title", title}, {"status", status},
                           {"detail", detail}};
  if (!field.empty()) body["field"] = field;
  HttpResponse r;
  r.status = status;
  r.content_type = "application/problem+json";
  r.body = to_json_text(body);
  return r;
}

HttpResponse json_response(unsigned status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

HttpResponse method_not_allowed(const std::string& method, const std::string& path, const std::string& allow) {
  HttpResponse r = problem(405, "method-not-allowed", "Method not allowed",
                           method + " is not allowed on " + path + "; allowed: " + allow);
  r.headers.emplace_back("Allow", allow);
  return r;
}

std::map<std::string, std::string> query_params(const std::string& target) {
  std::map<std::string, std::string> out;
  const size_t q = target.find('?');
  if (q == std::string::npos) return out;
  auto decode = [](std::string_view in) {
    std::string s;
    for (size_t i = 0; i < in.size(); ++i) {
      if (in[i] == '%' && i + 2 < in.size() && std::isxdigit(static_cast<unsigned char>(in[i + 1])) &&
          std::isxdigit(static_cast<unsigned char>(in[i + 2]))) {
        s += static_cast<char>(std::stoi(std::string(in.substr(i + 1, 2)), nullptr, 16));
        i += 2;
      } else {
        s += in[i] == '+' ? ' ' : in[i];
      }
    }
    return s;
  };
  std::string_view rest(target);
  rest.remove_prefix(q + 1);
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    const size_t eq = pair.find('=');
    if (!pair.empty()) out[decode(pair.substr(0, eq))] = eq == std::string_view::npos ? "" : decode(pair.substr(eq + 1));
    if (amp == std::string_view::npos) break;
    rest.remove_prefix(amp + 1);
  }
  return out;
}

std::optional<HttpResponse> json_document_problem(const HttpRequest& request, const std::string& what, size_t max_bytes) {
  if (media_type(request.content_type) != "application/json") {
    return problem(415, "unsupported-media-type", "Unsupported media type",
                   what + " must be sent as application/json, not '" + request.content_type + "'");
  }
  if (request.body.size() > max_bytes) {
    return problem(413, "body-too-large", "Body too large",
                   "the body has " + std::to_string(request.body.size()) + " bytes; the limit is " + std::to_string(max_bytes));
  }
  return std::nullopt;
}

std::string media_type(const std::string& content_type) {
  std::string out;
  for (char c : content_type.substr(0, content_type.find(';'))) {
    if (c != ' ') out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

HttpResponse service_problem(const ServiceError& e) {
  static const std::map<unsigned, const char*> kTitles = {
      {400, "Bad request"}, {404, "Not found"}, {409, "Conflict"}, {413, "Too large"},
      {415, "Unsupported media type"}, {422, "Unprocessable request"}, {500, "Internal error"}};
  const auto title = kTitles.find(e.status);
  const std::string text = e.status == 422 && e.type.rfind("dataset-", 0) == 0 ? "Invalid dataset"
                           : title == kTitles.end()                           ? "Error"
                                                                              : title->second;
  HttpResponse r = problem(e.status, e.type, text, e.detail, e.field);
  if (e.line != 0 || !e.column.empty()) {
    boost::json::object body = parse_json(r.body).as_object();
    if (e.line != 0) body["line"] = e.line;
    if (!e.column.empty()) body["column"] = e.column;
    r.body = to_json_text(body);
  }
  return r;
}

}  // namespace pstrain
