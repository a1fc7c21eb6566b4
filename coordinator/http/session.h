// One HTTP connection of the coordinator's server (http_server.h): read a request's headers,
// decide where its body goes (RestApi::plan_body), read it, answer (at once, or when the
// catalog's work is done), repeat while keep-alive. The connection is always in one Phase; what
// is particular to a kind of request or answer is a handler of its own, which holds the session
// alive while it works and hands the connection back when done:
//   - bodies in memory and answers in memory: here;
//   - a body streamed to a file: StreamedUpload (streamed_upload.h);
//   - a stored file's download: FileDownload (file_download.h);
//   - an event stream: EventStreamWriter (event_stream_writer.h), the connection's last answer.
// Every read has a deadline (read_timeout, ReadDeadline): the whole request for bodies held in
// memory, each piece for streamed bodies. Stream is PlainStream or TlsStream (first a TLS
// handshake under the same deadline; a connection that speaks plain HTTP instead is answered 400
// in plain HTTP and closed).
//
// Thread rules: everything on the connection's strand, except where a handler says otherwise;
// the API answers on any thread, and the answer is posted back while the server runs (Gate).
#pragma once

#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <array>
#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "common/base/mutex.h"
#include "common/base/log.h"
#include "common/base/task_thread.h"
#include "coordinator/http/beast_messages.h"
#include "coordinator/http/event_stream_writer.h"
#include "coordinator/http/file_download.h"
#include "coordinator/http/http_server.h"
#include "coordinator/http/read_deadline.h"
#include "coordinator/http/streamed_upload.h"

namespace pstrain {

// Lets work on other threads (the catalog's) answer a session only while the server runs: once
// stop() closes it, an answer that comes late is dropped instead of touching a stopped server.
struct HttpServer::Gate {
  Mutex mutex;
  bool open PS_GUARDED_BY(mutex) = true;
};

using PlainStream = boost::beast::tcp_stream;
using TlsStream = boost::beast::ssl_stream<boost::beast::tcp_stream>;

// What a session's connection is doing.
enum class SessionPhase {
  kStarting,        // accepted; TLS: waiting for the first byte, then the handshake
  kReadingRequest,  // a request's headers, then a body into memory
  kUploading,       // a body streaming to a file (StreamedUpload)
  kHandling,        // the API has the request; its answer comes from any thread
  kAnswering,       // an answer being written (in memory, a FileDownload, a 100 Continue)
  kStreaming,       // an event stream (EventStreamWriter); the connection ends with it
  kClosing,         // TLS: close_notify in flight
  kClosed,
};

// The request a session is reading: the parsers (its header's, then its body's into memory), what
// the API gets, and what the answer must match.
struct SessionRequest {
  std::optional<boost::beast::http::request_parser<boost::beast::http::empty_body>> header_parser;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> memory_parser;
  HttpRequest request;
  unsigned version = 11;  // HTTP/1.1
  bool keep_alive = true;
  uint64_t body_limit = 0;  // of a body read into memory
};

template <typename Stream>
class Session : public std::enable_shared_from_this<Session<Stream>> {
  using std::enable_shared_from_this<Session>::shared_from_this;
  using std::enable_shared_from_this<Session>::weak_from_this;

 public:
  static constexpr bool kTls = !std::is_same_v<Stream, PlainStream>;

  // stream_args: the accepted socket (and, for TLS, the ssl::context).
  template <typename... StreamArgs>
  Session(RestApi& api, const HttpServerOptions& options, std::atomic<size_t>& open, TaskThread& files,
          std::shared_ptr<HttpServer::Gate> gate, StreamArgs&&... stream_args)
      : stream_(std::forward<StreamArgs>(stream_args)...),
        deadline_(boost::beast::get_lowest_layer(stream_), options.read_timeout),
        api_(api),
        options_(options),
        open_(open),
        files_(files),
        gate_(std::move(gate)) {}
  ~Session() { --open_; }

  void run() {
    boost::asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->start(); });
  }

  // Answers at once and closes (used when the server is full).
  void reject(HttpResponse response) {
    response.close = true;
    reject_ = std::move(response);
    run();
  }

  // --- For the handlers.

  Stream& stream() { return stream_; }
  boost::beast::tcp_stream& tcp() { return boost::beast::get_lowest_layer(stream_); }
  boost::beast::flat_buffer& buffer() { return buffer_; }
  HttpRequest& request() { return read_.request; }
  const HttpServerOptions& options() const { return options_; }
  TaskThread& files() { return files_; }
  const std::shared_ptr<HttpServer::Gate>& gate() const { return gate_; }

  // Armed before each read (with the session as its owner), ended after it; a write's too.
  ReadDeadline& deadline() { return deadline_; }

  // A read failed: answer what can be answered (408, 413, 431, 400) and close. `limit`: the
  // body's limit (for the 413's message).
  void on_read_error(boost::beast::error_code ec, bool got_some, uint64_t limit) {
    namespace http = boost::beast::http;
    namespace net = boost::asio;
    if (ec == net::error::connection_reset) return close_now();
    if (ec == http::error::end_of_stream || ec == net::error::eof) return close();
    if (ec == boost::beast::error::timeout) {
      if (buffer_.size() == 0 && !got_some && requests_ > 0) return close();  // an idle keep-alive connection
      return fail(problem(408, "request-timeout", "Request timeout",
                          std::string(got_some ? "the request was not complete" : "no request arrived") + " within " +
                              std::to_string(options_.read_timeout.count()) + " s"));
    }
    if (ec == http::error::body_limit) {
      return fail(problem(413, "body-too-large", "Body too large",
                          "the body is over the limit of " + std::to_string(limit) + " bytes"));
    }
    if (ec == http::error::header_limit) {
      return fail(problem(431, "headers-too-large", "Request headers too large", "headers are over 16 KiB"));
    }
    fail(problem(400, "bad-request", "Bad request", "malformed HTTP: " + ec.message()));
  }

  // Answers a request that could not be read (and closes).
  void fail(HttpResponse r) {
    r.close = true;
    api_.count("unparsed", r.status);
    send(std::move(r), 11);
  }

  // The request (request()) is whole: to the API, whose answer comes back here.
  void dispatch_request() {
    ++requests_;
    phase_ = SessionPhase::kHandling;
    const bool head = read_.request.method == "HEAD";
    api_.handle_async(std::move(read_.request), [self = shared_from_this(), head](HttpResponse out) {
      MutexLock lock(self->gate_->mutex);
      if (!self->gate_->open) return;
      boost::asio::post(self->stream_.get_executor(), [self, head, out = std::move(out)]() mutable {
        if (!self->read_.keep_alive) out.close = true;
        self->send(std::move(out), self->read_.version, head);
      });
    });
  }

  // An answer was written: the next request, or the end.
  void answered(bool close_after) {
    if (close_after) return close();
    read();
  }

  // The end of a connection whose last answer was sent: TLS says so (close_notify, bounded by the
  // write deadline) before the socket closes, so that a body ended by the close (an event stream)
  // reads as complete.
  void close() {
    if constexpr (kTls) {
      if (phase_ != SessionPhase::kStarting && phase_ != SessionPhase::kClosing && phase_ != SessionPhase::kClosed) {
        phase_ = SessionPhase::kClosing;
        deadline_.for_write();
        stream_.async_shutdown([self = shared_from_this()](boost::beast::error_code) { self->close_now(); });
        return;
      }
    }
    close_now();
  }

  void close_now() {
    phase_ = SessionPhase::kClosed;
    boost::beast::error_code ignored;
    tcp().socket().shutdown(boost::asio::ip::tcp::socket::shutdown_send, ignored);
    tcp().close();
  }

 private:
  void start() {
    if constexpr (kTls) {
      detect_tls();
    } else {
      serve();
    }
  }
  // (TLS: after the handshake.)
  void serve() {
    if (reject_) return send(std::move(*reject_), 11);
    read();
  }

  std::string peer();
  void detect_tls();
  void refuse_plain_http();
  void read();
  void on_header(boost::beast::error_code ec);
  void read_body_to_memory(uint64_t max_bytes);
  void send(HttpResponse out, unsigned version, bool head = false);

  Stream stream_;
  ReadDeadline deadline_;
  SessionPhase phase_ = SessionPhase::kStarting;
  std::optional<HttpResponse> reject_;  // answered instead of reading (the server is full)
  std::string peer_;                    // the client's address (TLS, for the log)
  uint64_t requests_ = 0;               // answered on this connection
  boost::beast::flat_buffer buffer_;
  SessionRequest read_;  // the request being read
  RestApi& api_;
  const HttpServerOptions& options_;
  std::atomic<size_t>& open_;
  TaskThread& files_;
  std::shared_ptr<HttpServer::Gate> gate_;
};

// --- The session's own reads and writes.

template <typename Stream>
std::string Session<Stream>::peer() {
  boost::beast::error_code ec;
  const auto endpoint = tcp().socket().remote_endpoint(ec);
  return ec ? std::string("?") : endpoint.address().to_string() + ":" + std::to_string(endpoint.port());
}

// TLS: the first byte must start a TLS handshake record (0x16), peeked at without reading it;
// then the handshake. A client that stalls in either is cut by the read deadline.
template <typename Stream>
void Session<Stream>::detect_tls() {
  namespace net = boost::asio;
  using tcp_socket = net::ip::tcp::socket;
  peer_ = peer();  // (a client that fails the handshake may be gone before it is logged)
  deadline_.arm(weak_from_this());
  tcp().socket().async_wait(tcp_socket::wait_read, [self = shared_from_this()](boost::beast::error_code ec) {
    unsigned char first = 0;
    if (!ec && !self->deadline_.fired()) {
      const size_t n = self->tcp().socket().receive(net::buffer(&first, 1), tcp_socket::message_peek, ec);
      if (!ec && n == 0) ec = net::error::eof;
    }
    if (self->deadline_.end()) ec = boost::beast::error::timeout;
    if (ec) {
      if (ec == boost::beast::error::timeout) {
        PSLOG(kInfo) << "TLS connection from " << self->peer_ << " sent nothing for "
                     << self->options_.read_timeout.count() << " s: closed";
      } else if (ec != net::error::eof && ec != net::error::connection_reset) {
        PSLOG(kInfo) << "TLS connection from " << self->peer_ << " closed before its handshake: " << ec.message();
      }
      return self->close_now();
    }
    if (first != 0x16) return self->refuse_plain_http();
    self->deadline_.arm(self);
    self->stream_.async_handshake(net::ssl::stream_base::server, [self](boost::beast::error_code ec) {
      if (self->deadline_.end()) ec = boost::beast::error::timeout;
      if (ec) {
        PSLOG(kInfo) << "TLS handshake with " << self->peer_ << " failed: "
                     << (ec == boost::beast::error::timeout
                             ? "not done within " + std::to_string(self->options_.read_timeout.count()) + " s"
                             : ec.message());
        return self->close_now();
      }
      self->phase_ = SessionPhase::kReadingRequest;
      self->serve();
    });
  });
}

// Plain HTTP on the TLS port: told so in plain HTTP (curl shows it), then closed.
template <typename Stream>
void Session<Stream>::refuse_plain_http() {
  namespace http = boost::beast::http;
  PSLOG(kWarning) << "plain HTTP from " << peer_ << " on the HTTPS port: refused (the client must use https://)";
  HttpResponse out = problem(400, "https-required", "HTTPS required",
                             "this port serves HTTPS only: use https:// (the connection spoke plain HTTP)");
  out.close = true;
  api_.count("unparsed", out.status);
  // The request's bytes that have arrived are read (and dropped): closing a socket with unread
  // bytes resets it, and the client would not see the answer.
  boost::beast::error_code ignored;
  std::array<char, 4096> drop;
  for (int i = 0; i < 4 && tcp().socket().available(ignored) > 0; ++i) {
    tcp().socket().receive(boost::asio::buffer(drop), 0, ignored);
  }
  auto response = std::make_shared<http::response<http::string_body>>(response_header<http::string_body>(out, 11));
  response->body() = std::move(out.body);
  response->prepare_payload();
  deadline_.for_write();
  http::async_write(tcp(), *response, [self = shared_from_this(), response](boost::beast::error_code, size_t) {
    self->close_now();
  });
}

template <typename Stream>
void Session<Stream>::read() {
  phase_ = SessionPhase::kReadingRequest;
  read_.header_parser.emplace();
  read_.header_parser->header_limit(16 * 1024);
  // The body's limit depends on where it goes (plan_body): checked by the body's parser.
  read_.header_parser->body_limit(boost::none);
  deadline_.arm(weak_from_this());
  boost::beast::http::async_read_header(stream_, buffer_, *read_.header_parser,
                                        [self = shared_from_this()](boost::beast::error_code ec, size_t) {
                                          if (self->deadline_.end()) ec = boost::beast::error::timeout;
                                          self->on_header(ec);
                                        });
}

template <typename Stream>
void Session<Stream>::on_header(boost::beast::error_code ec) {
  namespace http = boost::beast::http;
  if (ec) return on_read_error(ec, read_.header_parser->got_some(), 0);
  const auto& header = read_.header_parser->get();
  read_.request = request_from_header(*read_.header_parser);
  read_.version = header.version();
  read_.keep_alive = header.keep_alive();
  const bool expects_continue = boost::beast::iequals(header[http::field::expect], "100-continue");

  BodyPlan plan = api_.plan_body(read_.request);
  if (plan.kind == BodyPlan::Kind::kReject) {
    ++requests_;
    return send(std::move(*plan.reject), read_.version, read_.request.method == "HEAD");
  }
  auto then = [self = shared_from_this(), plan = std::move(plan)]() mutable {
    if (plan.kind == BodyPlan::Kind::kMemory) return self->read_body_to_memory(plan.max_bytes);
    self->phase_ = SessionPhase::kUploading;
    std::make_shared<StreamedUpload<Session>>(self, std::move(*self->read_.header_parser), std::move(plan))->start();
  };
  if (!expects_continue) return then();
  // curl and others wait for this before sending a large body.
  phase_ = SessionPhase::kAnswering;
  auto cont = std::make_shared<http::response<http::empty_body>>(http::status::continue_, read_.version);
  http::async_write(stream_, *cont, [self = shared_from_this(), cont, then = std::move(then)](boost::beast::error_code ec, size_t) mutable {
    if (ec) return self->close_now();
    then();
  });
}

template <typename Stream>
void Session<Stream>::read_body_to_memory(uint64_t max_bytes) {
  phase_ = SessionPhase::kReadingRequest;
  read_.body_limit = max_bytes != 0 ? max_bytes : options_.body_limit;
  // A parser given its limit after the headers checks only the bytes it reads: a declared
  // length over the limit is answered now, without reading any of it.
  if (read_.request.content_length && *read_.request.content_length > read_.body_limit) {
    return on_read_error(boost::beast::http::error::body_limit, true, read_.body_limit);
  }
  if (read_.request.content_length && *read_.request.content_length > 4096) buffer_.reserve(64 << 10);  // (see StreamedUpload)
  read_.memory_parser.emplace(std::move(*read_.header_parser));
  read_.memory_parser->body_limit(read_.body_limit);
  deadline_.arm(weak_from_this());
  boost::beast::http::async_read(stream_, buffer_, *read_.memory_parser, [self = shared_from_this()](boost::beast::error_code ec, size_t) {
    if (self->deadline_.end()) ec = boost::beast::error::timeout;
    if (ec) return self->on_read_error(ec, true, self->read_.body_limit);
    self->read_.request.body = std::move(self->read_.memory_parser->get().body());
    self->dispatch_request();
  });
}

// An answer: in memory here; a download or an event stream by its handler (not for HEAD, which
// gets the header a GET would, without the body).
template <typename Stream>
void Session<Stream>::send(HttpResponse out, unsigned version, bool head) {
  namespace http = boost::beast::http;
  if (out.events && !head) {
    phase_ = SessionPhase::kStreaming;
    return std::make_shared<EventStreamWriter<Session>>(shared_from_this(), std::move(out), version)->start();
  }
  phase_ = SessionPhase::kAnswering;
  if (out.file && !head) return std::make_shared<FileDownload<Session>>(shared_from_this(), std::move(out), version)->start();
  auto response = std::make_shared<http::response<http::string_body>>(response_header<http::string_body>(out, version));
  if (head) {
    response->content_length(out.file ? static_cast<uint64_t>(out.file->bytes) : out.body.size());
  } else {
    response->body() = std::move(out.body);
    response->prepare_payload();
  }
  deadline_.for_write();
  http::async_write(stream_, *response, [self = shared_from_this(), response, close = out.close](boost::beast::error_code ec, size_t) {
    if (ec) return self->close_now();
    self->answered(close);
  });
}

}  // namespace pstrain
