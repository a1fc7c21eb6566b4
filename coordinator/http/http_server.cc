#include "coordinator/http/http_server.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/version.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>

#include "common/base/error.h"
#include "common/base/log.h"
#include "common/base/sha256.h"

namespace pstrain {
namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;

// Lets work on other threads (the catalog's) answer a session only while the server runs: once
// stop() closes it, an answer that comes late is dropped instead of touching a stopped server.
struct HttpServer::Gate {
  std::mutex mutex;
  bool open = true;  // guarded by mutex
};

namespace {

// A request body being streamed to a file: written and hashed on the upload thread only.
struct BodyFile {
  std::string path;
  int fd = -1;
  Sha256 hash;
  uint64_t bytes = 0;
  std::string error;  // the first write failure
  ~BodyFile() {
    if (fd >= 0) ::close(fd);
  }
};

using PlainStream = beast::tcp_stream;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

// One connection: read a request's headers, decide where its body goes (memory, or a file for a
// dataset upload), read the body, answer (at once, or when the catalog's work is done), repeat
// while keep-alive. Every read has a deadline: the whole request for bodies held in memory, each
// piece for streamed bodies (an upload of gigabytes may take minutes, a stalled one may not).
// Stream: PlainStream, or TlsStream (first a TLS handshake under the same deadline; a connection
// that speaks plain HTTP instead is answered 400 in plain HTTP and closed).
template <typename Stream>
class Session : public std::enable_shared_from_this<Session<Stream>> {
  static constexpr bool kTls = !std::is_same_v<Stream, PlainStream>;
  using std::enable_shared_from_this<Session>::shared_from_this;
  using std::enable_shared_from_this<Session>::weak_from_this;

 public:
  // stream_args: the accepted socket (and, for TLS, the ssl::context).
  template <typename... StreamArgs>
  Session(RestApi& api, const HttpServerOptions& options, std::atomic<size_t>& open, TaskThread& files,
          std::shared_ptr<HttpServer::Gate> gate, StreamArgs&&... stream_args)
      : stream_(std::forward<StreamArgs>(stream_args)...),
        timer_(stream_.get_executor()),
        api_(api),
        options_(options),
        open_(open),
        files_(files),
        gate_(std::move(gate)) {}
  ~Session() {
    --open_;
    // No upload-thread task refers to this session any more (each holds it alive): the file is
    // ours to remove.
    if (body_file_) {
      if (body_file_->fd >= 0) ::close(body_file_->fd);
      body_file_->fd = -1;
      std::error_code ignored;
      std::filesystem::remove(body_file_->path, ignored);
    }
  }

  void run() { net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->start(); }); }

  // Answers at once and closes (used when the server is full).
  void reject(HttpResponse response) {
    response.close = true;
    reject_ = std::move(response);
    run();
  }

 private:
  beast::tcp_stream& tcp() { return beast::get_lowest_layer(stream_); }

  void start() {
    if constexpr (kTls) {
      return detect_tls();
    } else {
      return serve();
    }
  }

  void serve() {
    if (reject_) return send(std::move(*reject_), 11);
    read();
  }

  std::string peer() {
    beast::error_code ec;
    const auto endpoint = tcp().socket().remote_endpoint(ec);
    return ec ? std::string("?") : endpoint.address().to_string() + ":" + std::to_string(endpoint.port());
  }

  // TLS: the first byte must start a TLS handshake record (0x16), peeked at without reading it;
  // then the handshake. A client that stalls in either is cut by the read deadline.
  void detect_tls() {
    peer_ = peer();  // (a client that fails the handshake may be gone before it is logged)
    arm_timer();
    tcp().socket().async_wait(tcp::socket::wait_read, [self = shared_from_this()](beast::error_code ec) {
      unsigned char first = 0;
      if (!ec && !self->timed_out_) {
        const size_t n = self->tcp().socket().receive(net::buffer(&first, 1), tcp::socket::message_peek, ec);
        if (!ec && n == 0) ec = net::error::eof;
      }
      self->timer_.cancel();
      if (self->timed_out_) ec = beast::error::timeout;
      if (ec) {
        if (ec == beast::error::timeout) {
          PSLOG(kInfo) << "TLS connection from " << self->peer_ << " sent nothing for "
                       << self->options_.read_timeout.count() << " s: closed";
        } else if (ec != net::error::eof && ec != net::error::connection_reset) {
          PSLOG(kInfo) << "TLS connection from " << self->peer_ << " closed before its handshake: " << ec.message();
        }
        return self->close_now();
      }
      if (first != 0x16) return self->refuse_plain_http();
      self->arm_timer();
      self->stream_.async_handshake(ssl::stream_base::server, [self](beast::error_code ec) {
        self->timer_.cancel();
        if (self->timed_out_) ec = beast::error::timeout;
        if (ec) {
          PSLOG(kInfo) << "TLS handshake with " << self->peer_ << " failed: "
                       << (ec == beast::error::timeout ? "not done within " + std::to_string(self->options_.read_timeout.count()) + " s" : ec.message());
          return self->close_now();
        }
        self->handshake_done_ = true;
        self->serve();
      });
    });
  }

  // Plain HTTP on the TLS port: told so in plain HTTP (curl shows it), then closed.
  void refuse_plain_http() {
    PSLOG(kWarning) << "plain HTTP from " << peer_ << " on the HTTPS port: refused (the client must use https://)";
    HttpResponse out = problem(400, "https-required", "HTTPS required",
                               "this port serves HTTPS only: use https:// (the connection spoke plain HTTP)");
    api_.count("unparsed", out.status);
    // The request's bytes that have arrived are read (and dropped): closing a socket with unread
    // bytes resets it, and the client would not see the answer.
    beast::error_code ignored;
    std::array<char, 4096> drop;
    for (int i = 0; i < 4 && tcp().socket().available(ignored) > 0; ++i) tcp().socket().receive(net::buffer(drop), 0, ignored);
    auto response = std::make_shared<http::response<http::string_body>>(http::status::bad_request, 11);
    response->set(http::field::server, "pstrain");
    response->set(http::field::content_type, out.content_type);
    response->keep_alive(false);
    response->body() = std::move(out.body);
    response->prepare_payload();
    tcp().expires_after(options_.read_timeout);
    http::async_write(tcp(), *response, [self = shared_from_this(), response](beast::error_code, size_t) {
      beast::error_code ignored;
      self->tcp().socket().shutdown(tcp::socket::shutdown_send, ignored);
      self->tcp().close();
    });
  }
  void arm_timer() {
    // Our own deadline rather than the stream's: the stream's closes the socket, and a client
    // that never completes its request should still be told so (408).
    tcp().expires_never();
    timed_out_ = false;
    timer_.expires_after(options_.read_timeout);
    timer_.async_wait([weak = weak_from_this()](beast::error_code ec) {
      if (ec) return;
      if (auto self = weak.lock()) {
        self->timed_out_ = true;
        beast::error_code ignored;
        self->tcp().socket().cancel(ignored);
      }
    });
  }

  void read() {
    header_parser_.emplace();
    header_parser_->header_limit(16 * 1024);
    // The body's limit depends on where it goes (plan_body): checked by the body's parser.
    header_parser_->body_limit(boost::none);
    arm_timer();
    http::async_read_header(stream_, buffer_, *header_parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      self->timer_.cancel();
      self->on_header(ec);
    });
  }

  // A read failed: answer what can be answered (408, 413, 431, 400) and close.
  void on_read_error(beast::error_code ec, bool got_some) {
    if (ec == net::error::connection_reset) return close_now();
    if (ec == http::error::end_of_stream || ec == net::error::eof) return close();
    if (ec == beast::error::timeout) {
      if (buffer_.size() == 0 && !got_some && requests_ > 0) return close();  // an idle keep-alive connection
      return fail(problem(408, "request-timeout", "Request timeout",
                          std::string(got_some ? "the request was not complete" : "no request arrived") + " within " +
                              std::to_string(options_.read_timeout.count()) + " s"));
    }
    if (ec == http::error::body_limit) {
      return fail(problem(413, "body-too-large", "Body too large",
                          "the body is over the limit of " + std::to_string(body_limit_) + " bytes"));
    }
    if (ec == http::error::header_limit) {
      return fail(problem(431, "headers-too-large", "Request headers too large", "headers are over 16 KiB"));
    }
    fail(problem(400, "bad-request", "Bad request", "malformed HTTP: " + ec.message()));
  }

  void fail(HttpResponse r) {
    r.close = true;
    api_.count("unparsed", r.status);
    send(std::move(r), 11);
  }

  void on_header(beast::error_code ec) {
    if (timed_out_) ec = beast::error::timeout;
    if (ec) return on_read_error(ec, header_parser_->got_some());
    const auto& header = header_parser_->get();
    request_ = HttpRequest{};
    request_.method = std::string(header.method_string());
    request_.target = std::string(header.target());
    if (const auto it = header.find(http::field::content_type); it != header.end()) request_.content_type = std::string(it->value());
    if (const auto it = header.find(http::field::if_none_match); it != header.end()) request_.if_none_match = std::string(it->value());
    if (const auto it = header.find(http::field::authorization); it != header.end()) request_.authorization = std::string(it->value());
    if (const auto length = header_parser_->content_length()) request_.content_length = *length;
    if (const auto it = header.find("Last-Event-ID"); it != header.end()) request_.last_event_id = std::string(it->value());
    version_ = header.version();
    keep_alive_ = header.keep_alive();
    const bool expects_continue = beast::iequals(header[http::field::expect], "100-continue");

    BodyPlan plan = api_.plan_body(request_);
    if (plan.kind == BodyPlan::Kind::kReject) {
      ++requests_;
      return send(std::move(*plan.reject), version_, request_.method == "HEAD");
    }
    auto then = [self = shared_from_this(), plan = std::move(plan)]() mutable {
      if (plan.kind == BodyPlan::Kind::kFile) return self->start_body_file(std::move(plan));
      self->read_body_to_memory(plan.max_bytes);
    };
    if (!expects_continue) return then();
    // curl and others wait for this before sending a large body.
    auto cont = std::make_shared<http::response<http::empty_body>>(http::status::continue_, version_);
    http::async_write(stream_, *cont, [self = shared_from_this(), cont, then = std::move(then)](beast::error_code ec, size_t) mutable {
      if (ec) return self->close_now();
      then();
    });
  }

  void read_body_to_memory(uint64_t max_bytes) {
    body_limit_ = max_bytes != 0 ? max_bytes : options_.body_limit;
    // A parser given its limit after the headers checks only the bytes it reads: a declared
    // length over the limit is answered now, without reading any of it.
    if (request_.content_length && *request_.content_length > body_limit_) {
      return on_read_error(http::error::body_limit, true);
    }
    if (request_.content_length && *request_.content_length > 4096) buffer_.reserve(64 << 10);  // (see start_body_file)
    memory_parser_.emplace(std::move(*header_parser_));
    memory_parser_->body_limit(body_limit_);
    arm_timer();
    http::async_read(stream_, buffer_, *memory_parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      self->timer_.cancel();
      if (self->timed_out_) ec = beast::error::timeout;
      if (ec) return self->on_read_error(ec, true);
      self->request_.body = std::move(self->memory_parser_->get().body());
      self->dispatch_request();
    });
  }

  // A streamed body fills one of two 1 MiB chunks on this thread while the upload thread writes
  // and hashes the other: the threads meet once per MiB, not once per socket read (under load a
  // hand-off can wait a scheduler slice; per 64 KiB read that cost 5x the throughput).
  void start_body_file(BodyPlan plan) {
    body_limit_ = plan.max_bytes;
    streamed_ = 0;
    file_parser_.emplace(std::move(*header_parser_));
    file_parser_->body_limit(plan.max_bytes);
    body_file_ = std::make_shared<BodyFile>();
    body_file_->path = plan.path;
    for (auto& chunk : chunks_) chunk.resize(kChunkBytes);
    // Beast reads as much as the buffer's free capacity (at least 512, at most 64 KiB): the
    // header's small buffer would make every read of a gigabyte body 512 bytes.
    buffer_.reserve(64 << 10);
    filling_ = 0;
    fill_ = 0;
    writing_ = true;  // the open below counts as a write in flight
    full_waiting_ = false;
    files_.post([self = shared_from_this(), file = body_file_] {
      std::error_code ignored;
      std::filesystem::create_directories(std::filesystem::path(file->path).parent_path(), ignored);
      file->fd = ::open(file->path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      if (file->fd < 0) file->error = file->path + ": " + std::strerror(errno);
      net::post(self->stream_.get_executor(), [self] { self->on_written(); });
    });
    if (!file_parser_->is_done()) read_body_piece();  // (an empty body is done already)
  }

  void read_body_piece() {
    auto& body = file_parser_->get().body();
    body.data = chunks_[filling_].data() + fill_;
    body.size = kChunkBytes - fill_;
    arm_timer();
    reading_ = true;
    http::async_read_some(stream_, buffer_, *file_parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      self->reading_ = false;
      self->timer_.cancel();
      if (self->timed_out_) ec = beast::error::timeout;
      if (ec == http::error::need_buffer) ec = {};
      if (ec) {
        self->abandon_body_file();
        return self->on_read_error(ec, true);
      }
      const size_t got = kChunkBytes - self->fill_ - self->file_parser_->get().body().size;
      self->fill_ += got;
      self->streamed_ += got;
      if (self->streamed_ > self->body_limit_) {  // a chunked body has no length to check up front
        self->abandon_body_file();
        return self->on_read_error(http::error::body_limit, true);
      }
      const bool done = self->file_parser_->is_done();
      if (self->fill_ < kChunkBytes && !done) return self->read_body_piece();
      if (self->writing_) {
        self->full_waiting_ = true;  // on_written hands it over
        return;
      }
      self->hand_over();
    });
  }

  // Gives the filled chunk to the upload thread and goes on reading into the other.
  void hand_over() {
    writing_ = true;
    const size_t n = fill_;
    const char* data = chunks_[filling_].data();
    files_.post([self = shared_from_this(), file = body_file_, data, n] {
      if (file->error.empty() && n > 0) {
        for (size_t done = 0; done < n;) {
          const ssize_t w = ::write(file->fd, data + done, n - done);
          if (w < 0) {
            if (errno == EINTR) continue;
            file->error = std::strerror(errno);
            break;
          }
          done += static_cast<size_t>(w);
        }
        file->hash.update(data, n);
        file->bytes += n;
      }
      net::post(self->stream_.get_executor(), [self] { self->on_written(); });
    });
    filling_ ^= 1;
    fill_ = 0;
    if (!file_parser_->is_done()) read_body_piece();
  }

  // The upload thread is done with its chunk.
  void on_written() {
    writing_ = false;
    if (!body_file_) return;  // abandoned meanwhile
    if (!body_file_->error.empty()) {
      const std::string error = body_file_->error;
      abandon_body_file();
      return fail(problem(500, "upload-failed", "Upload failed", "cannot store the upload: " + error));
    }
    if (full_waiting_) {
      full_waiting_ = false;
      return hand_over();
    }
    // (The parser may be done while its read's handler is still queued: that handler has bytes.)
    if (file_parser_->is_done() && fill_ == 0 && !reading_) finish_body_file();
  }

  void finish_body_file() {
    files_.post([self = shared_from_this(), file = body_file_] {
      if (file->fd >= 0 && ::close(file->fd) != 0 && file->error.empty()) file->error = std::strerror(errno);
      file->fd = -1;
      net::post(self->stream_.get_executor(), [self, file] {
        self->body_file_.reset();
        if (!file->error.empty()) {
          std::error_code ignored;
          std::filesystem::remove(file->path, ignored);
          return self->fail(problem(500, "upload-failed", "Upload failed", "cannot store the upload: " + file->error));
        }
        self->request_.body_file = file->path;
        self->request_.body_bytes = file->bytes;
        self->request_.body_sha256 = file->hash.hex();
        self->dispatch_request();
      });
    });
  }

  // A body file that will not be used (a disconnect, a timeout, a failed write): removed, after
  // any write still queued for it.
  void abandon_body_file() {
    if (!body_file_) return;
    files_.post([file = std::move(body_file_)] {
      if (file->fd >= 0) ::close(file->fd);
      file->fd = -1;
      std::error_code ignored;
      std::filesystem::remove(file->path, ignored);
    });
    body_file_.reset();
  }

  void dispatch_request() {
    ++requests_;
    const bool head = request_.method == "HEAD";
    api_.handle_async(std::move(request_), [self = shared_from_this(), head](HttpResponse out) {
      std::lock_guard lock(self->gate_->mutex);
      if (!self->gate_->open) return;
      net::post(self->stream_.get_executor(), [self, head, out = std::move(out)]() mutable {
        if (!self->keep_alive_) out.close = true;
        self->send(std::move(out), self->version_, head);
      });
    });
  }

  void send(HttpResponse out, unsigned version, bool head = false) {
    if (out.events && !head) return start_stream(std::move(out), version);
    if (out.file && !head) return send_file(std::move(out), version);
    auto response = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(out.status), version);
    response->set(http::field::server, "pstrain");
    response->set(http::field::content_type, out.content_type);
    for (const auto& [name, value] : out.headers) response->set(name, value);
    response->keep_alive(!out.close);
    if (head) {
      // What a GET would send, without the body.
      response->content_length(out.file ? static_cast<uint64_t>(out.file->bytes) : out.body.size());
    } else {
      response->body() = std::move(out.body);
      response->prepare_payload();
    }
    tcp().expires_after(options_.read_timeout);
    http::async_write(stream_, *response, [self = shared_from_this(), response, close = out.close](beast::error_code ec, size_t) {
      if (ec) return self->close_now();
      if (close) return self->close();
      self->read();
    });
  }

  // --- Downloads of stored files: the header with the file's length, then its pieces, each
  // read on the file thread once the last is written (one piece in memory per download).

  void send_file(HttpResponse out, unsigned version) {
    auto header = std::make_shared<http::response<http::empty_body>>(static_cast<http::status>(out.status), version);
    header->set(http::field::server, "pstrain");
    header->set(http::field::content_type, out.content_type);
    for (const auto& [name, value] : out.headers) header->set(name, value);
    header->keep_alive(!out.close);
    header->content_length(static_cast<uint64_t>(out.file->bytes));
    auto serializer = std::make_shared<http::response_serializer<http::empty_body>>(*header);
    download_ = std::move(out.file);
    download_sent_ = 0;
    download_close_ = out.close;
    tcp().expires_after(options_.read_timeout);
    http::async_write_header(stream_, *serializer, [self = shared_from_this(), header, serializer](beast::error_code ec, size_t) {
      if (ec) return self->close_now();
      self->send_piece(0);
    });
  }

  void send_piece(size_t index) {
    if (download_sent_ == static_cast<uint64_t>(download_->bytes)) {
      download_.reset();
      download_piece_ = {};
      if (download_close_) return close();
      return read();
    }
    files_.post([self = shared_from_this(), file = download_, index] {
      std::optional<std::string> piece;
      try {
        piece = file->read_piece(index);
      } catch (const std::exception& e) {
        PSLOG(kWarning) << "download: piece " << index << " unreadable: " << e.what();
      }
      net::post(self->stream_.get_executor(), [self, index, piece = std::move(piece)]() mutable {
        self->write_piece(index, std::move(piece));
      });
    });
  }

  void write_piece(size_t index, std::optional<std::string> piece) {
    if (!piece || piece->empty() || download_sent_ + piece->size() > static_cast<uint64_t>(download_->bytes)) {
      // The file went (or changed) under the download: the client sees a body short of its length.
      PSLOG(kWarning) << "download ended short: piece " << index << " of a file of " << download_->bytes
                      << " bytes is missing or too long";
      download_.reset();
      return close_now();
    }
    download_piece_ = std::move(*piece);
    tcp().expires_after(options_.read_timeout);
    net::async_write(stream_, net::buffer(download_piece_), [self = shared_from_this(), index](beast::error_code ec, size_t n) {
      if (ec) return self->close_now();
      self->download_sent_ += n;
      self->send_piece(index + 1);
    });
  }

  // The end of a connection whose last answer was sent: TLS says so (close_notify, bounded by the
  // read deadline) before the socket closes, so that a body ended by the close (an event stream)
  // reads as complete.
  void close() {
    if constexpr (kTls) {
      if (handshake_done_ && !shutting_down_) {
        shutting_down_ = true;
        tcp().expires_after(options_.read_timeout);
        stream_.async_shutdown([self = shared_from_this()](beast::error_code) { self->close_now(); });
        return;
      }
    }
    close_now();
  }

  void close_now() {
    beast::error_code ignored;
    tcp().socket().shutdown(tcp::socket::shutdown_send, ignored);
    tcp().close();
  }

  // --- Event streams: this session now only writes (see http_server.h).

  void start_stream(HttpResponse out, unsigned version) {
    events_ = std::move(out.events);
    auto header = std::make_shared<http::response<http::empty_body>>(http::status::ok, version);
    header->set(http::field::server, "pstrain");
    header->set(http::field::content_type, out.content_type);
    for (const auto& [name, value] : out.headers) header->set(name, value);
    header->keep_alive(false);  // the body ends with the connection
    auto serializer = std::make_shared<http::response_serializer<http::empty_body>>(*header);
    tcp().expires_never();  // a quiet stream is not a stalled one; a full queue is (the subscriber)
    if (options_.event_send_buffer > 0) {
      beast::error_code ignored;
      tcp().socket().set_option(net::socket_base::send_buffer_size(options_.event_send_buffer), ignored);
    }
    writing_events_ = true;
    http::async_write_header(stream_, *serializer, [self = shared_from_this(), header, serializer](beast::error_code ec, size_t) {
      self->writing_events_ = false;
      if (ec) return self->end_stream(false);
      self->watch_client();
      self->arm_heartbeat();
      // Wakeups come on the publishing thread: post to this session's strand, while the server runs.
      self->events_->set_wakeup([weak = self->weak_from_this(), gate = self->gate_, executor = self->stream_.get_executor()] {
        std::lock_guard lock(gate->mutex);
        if (!gate->open) return;
        net::post(executor, [weak] {
          if (auto session = weak.lock()) session->pump();
        });
      });
      self->pump();
    });
  }

  // A stream's client sends nothing more; a read ends when it goes away (or resets).
  void watch_client() {
    stream_.async_read_some(net::buffer(sink_), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->end_stream(false);
      self->watch_client();
    });
  }

  void arm_heartbeat() {
    heartbeat_.expires_after(options_.event_heartbeat);
    heartbeat_.async_wait([weak = weak_from_this()](beast::error_code ec) {
      if (ec) return;
      auto self = weak.lock();
      if (!self || self->stream_ended_) return;
      if (!self->writing_events_) self->write_frames({kKeepAlive}, false);
      self->arm_heartbeat();
    });
  }

  // Writes what the subscriber has, one batch at a time: while a write is in flight, events wait
  // in the subscriber's bounded queue (not here), so a client that does not read fills it and is
  // dropped.
  void pump() {
    if (stream_ended_ || writing_events_) return;
    EventSubscriber::Batch batch = events_->take();
    if (batch.dropped) {
      PSLOG(kInfo) << "event stream dropped: the client did not keep up with its queue";
      return end_stream(false);
    }
    if (batch.frames.empty()) {
      if (batch.end) end_stream(true);
      return;
    }
    write_frames(std::move(batch.frames), batch.end);
  }

  void write_frames(std::vector<EventFrame> frames, bool end) {
    writing_events_ = true;
    frames_ = std::move(frames);
    buffers_.clear();
    for (const EventFrame& f : frames_) buffers_.emplace_back(f->data(), f->size());
    net::async_write(stream_, buffers_, [self = shared_from_this(), end](beast::error_code ec, size_t) {
      self->writing_events_ = false;
      self->frames_.clear();
      if (ec) return self->end_stream(false);
      if (end) return self->end_stream(true);
      self->pump();
    });
  }

  // `graceful`: everything was sent (a finished job's stream), else the client left or fell behind.
  void end_stream(bool graceful) {
    if (stream_ended_) return;
    stream_ended_ = true;
    if (events_) events_->cancel();
    heartbeat_.cancel();
    beast::error_code ignored;
    if (graceful) {
      if constexpr (kTls) tcp().socket().cancel(ignored);  // (the client watch's read: the shutdown reads)
      return close();
    }
    tcp().socket().cancel(ignored);
    tcp().close();
  }

  static constexpr size_t kChunkBytes = 1 << 20;
  std::shared_ptr<const StoredFile> download_;  // the file being sent, if any
  std::string download_piece_;                  // the piece being written
  uint64_t download_sent_ = 0;
  bool download_close_ = false;

  Stream stream_;
  net::steady_timer timer_;
  std::optional<HttpResponse> reject_;  // answered instead of reading (the server is full)
  bool handshake_done_ = false, shutting_down_ = false;  // (TLS)
  std::string peer_;  // the client's address (TLS, for the log)
  bool timed_out_ = false;
  uint64_t requests_ = 0;  // answered on this connection
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::empty_body>> header_parser_;
  std::optional<http::request_parser<http::string_body>> memory_parser_;
  std::optional<http::request_parser<http::buffer_body>> file_parser_;
  HttpRequest request_;
  unsigned version_ = 11;
  bool keep_alive_ = true;
  uint64_t body_limit_ = 0;
  uint64_t streamed_ = 0;  // bytes of the current streamed body
  // A streamed body's two chunks: chunks_[filling_] fills here (fill_ bytes so far) while the
  // upload thread writes the other (writing_); full_waiting_: the filling one is full and waits;
  // reading_: a read into it is in flight.
  std::array<std::vector<char>, 2> chunks_;
  int filling_ = 0;
  size_t fill_ = 0;
  bool writing_ = false, full_waiting_ = false, reading_ = false;
  std::shared_ptr<BodyFile> body_file_;  // touched by the upload thread only (the pointer: here)
  RestApi& api_;
  const HttpServerOptions& options_;
  std::atomic<size_t>& open_;
  TaskThread& files_;
  std::shared_ptr<HttpServer::Gate> gate_;
  // An event stream's state (strand only).
  std::shared_ptr<EventSubscriber> events_;
  net::steady_timer heartbeat_{stream_.get_executor()};
  bool writing_events_ = false, stream_ended_ = false;
  std::vector<EventFrame> frames_;  // being written
  std::vector<net::const_buffer> buffers_;
  std::array<char, 512> sink_{};    // what a stream's client sends (ignored)
  static inline const EventFrame kKeepAlive = std::make_shared<const std::string>(": keep-alive\n\n");
};

}  // namespace

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
    std::lock_guard lock(gate_->mutex);
    gate_->open = false;
  }
  if (!thread_.joinable()) return;
  io_.stop();
  thread_.join();
}

}  // namespace pstrain
