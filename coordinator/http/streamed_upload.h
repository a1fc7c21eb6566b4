// The HTTP session's handler for a request body that streams to a file (a dataset upload,
// BodyPlan::kFile): reads the body in pieces into an UploadFile's chunks, each piece within the
// read deadline (an upload of gigabytes may take minutes, a stalled one may not), checks the
// plan's size limit as bytes arrive (a chunked body has no length to check up front), and hands
// the request to the API once the file is closed. A client that disconnects or stalls, or a write
// that fails, leaves no file behind.
//
// Conn is the session (session.h); the handler holds it alive until the request is dispatched or
// has failed. Thread rules: the session's strand only.
#pragma once

#include <boost/beast/http.hpp>

#include <memory>
#include <optional>

#include "coordinator/http/http_types.h"
#include "coordinator/http/upload_file.h"

namespace pstrain {

template <typename Conn>
class StreamedUpload : public std::enable_shared_from_this<StreamedUpload<Conn>> {
  using std::enable_shared_from_this<StreamedUpload>::shared_from_this;

 public:
  // `header`: the request's parser, its headers read.
  StreamedUpload(std::shared_ptr<Conn> conn, boost::beast::http::request_parser<boost::beast::http::empty_body>&& header,
                 BodyPlan plan)
      : conn_(std::move(conn)), parser_(std::move(header)), plan_(std::move(plan)) {
    parser_.body_limit(plan_.max_bytes);
  }

  void start() {
    // Beast reads as much as the buffer's free capacity (at least 512, at most 64 KiB): the
    // header's small buffer would make every read of a gigabyte body 512 bytes.
    conn_->buffer().reserve(64 << 10);
    file_.emplace(conn_->files(), conn_->stream().get_executor(), plan_.path,
                  [self = shared_from_this()] { self->on_written(); });
    if (!parser_.is_done()) read_piece();  // (an empty body is done already)
  }

 private:
  // A piece of the body into the chunk being filled.
  void read_piece() {
    auto& body = parser_.get().body();
    body.data = file_->space();
    body.size = file_->space_size();
    conn_->deadline().arm(conn_);
    reader_ = Reader::kReading;
    boost::beast::http::async_read_some(
        conn_->stream(), conn_->buffer(), parser_, [self = shared_from_this()](boost::beast::error_code ec, size_t) {
          self->reader_ = Reader::kIdle;
          if (self->conn_->deadline().end()) ec = boost::beast::error::timeout;
          if (!self->file_) return;  // a failed write ended the upload meanwhile (already answered)
          if (ec == boost::beast::http::error::need_buffer) ec = {};
          if (ec) return self->fail_read(ec);
          self->on_piece();
        });
  }

  void on_piece() {
    const size_t got = file_->space_size() - parser_.get().body().size;
    file_->filled(got);
    streamed_ += got;
    if (streamed_ > plan_.max_bytes) return fail_read(boost::beast::http::error::body_limit);
    const bool done = parser_.is_done();
    if (file_->space_size() > 0 && !done) return read_piece();
    if (file_->writing()) {
      reader_ = Reader::kFullWaiting;  // on_written hands it over
      return;
    }
    hand_over();
  }

  // Gives the filled chunk to the upload thread and goes on reading into the other.
  void hand_over() {
    file_->hand_over([self = shared_from_this()] { self->on_written(); });
    if (!parser_.is_done()) read_piece();
  }

  // The upload thread is done with its chunk (or the open).
  void on_written() {
    if (!file_) return;  // abandoned meanwhile
    if (const std::string error = file_->error(); !error.empty()) {
      file_->abandon();
      file_.reset();
      return conn_->fail(problem(500, "upload-failed", "Upload failed", "cannot store the upload: " + error));
    }
    if (reader_ == Reader::kFullWaiting) {
      reader_ = Reader::kIdle;
      return hand_over();
    }
    // (The parser may be done while its read's handler is still queued: that handler has bytes.)
    if (parser_.is_done() && file_->pending() == 0 && reader_ == Reader::kIdle) finish();
  }

  void finish() {
    file_->finish([self = shared_from_this()](UploadFile::Delivered out) {
      if (!out.error.empty()) {
        return self->conn_->fail(problem(500, "upload-failed", "Upload failed", "cannot store the upload: " + out.error));
      }
      HttpRequest& request = self->conn_->request();
      request.body_file = std::move(out.path);
      request.body_bytes = out.bytes;
      request.body_sha256 = std::move(out.sha256);
      self->conn_->dispatch_request();
    });
    file_.reset();  // (the file is finish()'s now)
  }

  void fail_read(boost::beast::error_code ec) {
    if (file_) file_->abandon();
    file_.reset();
    conn_->on_read_error(ec, true, plan_.max_bytes);
  }

  // What reads the socket: nothing, a read in flight, or nothing because the chunk being filled
  // is full and the upload thread still has the other.
  enum class Reader { kIdle, kReading, kFullWaiting };

  std::shared_ptr<Conn> conn_;
  boost::beast::http::request_parser<boost::beast::http::buffer_body> parser_;
  BodyPlan plan_;
  std::optional<UploadFile> file_;  // none once finished or abandoned
  Reader reader_ = Reader::kIdle;
  uint64_t streamed_ = 0;  // bytes of the body so far
};

}  // namespace pstrain
