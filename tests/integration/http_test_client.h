// HTTP test helpers for the REST end-to-end tests: a small blocking Beast client for well-formed
// requests, raw POSIX sockets for malformed and stalled ones, and lenient JSON accessors (a wrong
// body fails a CHECK instead of throwing). Header-only: each test binary includes it once.
#pragma once

#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <functional>
#include <thread>
#include <vector>

#include "tests/integration/cluster.h"
#include "tests/json_fields.h"

namespace pstrain::testing::http_test {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
namespace json = boost::json;
using tcp = net::ip::tcp;
using namespace std::chrono_literals;


inline std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// One HTTP response, however it was obtained.
struct Reply {
  unsigned status = 0;                         // 0: no response (see error)
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  bool keep_alive = false;
  std::string error;  // what went wrong on the way, if anything

  std::string header(const std::string& name) const {
    const auto it = headers.find(lower(name));
    return it == headers.end() ? std::string() : it->second;
  }
  std::string describe() const {
    std::string text = "HTTP " + std::to_string(status) + " [" + header("content-type") + "] ";
    text += body.size() > 600 ? body.substr(0, 600) + "... (" + std::to_string(body.size()) + " bytes)" : body;
    if (!error.empty()) text += " (error: " + error + ")";
    return text;
  }
};

// A blocking HTTP/1.1 client on one keep-alive connection: Beast's async operations run to
// completion on a private io_context, so that every step has a deadline (tcp_stream's timeouts
// apply to async operations only).
class HttpClient {
 public:
  explicit HttpClient(int port, std::chrono::seconds timeout = 30s) : port_(port), timeout_(timeout), stream_(ioc_) {}

  bool connect(std::string* error) {
    stream_.expires_after(timeout_);
    const tcp::endpoint endpoint(net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port_));
    const beast::error_code ec = run([&](auto handler) { stream_.async_connect(endpoint, handler); });
    if (ec && error != nullptr) *error = "connect: " + ec.message();
    return !ec;
  }

  Reply send(http::verb verb, const std::string& target, std::string body = {}, const std::string& content_type = {},
             const std::vector<std::pair<std::string, std::string>>& extra_headers = {}) {
    http::request<http::string_body> request{verb, target, 11};
    request.set(http::field::host, "127.0.0.1:" + std::to_string(port_));
    request.set(http::field::user_agent, "pstrain-rest-test");
    if (!content_type.empty()) request.set(http::field::content_type, content_type);
    for (const auto& [name, value] : extra_headers) request.set(name, value);
    request.body() = std::move(body);
    request.prepare_payload();
    Reply reply;
    stream_.expires_after(timeout_);
    const beast::error_code write_ec = run([&](auto handler) { http::async_write(stream_, request, handler); });
    // A server may answer before it has read the whole request (413) and close: read its answer
    // even when the write failed.
    if (write_ec) reply.error = "write: " + write_ec.message();
    http::response_parser<http::string_body> parser;
    parser.body_limit(uint64_t{1} << 30);  // models of hundreds of MB
    if (verb == http::verb::head) parser.skip(true);
    stream_.expires_after(timeout_);
    const beast::error_code read_ec = run([&](auto handler) { http::async_read(stream_, buffer_, parser, handler); });
    if (read_ec) {
      reply.error += (reply.error.empty() ? "" : "; ") + std::string("read: ") + read_ec.message();
      return reply;
    }
    const auto& response = parser.get();
    reply.status = response.result_int();
    for (const auto& field : response) reply.headers[lower(std::string(field.name_string()))] = std::string(field.value());
    reply.body = response.body();
    reply.keep_alive = response.keep_alive();
    return reply;
  }

 private:
  template <typename Start>
  beast::error_code run(Start&& start) {
    beast::error_code result;
    start([&result](beast::error_code ec, auto&&...) { result = ec; });
    ioc_.restart();
    ioc_.run();
    return result;
  }

  int port_;
  std::chrono::seconds timeout_;
  net::io_context ioc_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
};

// One request on a fresh connection.
inline Reply call(int port, http::verb verb, const std::string& target, std::string body = {},
           const std::string& content_type = {}, const std::vector<std::pair<std::string, std::string>>& headers = {}) {
  HttpClient client(port);
  Reply reply;
  if (!client.connect(&reply.error)) return reply;
  return client.send(verb, target, std::move(body), content_type, headers);
}

inline Reply get(int port, const std::string& target) { return call(port, http::verb::get, target); }

inline Reply post_json(int port, const std::string& target, std::string body) {
  return call(port, http::verb::post, target, std::move(body), "application/json");
}

// A plain TCP connection, for what a well-behaved client would never send.
class RawConnection {
 public:
  explicit RawConnection(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
      const std::string what = std::strerror(errno);
      ::close(fd_);
      throw std::runtime_error("connect to port " + std::to_string(port) + ": " + what);
    }
  }
  ~RawConnection() { ::close(fd_); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  // False if the peer refused the bytes (reset, closed).
  bool send_all(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  void shutdown_write() { ::shutdown(fd_, SHUT_WR); }

  struct Received {
    std::string bytes;
    bool closed = false;  // the peer closed (or reset) the connection
    std::string error;
  };
  // Reads until the peer closes the connection or `timeout` passes.
  Received read_until_close(std::chrono::milliseconds timeout) {
    Received out;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    char buffer[65536];
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return out;
      pollfd p{fd_, POLLIN, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) return out;
      const ssize_t n = ::recv(fd_, buffer, sizeof buffer, 0);
      if (n > 0) {
        out.bytes.append(buffer, static_cast<size_t>(n));
      } else if (n == 0) {
        out.closed = true;
        return out;
      } else if (errno != EINTR) {
        out.closed = true;
        out.error = std::strerror(errno);
        return out;
      }
    }
  }

 private:
  int fd_ = -1;
};

// Parses the first HTTP response in `bytes` (what a RawConnection received).
inline Reply parse_reply(const RawConnection::Received& received) {
  Reply r;
  r.error = received.error;
  const std::string& bytes = received.bytes;
  const size_t end = bytes.find("\r\n\r\n");
  if (bytes.rfind("HTTP/1.", 0) != 0 || end == std::string::npos || bytes.size() < 12) {
    r.error += " no HTTP response in " + std::to_string(bytes.size()) + " bytes: '" + bytes.substr(0, 200) + "'";
    r.error += received.closed ? " (connection closed)" : " (connection still open)";
    return r;
  }
  r.status = static_cast<unsigned>(std::atoi(bytes.substr(9, 3).c_str()));
  size_t line_start = bytes.find("\r\n") + 2;
  while (line_start < end) {
    const size_t line_end = bytes.find("\r\n", line_start);
    const std::string line = bytes.substr(line_start, line_end - line_start);
    const size_t colon = line.find(':');
    if (colon != std::string::npos) {
      std::string value = line.substr(colon + 1);
      value.erase(0, value.find_first_not_of(" \t"));
      r.headers[lower(line.substr(0, colon))] = value;
    }
    line_start = line_end + 2;
  }
  r.body = bytes.substr(end + 4);
  if (const std::string length = r.header("content-length"); !length.empty()) {
    const size_t n = std::stoul(length);
    if (r.body.size() < n) r.error += " body shorter than Content-Length";
    r.body.resize(std::min(n, r.body.size()));
  }
  r.keep_alive = lower(r.header("connection")) != "close";
  return r;
}

// ---- JSON helpers: lenient accessors, so that a wrong body fails a CHECK instead of throwing.

inline json::object object_of(const Reply& r) {
  boost::system::error_code ec;
  json::value v = json::parse(r.body, ec);
  if (ec || !v.is_object()) {
    FAIL_CHECK("the body is not a JSON object: " << r.describe());
    return {};
  }
  return std::move(v.as_object());
}

inline std::string str(const json::object& o, std::string_view key) {
  const auto* v = o.if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : std::string();
}

using testing::json_fields::num;
using testing::json_fields::arr;

inline const json::object& obj(const json::value& v) {
  static const json::object empty;
  return v.is_object() ? v.as_object() : empty;
}

// A problem+json answer (RFC 9457) with `status`, naming `field` if given.
inline void check_problem(const Reply& r, unsigned status, const std::string& what, const std::string& field = {}) {
  INFO(what << " -> " << r.describe());
  CHECK(r.status == status);
  CHECK(r.header("content-type") == "application/problem+json");
  const json::object o = object_of(r);
  CHECK(!str(o, "type").empty());
  CHECK(!str(o, "title").empty());
  CHECK(num(o, "status") == static_cast<double>(status));
  CHECK(!str(o, "detail").empty());
  if (!field.empty()) CHECK(str(o, "field") == field);
}

// ---- Jobs over REST.

// Submits a job; returns its id.
inline std::string submit(testing::Cluster& cluster, const std::string& spec_json) {
  const Reply r = post_json(cluster.http_port(), "/v1/jobs", spec_json);
  INFO("POST /v1/jobs -> " << r.describe());
  REQUIRE(r.status == 201);
  CHECK(r.header("content-type") == "application/json");
  const json::object o = object_of(r);
  const std::string id = str(o, "id");
  REQUIRE(!id.empty());
  CHECK(r.header("location") == "/v1/jobs/" + id);
  const std::string state = str(o, "state");
  CHECK((state == "PENDING" || state == "RUNNING"));
  return id;
}

inline bool finished(const std::string& state) { return state == "SUCCEEDED" || state == "FAILED" || state == "CANCELLED"; }

// Polls GET /v1/jobs/{id} until `done` holds for its status; fails with every process's log if the
// job ends otherwise or the deadline passes.
inline json::object wait_for_job(testing::Cluster& cluster, const std::string& id, const std::string& what,
                          const std::function<bool(const json::object&)>& done, std::chrono::seconds timeout = 120s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const Reply r = get(cluster.http_port(), "/v1/jobs/" + id);
    if (r.status == 200) {
      json::object o = object_of(r);
      if (done(o)) return o;
      if (finished(str(o, "state"))) {
        FAIL("job " << id << " ended " << str(o, "state") << " (" << str(o, "reason") << ") while waiting for "
                    << what << "\n" << cluster.group().dump_logs(40));
      }
    }
    if (std::chrono::steady_clock::now() > deadline) {
      FAIL("no " << what << " for " << id << " within " << timeout.count() << " s; last answer " << r.describe()
                 << "\n" << cluster.group().dump_logs(40));
    }
    std::this_thread::sleep_for(100ms);
  }
}

inline json::object wait_for_state(testing::Cluster& cluster, const std::string& id, const std::string& state,
                            std::chrono::seconds timeout = 120s) {
  return wait_for_job(cluster, id, "state " + state, [&](const json::object& o) { return str(o, "state") == state; },
                      timeout);
}

}  // namespace pstrain::testing::http_test
