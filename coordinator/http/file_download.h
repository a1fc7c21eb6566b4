// The HTTP session's handler for a download of a stored file (a model, a checkpoint): the header
// with the file's length, then its pieces, each read on the server's file thread once the last is
// written, so one piece is in memory per download. A file that goes (or changes) under the
// download ends the connection with the body short of its length, which the client sees.
//
// Conn is the session (session.h); the handler holds it alive until the last piece is written,
// then hands the connection back (the next request, or its close). Thread rules: the session's
// strand, except the piece reads on the file thread.
#pragma once

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http.hpp>

#include <memory>
#include <optional>
#include <string>

#include "common/base/log.h"
#include "coordinator/http/beast_messages.h"
#include "coordinator/http/http_types.h"

namespace pstrain {

template <typename Conn>
class FileDownload : public std::enable_shared_from_this<FileDownload<Conn>> {
  using std::enable_shared_from_this<FileDownload>::shared_from_this;

 public:
  FileDownload(std::shared_ptr<Conn> conn, HttpResponse out, unsigned version)
      : conn_(std::move(conn)), file_(std::move(out.file)), close_(out.close) {
    header_ = response_header<boost::beast::http::empty_body>(out, version);
    header_.content_length(static_cast<uint64_t>(file_->bytes));
  }

  void start() {
    auto serializer = std::make_shared<boost::beast::http::response_serializer<boost::beast::http::empty_body>>(header_);
    conn_->deadline().for_write();
    boost::beast::http::async_write_header(conn_->stream(), *serializer,
                                           [self = shared_from_this(), serializer](boost::beast::error_code ec, size_t) {
                                             if (ec) return self->conn_->close_now();
                                             self->send_piece(0);
                                           });
  }

 private:
  void send_piece(size_t index) {
    if (sent_ == static_cast<uint64_t>(file_->bytes)) return conn_->answered(close_);
    conn_->files().post([self = shared_from_this(), index] {
      std::optional<std::string> piece;
      try {
        piece = self->file_->read_piece(index);
      } catch (const std::exception& e) {
        PSLOG(kWarning) << "download: piece " << index << " unreadable: " << e.what();
      }
      boost::asio::post(self->conn_->stream().get_executor(), [self, index, piece = std::move(piece)]() mutable {
        self->write_piece(index, std::move(piece));
      });
    });
  }

  void write_piece(size_t index, std::optional<std::string> piece) {
    if (!piece || piece->empty() || sent_ + piece->size() > static_cast<uint64_t>(file_->bytes)) {
      PSLOG(kWarning) << "download ended short: piece " << index << " of a file of " << file_->bytes
                      << " bytes is missing or too long";
      return conn_->close_now();
    }
    piece_ = std::move(*piece);
    conn_->deadline().for_write();
    boost::asio::async_write(conn_->stream(), boost::asio::buffer(piece_),
                             [self = shared_from_this(), index](boost::beast::error_code ec, size_t n) {
                               if (ec) return self->conn_->close_now();
                               self->sent_ += n;
                               self->send_piece(index + 1);
                             });
  }

  std::shared_ptr<Conn> conn_;
  std::shared_ptr<const StoredFile> file_;
  boost::beast::http::response<boost::beast::http::empty_body> header_;
  bool close_;
  std::string piece_;  // the piece being written
  uint64_t sent_ = 0;
};

}  // namespace pstrain
