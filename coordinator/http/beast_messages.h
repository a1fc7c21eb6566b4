// Our HTTP types (http_types.h) to and from Beast's messages, for the connection's code
// (session.h and its handlers): a request's fields from its parsed header, an answer's header.
//
// Thread rules: pure functions.
#pragma once

#include <boost/beast/http.hpp>

#include <cstdint>
#include <string>

#include "coordinator/http/http_types.h"

namespace pstrain {

// An answer's header from the API's response.
template <typename Body>
boost::beast::http::response<Body> response_header(const HttpResponse& out, unsigned version) {
  boost::beast::http::response<Body> header(static_cast<boost::beast::http::status>(out.status), version);
  header.set(boost::beast::http::field::server, "pstrain");
  header.set(boost::beast::http::field::content_type, out.content_type);
  for (const auto& [name, value] : out.headers) header.set(name, value);
  header.keep_alive(!out.close);
  return header;
}

// A request as the API takes it, without its body, from the parser that read its header.
template <typename Parser>
HttpRequest request_from_header(const Parser& parser) {
  namespace http = boost::beast::http;
  const auto& header = parser.get();
  HttpRequest request;
  request.method = std::string(header.method_string());
  request.target = std::string(header.target());
  if (const auto it = header.find(http::field::content_type); it != header.end()) request.content_type = std::string(it->value());
  if (const auto it = header.find(http::field::if_none_match); it != header.end()) request.if_none_match = std::string(it->value());
  if (const auto it = header.find(http::field::authorization); it != header.end()) request.authorization = std::string(it->value());
  if (const auto length = parser.content_length()) request.content_length = *length;
  if (const auto it = header.find("Last-Event-ID"); it != header.end()) request.last_event_id = std::string(it->value());
  return request;
}

}  // namespace pstrain
