// The HTTP session's handler for an event stream (a response with `events`, text/event-stream):
// the headers, then each event the subscriber gives, written as fast as the client reads. The
// subscriber's bounded queue is what waits: while a write is in flight events queue there, and a
// client that falls behind by a full queue is dropped (connection closed). A comment line
// (": keep-alive") every event_heartbeat keeps proxies from closing an idle stream. The stream
// ends with the connection: the session only writes from here on.
//
// Conn is the session (session.h). Thread rules: the session's strand; the subscriber's wakeups
// come on the publishing thread and are posted to the strand while the server runs (its gate).
#pragma once

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http.hpp>

#include <array>
#include <memory>
#include <mutex>
#include <vector>

#include "common/base/log.h"
#include "coordinator/http/beast_messages.h"
#include "coordinator/http/http_types.h"

namespace pstrain {

template <typename Conn>
class EventStreamWriter : public std::enable_shared_from_this<EventStreamWriter<Conn>> {
  using std::enable_shared_from_this<EventStreamWriter>::shared_from_this;
  using std::enable_shared_from_this<EventStreamWriter>::weak_from_this;

 public:
  EventStreamWriter(std::shared_ptr<Conn> conn, HttpResponse out, unsigned version)
      : conn_(std::move(conn)), events_(std::move(out.events)), heartbeat_(conn_->stream().get_executor()) {
    out.status = 200;
    out.close = true;  // the body ends with the connection
    header_ = response_header<boost::beast::http::empty_body>(out, version);
  }

  void start() {
    auto serializer = std::make_shared<boost::beast::http::response_serializer<boost::beast::http::empty_body>>(header_);
    conn_->tcp().expires_never();  // a quiet stream is not a stalled one; a full queue is (the subscriber)
    if (const int bytes = conn_->options().event_send_buffer; bytes > 0) {
      boost::beast::error_code ignored;
      conn_->tcp().socket().set_option(boost::asio::socket_base::send_buffer_size(bytes), ignored);
    }
    state_ = State::kWriting;
    boost::beast::http::async_write_header(
        conn_->stream(), *serializer, [self = shared_from_this(), serializer](boost::beast::error_code ec, size_t) {
          self->state_ = State::kIdle;
          if (ec) return self->end(false);
          self->watch_client();
          self->arm_heartbeat();
          self->events_->set_wakeup([weak = self->weak_from_this(), gate = self->conn_->gate(),
                                     executor = self->conn_->stream().get_executor()] {
            MutexLock lock(gate->mutex);
            if (!gate->open) return;
            boost::asio::post(executor, [weak] {
              if (auto writer = weak.lock()) writer->pump();
            });
          });
          self->pump();
        });
  }

 private:
  // The client sends nothing more; a read ends when it goes away (or resets).
  void watch_client() {
    conn_->stream().async_read_some(boost::asio::buffer(sink_), [self = shared_from_this()](boost::beast::error_code ec, size_t) {
      if (ec) return self->end(false);
      self->watch_client();
    });
  }

  void arm_heartbeat() {
    heartbeat_.expires_after(conn_->options().event_heartbeat);
    heartbeat_.async_wait([weak = weak_from_this()](boost::beast::error_code ec) {
      if (ec) return;
      auto self = weak.lock();
      if (!self || self->state_ == State::kEnded) return;
      if (self->state_ == State::kIdle) self->write_frames({keep_alive()}, false);
      self->arm_heartbeat();
    });
  }

  // Writes what the subscriber has, one batch at a time.
  void pump() {
    if (state_ != State::kIdle) return;
    EventSubscriber::Batch batch = events_->take();
    if (batch.dropped) {
      PSLOG(kInfo) << "event stream dropped: the client did not keep up with its queue";
      return end(false);
    }
    if (batch.frames.empty()) {
      if (batch.end) end(true);
      return;
    }
    write_frames(std::move(batch.frames), batch.end);
  }

  void write_frames(std::vector<EventFrame> frames, bool last) {
    state_ = State::kWriting;
    frames_ = std::move(frames);
    buffers_.clear();
    for (const EventFrame& f : frames_) buffers_.emplace_back(f->data(), f->size());
    boost::asio::async_write(conn_->stream(), buffers_, [self = shared_from_this(), last](boost::beast::error_code ec, size_t) {
      self->state_ = State::kIdle;
      self->frames_.clear();
      if (ec) return self->end(false);
      if (last) return self->end(true);
      self->pump();
    });
  }

  // `graceful`: everything was sent (a finished job's stream), else the client left or fell behind.
  void end(bool graceful) {
    if (state_ == State::kEnded) return;
    state_ = State::kEnded;
    events_->cancel();
    heartbeat_.cancel();
    boost::beast::error_code ignored;
    if (graceful) {
      if constexpr (Conn::kTls) conn_->tcp().socket().cancel(ignored);  // (the client watch's read: the shutdown reads)
      return conn_->close();
    }
    conn_->tcp().socket().cancel(ignored);
    conn_->tcp().close();
  }

  static const EventFrame& keep_alive() {
    static const EventFrame frame = std::make_shared<const std::string>(": keep-alive\n\n");
    return frame;
  }

  // kWriting: the header or frames in flight (events wait in the subscriber's queue).
  enum class State { kWriting, kIdle, kEnded };

  std::shared_ptr<Conn> conn_;
  std::shared_ptr<EventSubscriber> events_;
  boost::beast::http::response<boost::beast::http::empty_body> header_;
  boost::asio::steady_timer heartbeat_;
  State state_ = State::kWriting;
  std::vector<EventFrame> frames_;  // being written
  std::vector<boost::asio::const_buffer> buffers_;
  std::array<char, 512> sink_{};  // what the client sends (ignored)
};

}  // namespace pstrain
