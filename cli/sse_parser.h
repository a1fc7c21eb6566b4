// An incremental parser of a Server-Sent Events stream (the WHATWG "text/event-stream" format):
// bytes in, in pieces of any size, events out as each one's blank line arrives. Pure: no I/O.
// Fields: "id", "event" (default "message"), "data" (several lines joined by '\n'); comment
// lines (':') and "retry" are ignored; lines end with LF, CRLF or CR. The last id seen is kept,
// for a reconnection's Last-Event-ID. Thread rules: none (one owner).
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace pstrain::cli {

struct SseEvent {
  std::string id;     // empty when the event had none
  std::string type;   // "message" when the event had no "event" field
  std::string data;
};

class SseParser {
 public:
  using Handler = std::function<void(const SseEvent&)>;
  explicit SseParser(Handler on_event) : on_event_(std::move(on_event)) {}

  void feed(std::string_view bytes);
  const std::string& last_event_id() const { return last_id_; }
  size_t comments() const { return comments_; }  // comment lines seen (keep-alives)

 private:
  void line(std::string_view text);
  void dispatch();

  Handler on_event_;
  std::string partial_;     // a line whose end has not arrived
  bool after_cr_ = false;   // the last byte was CR: a following LF belongs to it
  std::string id_, type_, data_, last_id_;
  bool has_data_ = false;
  size_t comments_ = 0;
};

}  // namespace pstrain::cli
