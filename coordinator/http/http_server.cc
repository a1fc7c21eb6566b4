#include "coordinator/http/http_server.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/version.hpp>

#include <atomic>
#include <optional>

#include "common/error.h"
#include "common/log.h"

namespace pstrain {
namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

// One connection: read a request, answer, repeat while keep-alive; every read has a deadline.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket&& socket, RestApi& api, const HttpServerOptions& options, std::atomic<size_t>& open)
      : stream_(std::move(socket)), timer_(stream_.get_executor()), api_(api), options_(options), open_(open) {}
  ~Session() { --open_; }

  void run() { net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read(); }); }

  // Answers at once and closes (used when the server is full).
  void reject(HttpResponse response) {
    net::dispatch(stream_.get_executor(), [self = shared_from_this(), response = std::move(response)]() mutable {
      response.close = true;
      self->send(std::move(response), 11);
    });
  }

 private:
  void read() {
    parser_.emplace();
    parser_->body_limit(options_.body_limit);
    parser_->header_limit(16 * 1024);
    // Our own deadline rather than the stream's: the stream's closes the socket, and a client
    // that never completes its request should still be told so (408).
    stream_.expires_never();
    timed_out_ = false;
    timer_.expires_after(options_.read_timeout);
    timer_.async_wait([weak = weak_from_this()](beast::error_code ec) {
      if (ec) return;
      if (auto self = weak.lock()) {
        self->timed_out_ = true;
        beast::error_code ignored;
        self->stream_.socket().cancel(ignored);
      }
    });
    http::async_read(stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      self->timer_.cancel();
      self->on_read(ec);
    });
  }

  void on_read(beast::error_code ec) {
    if (timed_out_) ec = beast::error::timeout;
    if (ec == http::error::end_of_stream || ec == net::error::connection_reset) return close();
    if (ec == beast::error::timeout) {
      if (buffer_.size() == 0 && !parser_->got_some() && requests_ > 0) {
        return close();  // an idle keep-alive connection: close it quietly
      }
      if (buffer_.size() == 0 && !parser_->got_some()) {
        HttpResponse r = problem(408, "request-timeout", "Request timeout",
                                 "no request arrived within " + std::to_string(options_.read_timeout.count()) + " s");
        r.close = true;
        api_.count("unparsed", 408);
        return send(std::move(r), 11);
      }
      HttpResponse r = problem(408, "request-timeout", "Request timeout",
                               "the request was not complete within " + std::to_string(options_.read_timeout.count()) + " s");
      r.close = true;
      api_.count("unparsed", 408);
      return send(std::move(r), 11);
    }
    if (ec == http::error::body_limit) {
      HttpResponse r = problem(413, "body-too-large", "Body too large",
                               "the body is over the limit of " + std::to_string(options_.body_limit) + " bytes");
      r.close = true;
      api_.count("unparsed", 413);
      return send(std::move(r), 11);
    }
    if (ec == http::error::header_limit) {
      HttpResponse r = problem(431, "headers-too-large", "Request headers too large", "headers are over 16 KiB");
      r.close = true;
      api_.count("unparsed", 431);
      return send(std::move(r), 11);
    }
    if (ec) {
      HttpResponse r = problem(400, "bad-request", "Bad request", "malformed HTTP: " + ec.message());
      r.close = true;
      api_.count("unparsed", 400);
      return send(std::move(r), 11);
    }
    ++requests_;
    auto request = parser_->release();
    HttpRequest in;
    in.method = std::string(request.method_string());
    in.target = std::string(request.target());
    if (const auto it = request.find(http::field::content_type); it != request.end()) in.content_type = std::string(it->value());
    in.body = std::move(request.body());
    HttpResponse out = api_.handle(in);
    if (!request.keep_alive()) out.close = true;
    send(std::move(out), request.version(), in.method == "HEAD");
  }

  void send(HttpResponse out, unsigned version, bool head = false) {
    auto response = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(out.status), version);
    response->set(http::field::server, "pstrain");
    response->set(http::field::content_type, out.content_type);
    for (const auto& [name, value] : out.headers) response->set(name, value);
    response->keep_alive(!out.close);
    if (head) {
      response->content_length(out.body.size());  // what a GET would send, without the body
    } else {
      response->body() = std::move(out.body);
      response->prepare_payload();
    }
    stream_.expires_after(options_.read_timeout);
    http::async_write(stream_, *response, [self = shared_from_this(), response, close = out.close](beast::error_code ec, size_t) {
      if (ec || close) return self->close();
      self->read();
    });
  }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.close();
  }

  beast::tcp_stream stream_;
  net::steady_timer timer_;
  bool timed_out_ = false;
  uint64_t requests_ = 0;  // answered on this connection
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  RestApi& api_;
  const HttpServerOptions& options_;
  std::atomic<size_t>& open_;
};

}  // namespace

class HttpServer::Listener : public std::enable_shared_from_this<Listener> {
 public:
  Listener(net::io_context& io, RestApi& api, const HttpServerOptions& options)
      : io_(io), acceptor_(net::make_strand(io)), api_(api), options_(options) {}

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
        auto session = std::make_shared<Session>(std::move(socket), self->api_, self->options_, self->open_);
        if (open > self->options_.max_connections) {
          self->api_.count("unparsed", 503);
          session->reject(problem(503, "too-many-connections", "Too many connections",
                                  "the server has " + std::to_string(self->options_.max_connections) +
                                      " open connections; retry later"));
        } else {
          session->run();
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
  std::atomic<size_t> open_{0};
};

HttpServer::HttpServer(RestApi& api, HttpServerOptions options) : api_(api), options_(std::move(options)) {}

HttpServer::~HttpServer() { stop(); }

uint16_t HttpServer::start() {
  listener_ = std::make_shared<Listener>(io_, api_, options_);
  const uint16_t port = listener_->bind();
  listener_->accept();
  thread_ = std::thread([this] { io_.run(); });
  PSLOG(kInfo) << "serving HTTP on " << options_.host << ":" << port;
  return port;
}

void HttpServer::stop() {
  if (!thread_.joinable()) return;
  io_.stop();
  thread_.join();
}

}  // namespace pstrain
