#include "coordinator/http/http_server.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>

#include <atomic>
#include <mutex>

#include "common/base/error.h"
#include "common/base/log.h"
#include "coordinator/http/session.h"

namespace pstrain {
namespace beast = boost::beast;
namespace net = boost::asio;
using tcp = net::ip::tcp;

class HttpServer::Listener : public std::enable_shared_from_this<Listener> {
 public:
  Listener(net::io_context& io, RestApi& api, const HttpServerOptions& options, TaskThread& files,
           std::shared_ptr<Gate> gate)
      : io_(io), acceptor_(net::make_strand(io)), api_(api), options_(options), files_(files), gate_(std::move(gate)) {}

  uint16_t bind() {
    beast::error_code ec;
    const auto address = net::ip::make_address(options_.host, ec);
    if (ec) throw Error("--http: '" + options_.host + "' is not an IP address");
    const tcp::endpoint endpoint(address, options_.port);
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
    if (ec) throw Error("cannot serve HTTP on " + options_.host + ":" + std::to_string(options_.port) + ": " + ec.message());
    return acceptor_.local_endpoint().port();
  }

  void accept() {
    acceptor_.async_accept(net::make_strand(io_), [self = shared_from_this()](beast::error_code ec, tcp::socket socket) {
      if (ec == net::error::operation_aborted) return;
      if (!ec) {
        socket.set_option(tcp::no_delay(true), ec);
        const size_t open = ++self->open_;
        auto start = [&](auto session) {
          if (open > self->options_.max_connections) {
            self->api_.count("unparsed", 503);
            session->reject(problem(503, "too-many-connections", "Too many connections",
                                    "the server has " + std::to_string(self->options_.max_connections) +
                                        " open connections; retry later"));
          } else {
            session->run();
          }
        };
        if (self->options_.tls) {
          start(std::make_shared<Session<TlsStream>>(self->api_, self->options_, self->open_, self->files_, self->gate_,
                                                     std::move(socket), *self->options_.tls));
        } else {
          start(std::make_shared<Session<PlainStream>>(self->api_, self->options_, self->open_, self->files_,
                                                       self->gate_, std::move(socket)));
        }
      }
      self->accept();
    });
  }

  void close() {
    net::post(acceptor_.get_executor(), [self = shared_from_this()] {
      beast::error_code ignored;
      self->acceptor_.close(ignored);
    });
  }

 private:
  net::io_context& io_;
  tcp::acceptor acceptor_;
  RestApi& api_;
  const HttpServerOptions& options_;
  TaskThread& files_;
  std::shared_ptr<Gate> gate_;
  std::atomic<size_t> open_{0};
};

HttpServer::HttpServer(RestApi& api, HttpServerOptions options)
    : api_(api), options_(std::move(options)), gate_(std::make_shared<Gate>()) {}

HttpServer::~HttpServer() { stop(); }

uint16_t HttpServer::start() {
  listener_ = std::make_shared<Listener>(io_, api_, options_, files_, gate_);
  const uint16_t port = listener_->bind();
  listener_->accept();
  thread_ = std::thread([this] { io_.run(); });
  PSLOG(kInfo) << "serving " << (options_.tls ? "HTTPS" : "HTTP") << " on " << options_.host << ":" << port;
  return port;
}

void HttpServer::stop() {
  {
    MutexLock lock(gate_->mutex);
    gate_->open = false;
  }
  if (!thread_.joinable()) return;
  io_.stop();
  thread_.join();
}

}  // namespace pstrain
