// The command-line client's HTTP/1.1 client (Boost.Beast): one request per connection, every
// step (resolve, connect, TLS handshake for https, write, each read) with a deadline, bodies read in pieces so that a
// download streams to its file and an event stream reaches its reader as it arrives.
//
// Errors: a request that gets an answer returns it, whatever its status (the caller turns a
// problem+json into a message). A transport failure (refused, reset, timed out, the name does not
// resolve) throws Unreachable, whose message names the URL.
// Threads: not thread-safe; one HttpClient per thread (it owns its io_context).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pstrain::cli {

// http[s]://HOST[:PORT][/BASE]: where the coordinator's REST API is.
struct BaseUrl {
  bool tls = false;  // https://
  std::string host;
  std::string port = "80";  // (443 for https)
  std::string base;  // a path prefix without the trailing '/', usually empty
  std::string text;  // as given, without a trailing '/'
};

// Parses `text`; nullopt (and `why`) for anything but an http:// or https:// URL.
std::optional<BaseUrl> parse_base_url(std::string_view text, std::string* why);

class Unreachable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The TLS options cannot be used (--cacert unreadable or not PEM): thrown by the constructor.
class TlsSetupError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Response {
  unsigned status = 0;
  std::string content_type;
  std::string body;  // empty for a download that succeeded (its bytes went to the file)
};

struct ClientOptions {
  std::string token;                                        // sent as "Authorization: Bearer" when set
  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::milliseconds read_timeout{30000};            // the longest wait for any one read or write
  uint64_t max_body_bytes = uint64_t{64} << 20;             // of a body held in memory
  // https: the server's certificate must chain to `cacert` (PEM; empty: the system's CAs) and
  // name the URL's host, unless `insecure` (no verification at all).
  std::string cacert;
  bool insecure = false;
};

class HttpClient {
 public:
  HttpClient(BaseUrl url, ClientOptions options);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  const BaseUrl& url() const { return url_; }

  // METHOD base+target, with `body` as `content_type` when not empty.
  Response request(const std::string& method, const std::string& target, const std::string& body = {},
                   const std::string& content_type = {});

  // GET target; on 200 the body goes to `path` as it arrives (into `path`.part, renamed at the
  // end; *bytes its size) and the Response has no body; otherwise the error response, and no file.
  // Throws std::runtime_error if the file cannot be written.
  Response download(const std::string& target, const std::string& path, uint64_t* bytes);

  // GET target with `headers`; on 200 calls `on_data` with each piece of the body as it arrives,
  // waiting up to `idle_timeout` for each (then throws Unreachable), until the server ends the
  // body (returns the 200 Response) or `on_data` returns false. Otherwise the error response.
  Response stream(const std::string& target, const std::vector<std::pair<std::string, std::string>>& headers,
                  std::chrono::milliseconds idle_timeout, const std::function<bool(std::string_view)>& on_data);

 private:
  struct Impl;
  BaseUrl url_;
  ClientOptions options_;
  std::unique_ptr<Impl> impl_;
};

// The message of a problem+json body ("detail (field /x)"), or the body's start, or the status.
std::string problem_message(const Response& r);

}  // namespace pstrain::cli
