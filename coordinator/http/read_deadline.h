// The read deadline of one HTTP connection (session.h): our own timer rather than the stream's, so
// that a client that never completes its request is still told so (408). When it fires, the
// socket's pending operations are cancelled and end() says it fired. A write's deadline is the
// stream's own (a client that stops reading is cut): for_write().
//
// Ownership: a member of its session, referring to the session's stream. Thread rules: the
// session's strand.
#pragma once

#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/tcp_stream.hpp>

#include <chrono>
#include <memory>

namespace pstrain {

class ReadDeadline {
 public:
  ReadDeadline(boost::beast::tcp_stream& tcp, std::chrono::seconds timeout)
      : tcp_(tcp), timer_(tcp.get_executor()), timeout_(timeout) {}

  // Before a read. `owner`: the session holding this; a timer that fires after it is gone does
  // nothing (and one cancelled by its destruction never reads `this`).
  void arm(std::weak_ptr<void> owner) {
    tcp_.expires_never();
    fired_ = false;
    timer_.expires_after(timeout_);
    timer_.async_wait([this, owner = std::move(owner)](boost::beast::error_code ec) {
      if (ec) return;
      if (auto alive = owner.lock()) {
        fired_ = true;
        boost::beast::error_code ignored;
        tcp_.socket().cancel(ignored);
      }
    });
  }
  // After the read: true if the deadline fired (the read's error is then a timeout).
  bool end() {
    timer_.cancel();
    return fired_;
  }
  bool fired() const { return fired_; }
  // Before a write.
  void for_write() { tcp_.expires_after(timeout_); }
  std::chrono::seconds timeout() const { return timeout_; }

 private:
  boost::beast::tcp_stream& tcp_;
  boost::asio::steady_timer timer_;
  std::chrono::seconds timeout_;
  bool fired_ = false;
};

}  // namespace pstrain
