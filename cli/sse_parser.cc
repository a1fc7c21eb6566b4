#include "cli/sse_parser.h"

namespace pstrain::cli {

void SseParser::feed(std::string_view bytes) {
  for (char c : bytes) {
    if (after_cr_) {
      after_cr_ = false;
      if (c == '\n') continue;
    }
    if (c == '\r' || c == '\n') {
      after_cr_ = c == '\r';
      line(partial_);
      partial_.clear();
    } else {
      partial_ += c;
    }
  }
}

void SseParser::line(std::string_view text) {
  if (text.empty()) return dispatch();
  if (text.front() == ':') {
    ++comments_;
    return;
  }
  const size_t colon = text.find(':');
  std::string_view field = text.substr(0, colon);
  std::string_view value = colon == std::string_view::npos ? std::string_view() : text.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (field == "data") {
    if (has_data_) data_ += '\n';
    data_ += value;
    has_data_ = true;
  } else if (field == "event") {
    type_ = std::string(value);
  } else if (field == "id") {
    if (value.find('\0') == std::string_view::npos) id_ = std::string(value);
  }
}

void SseParser::dispatch() {
  if (!id_.empty()) last_id_ = id_;
  if (has_data_) on_event_(SseEvent{id_, type_.empty() ? "message" : type_, data_});
  id_.clear();
  type_.clear();
  data_.clear();
  has_data_ = false;
}

}  // namespace pstrain::cli
