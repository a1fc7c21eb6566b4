// The coordinator's HTTP requests and responses as the REST API sees them (the HTTP server,
// http_server.h, turns sockets into these and back), and problem+json (RFC 9457), the one error
// form of every route.
//
// Thread rules: plain values.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/base/event_stream.h"
#include "coordinator/base/stored_file.h"

namespace pstrain {

struct HttpRequest {
  std::string method;        // "GET"
  std::string target;        // "/v1/jobs/job-1?x=y"
  std::string content_type;  // the Content-Type header, or empty
  std::string body;          // the body, when it was read into memory
  std::optional<uint64_t> content_length;  // the Content-Length header (none: chunked or no body)
  std::string last_event_id;  // the Last-Event-ID header (event streams), or empty
  // The body, when it was streamed to a file (BodyPlan::kFile): where, how many bytes, and their
  // SHA-256 (hex), computed as it was written.
  std::string body_file;
  uint64_t body_bytes = 0;
  std::string body_sha256;
  std::string if_none_match;  // the If-None-Match header, or empty (the dashboard's files)
  std::string authorization;  // the Authorization header, or empty
};

struct HttpResponse {
  unsigned status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  bool close = false;  // close the connection after sending
  // An event stream (text/event-stream): the server sends the headers, then the subscriber's
  // events as they come, until it ends (or is dropped, or the client goes away); no body.
  std::shared_ptr<EventSubscriber> events;
  // A download of a stored file (a model, a checkpoint): instead of `body`, its pieces, each read
  // on the server's file thread only once the last is sent (Content-Length: file->bytes).
  std::shared_ptr<const StoredFile> file;
};

// Where the HTTP server puts a request's body, decided from its headers before any of the body
// is read.
struct BodyPlan {
  enum class Kind { kMemory, kFile, kReject };
  Kind kind = Kind::kMemory;
  std::string path;      // kFile: the file to create
  uint64_t max_bytes = 0;  // more is 413 (kMemory: 0 is the server's default limit)
  std::optional<HttpResponse> reject;  // kReject: the answer (the body is never read)
};

// Answers a request; may be called on any thread, exactly once.
using Responder = std::function<void(HttpResponse)>;

// A problem+json response.
HttpResponse problem(unsigned status, const std::string& type, const std::string& title, const std::string& detail,
                     const std::string& field = "");

}  // namespace pstrain
