// Helpers the REST API's route files share: JSON and problem+json answers, query parameters and
// media types as the routes read them.
//
// Thread rules: pure functions.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "coordinator/http/http_types.h"
#include "coordinator/base/service_error.h"

namespace pstrain {

HttpResponse json_response(unsigned status, std::string body);
// 405 with the Allow header.
HttpResponse method_not_allowed(const std::string& method, const std::string& path, const std::string& allow);
// A service's error (dataset catalog, model service) as problem+json.
HttpResponse service_problem(const ServiceError& e);
// The query of a target, percent-decoded ("?a=1&b=x%20y"). A key without '=' maps to "".
std::map<std::string, std::string> query_params(const std::string& target);
// The media type of a Content-Type header, lowercased, without parameters or spaces.
std::string media_type(const std::string& content_type);
// A JSON document's body (a job spec, a study) as POST takes it: 415 unless application/json
// ("<what> must be sent as application/json"), 413 over `max_bytes`; nullopt when it may go on.
std::optional<HttpResponse> json_document_problem(const HttpRequest& request, const std::string& what, size_t max_bytes);
// The target's path, without its query.
inline std::string path_of(const std::string& target) { return target.substr(0, target.find('?')); }

}  // namespace pstrain
