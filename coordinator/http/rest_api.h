// The REST API of the coordinator as a pure function from request to response (no sockets, so
// it is testable on its own): routing, input checks, and one error form: problem+json (RFC 9457)
// with the right status, naming the field at fault.
//
// Reads are served from the JobStore; commands (submit, cancel) go through JobCommands, which the
// coordinator implements by running them on its event-loop thread.
//
// Thread rules: thread-safe (the HTTP thread calls handle(); state is in JobStore and atomics).
#pragma once

#include <atomic>
#include <chrono>
#include <optional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/job_spec.h"
#include "coordinator/job_store.h"

namespace pstrain {

struct HttpRequest {
  std::string method;        // "GET"
  std::string target;        // "/v1/jobs/job-1?x=y"
  std::string content_type;  // the Content-Type header, or empty
  std::string body;
};

struct HttpResponse {
  unsigned status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  bool close = false;  // close the connection after sending
};

class JobCommands {
 public:
  virtual ~JobCommands() = default;
  virtual std::string submit(JobSpec spec) = 0;  // returns the new job's id
  enum class CancelResult { kCancelled, kNotFound, kAlreadyFinished };
  virtual CancelResult cancel(const std::string& id) = 0;
};

// A problem+json response.
HttpResponse problem(unsigned status, const std::string& type, const std::string& title, const std::string& detail,
                     const std::string& field = "");

class RestApi {
 public:
  static constexpr size_t kMaxBodyBytes = 1 << 20;

  RestApi(JobStore& store, JobCommands& commands, std::string openapi_json);

  HttpResponse handle(const HttpRequest& request);

  // Counts a response for /metrics (the HTTP server calls this for responses it makes itself,
  // such as 413 or 408, too).
  void count(const std::string& route, unsigned status);

 private:
  HttpResponse route(const HttpRequest& request, std::string* route_label);
  HttpResponse submit(const HttpRequest& request);
  HttpResponse prometheus() const;
  // GET /v1/jobs/{id} is what dashboards and scripts poll: its body is built at most every
  // kStatusCacheAge per job (and again after any command), so polling costs a map lookup.
  std::optional<std::string> cached_status(const std::string& id);
  void invalidate_status(const std::string& id);
  static constexpr std::chrono::milliseconds kStatusCacheAge{100};

  JobStore& store_;
  JobCommands& commands_;
  std::string openapi_json_;
  mutable std::mutex counters_mutex_;
  std::map<std::pair<std::string, unsigned>, uint64_t> counters_;  // guarded by counters_mutex_
  std::mutex cache_mutex_;
  std::map<std::string, std::pair<std::chrono::steady_clock::time_point, std::string>> status_cache_;  // guarded by cache_mutex_
  uint64_t invalidations_ = 0;  // guarded by cache_mutex_: invalidate_status() calls so far
};

}  // namespace pstrain
