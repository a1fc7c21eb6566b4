// The coordinator's HTTP/1.1 server (Boost.Beast): keep-alive, a deadline on every read, a body
// limit, and a bound on concurrent connections. Every request goes to RestApi::handle; the few
// responses the server makes itself (a body over the limit, a request that never completes, too
// many connections, unparsable HTTP) are problem+json too.
//
// Thread rules: the server runs its own io_context on its own thread; start() and stop() are
// called from the owner's thread.
#pragma once

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "coordinator/http/rest_api.h"

namespace pstrain {

struct HttpServerOptions {
  std::string host = "0.0.0.0";
  uint16_t port = 8080;  // 0: any free port
  std::chrono::seconds read_timeout{10};
  size_t max_connections = 512;
  size_t body_limit = RestApi::kMaxBodyBytes;
};

class HttpServer {
 public:
  HttpServer(RestApi& api, HttpServerOptions options);
  ~HttpServer();

  // Binds and starts serving; returns the bound port. Throws pstrain::Error if it cannot bind.
  uint16_t start();
  void stop();

 private:
  class Listener;
  RestApi& api_;
  HttpServerOptions options_;
  boost::asio::io_context io_;
  std::shared_ptr<Listener> listener_;
  std::thread thread_;
};

}  // namespace pstrain
