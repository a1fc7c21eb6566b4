#include "common/base/json_parse.h"

#include <boost/json/basic_parser_impl.hpp>
#include <boost/json/value_stack.hpp>

#include <charconv>
#include <string>

namespace pstrain {
namespace {

namespace json = boost::json;

// Boost's own value-building handler (boost/json/detail/handler.hpp), except for doubles: their
// text (in one piece, or in parts when the input ends mid-number) is read again by from_chars.
struct ExactHandler {
  static constexpr std::size_t max_object_size = json::object::max_size();
  static constexpr std::size_t max_array_size = json::array::max_size();
  static constexpr std::size_t max_key_size = json::string::max_size();
  static constexpr std::size_t max_string_size = json::string::max_size();

  json::value_stack st;
  std::string number;  // the parts of the number being read

  bool on_document_begin(json::error_code&) { return true; }
  bool on_document_end(json::error_code&) { return true; }
  bool on_object_begin(json::error_code&) { return true; }
  bool on_object_end(std::size_t n, json::error_code&) {
    st.push_object(n);
    return true;
  }
  bool on_array_begin(json::error_code&) { return true; }
  bool on_array_end(std::size_t n, json::error_code&) {
    st.push_array(n);
    return true;
  }
  bool on_key_part(json::string_view s, std::size_t, json::error_code&) {
    st.push_chars(s);
    return true;
  }
  bool on_key(json::string_view s, std::size_t, json::error_code&) {
    st.push_key(s);
    return true;
  }
  bool on_string_part(json::string_view s, std::size_t, json::error_code&) {
    st.push_chars(s);
    return true;
  }
  bool on_string(json::string_view s, std::size_t, json::error_code&) {
    st.push_string(s);
    return true;
  }
  bool on_number_part(json::string_view s, json::error_code&) {
    number.append(s.data(), s.size());
    return true;
  }
  bool on_int64(std::int64_t i, json::string_view, json::error_code&) {
    number.clear();
    st.push_int64(i);
    return true;
  }
  bool on_uint64(std::uint64_t u, json::string_view, json::error_code&) {
    number.clear();
    st.push_uint64(u);
    return true;
  }
  bool on_double(double d, json::string_view s, json::error_code&) {
    number.append(s.data(), s.size());
    double exact = 0;
    const auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), exact);
    // JSON's number grammar is a subset of from_chars' general format; out of range (1e999)
    // keeps Boost's reading (infinity), as does anything from_chars would not take whole.
    if (error == std::errc() && end == number.data() + number.size()) d = exact;
    number.clear();
    st.push_double(d);
    return true;
  }
  bool on_bool(bool b, json::error_code&) {
    st.push_bool(b);
    return true;
  }
  bool on_null(json::error_code&) {
    st.push_null();
    return true;
  }
  bool on_comment_part(json::string_view, json::error_code&) { return true; }
  bool on_comment(json::string_view, json::error_code&) { return true; }
};

}  // namespace

json::value parse_json(std::string_view text, boost::system::error_code& ec) {
  return parse_json(text, ec, json::parse_options{});
}

json::value parse_json(std::string_view text, boost::system::error_code& ec, const json::parse_options& options) {
  json::basic_parser<ExactHandler> parser{options};
  parser.handler().st.reset(json::storage_ptr());
  const std::size_t n = parser.write_some(false, text.data(), text.size(), ec);
  if (!ec && n < text.size()) ec = json::error::extra_data;
  if (ec) return nullptr;
  return parser.handler().st.release();
}

json::value parse_json(std::string_view text) {
  boost::system::error_code ec;
  json::value v = parse_json(text, ec);
  if (ec) throw boost::system::system_error(ec);
  return v;
}

}  // namespace pstrain
