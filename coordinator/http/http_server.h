// The coordinator's HTTP/1.1 server (Boost.Beast): keep-alive, a deadline on every read, a body
// limit, and a bound on concurrent connections. Every request goes to RestApi::handle_async; the
// few responses the server makes itself (a body over the limit, a request that never completes,
// too many connections, unparsable HTTP) are problem+json too.
//
// Bodies: RestApi::plan_body decides from the headers. Most go to memory (at most body_limit).
// A dataset upload streams to a file in pieces of 1 MiB, written and SHA-256-hashed on the
// server's upload thread, so neither the event loop nor memory grows with the upload; each piece
// must arrive within read_timeout, and a client that disconnects or stalls leaves no file behind.
// "Expect: 100-continue" is answered once the headers are accepted (a refused upload is not sent).
//
// Event streams (a response with `events`, text/event-stream): the headers, then each event the
// subscriber gives, written as fast as the client reads; the subscriber's bounded queue is what
// waits, and a client that falls behind by a full queue is dropped (connection closed). A comment
// line (": keep-alive") every event_heartbeat keeps proxies from closing an idle stream. The
// stream ends with the connection (no Content-Length, "Connection: close").
//
// TLS (options.tls set): every connection is HTTPS (HTTP/1.1 only), the same sessions over an
// ssl_stream. The handshake runs under read_timeout; a connection whose first bytes are not a TLS
// handshake (plain HTTP) gets a plain 400 and is closed; a failed handshake is logged and closed.
//
// Each connection is a Session (session.h) with a handler per kind of body or answer
// (streamed_upload.h, file_download.h, event_stream_writer.h).
//
// Thread rules: the server runs its own io_context on its own thread, plus a TaskThread for body
// files; start() and stop() are called from the owner's thread.
#pragma once

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "common/base/task_thread.h"
#include "coordinator/http/rest_api.h"

namespace boost::asio::ssl {
class context;
}  // namespace boost::asio::ssl

namespace pstrain {

struct HttpServerOptions {
  std::string host = "0.0.0.0";
  uint16_t port = 8080;  // 0: any free port
  std::chrono::seconds read_timeout{10};
  size_t max_connections = 512;
  size_t body_limit = RestApi::kMaxBodyBytes;
  std::chrono::milliseconds event_heartbeat{15000};  // a comment line on idle event streams
  int event_send_buffer = 0;  // SO_SNDBUF of an event stream's socket (0: the kernel's default)
  // HTTPS when set (tls_context.h makes it); read-only once serving.
  std::shared_ptr<boost::asio::ssl::context> tls;
};

class HttpServer {
 public:
  HttpServer(RestApi& api, HttpServerOptions options);
  ~HttpServer();

  // Binds and starts serving; returns the bound port. Throws pstrain::Error if it cannot bind.
  uint16_t start();
  void stop();

  struct Gate;  // lets late answers through only while the server runs (http_server.cc)

 private:
  class Listener;
  RestApi& api_;
  HttpServerOptions options_;
  boost::asio::io_context io_;
  // After io_: destroyed first, running what is queued (which may post to io_); sessions that io_
  // destroys afterwards clean up their files themselves.
  TaskThread files_;
  std::shared_ptr<Gate> gate_;
  std::shared_ptr<Listener> listener_;
  std::thread thread_;
};

}  // namespace pstrain
