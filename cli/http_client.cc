#include "cli/http_client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/json.hpp>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <cstdio>
#include <fstream>
#include <filesystem>
#include <limits>

#include "common/base/json_parse.h"

namespace pstrain::cli {
namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;

std::optional<BaseUrl> parse_base_url(std::string_view text, std::string* why) {
  BaseUrl url;
  std::string_view scheme = "http://";
  if (text.substr(0, 8) == "https://") {
    scheme = "https://";
    url.tls = true;
    url.port = "443";
  } else if (text.substr(0, scheme.size()) != scheme) {
    *why = "the URL must start with http:// or https:// (got '" + std::string(text) + "')";
    return std::nullopt;
  }
  while (!text.empty() && text.back() == '/') text.remove_suffix(1);
  url.text = std::string(text);
  std::string_view rest = text.substr(scheme.size());
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (slash != std::string_view::npos) url.base = std::string(rest.substr(slash));
  if (authority.find('@') != std::string_view::npos) {
    *why = "user information in the URL is not supported (use --token)";
    return std::nullopt;
  }
  size_t colon = authority.rfind(':');
  if (!authority.empty() && authority.front() == '[') {  // [IPv6]:port
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) {
      *why = "unbalanced '[' in the URL's host";
      return std::nullopt;
    }
    url.host = std::string(authority.substr(1, close - 1));
    colon = authority.size() > close + 1 && authority[close + 1] == ':' ? close + 1 : std::string_view::npos;
  } else {
    url.host = std::string(authority.substr(0, colon));
  }
  if (colon != std::string_view::npos) url.port = std::string(authority.substr(colon + 1));
  if (url.host.empty()) {
    *why = "the URL has no host: '" + std::string(text) + "'";
    return std::nullopt;
  }
  if (url.port.empty() || url.port.find_first_not_of("0123456789") != std::string::npos || url.port.size() > 5) {
    *why = "the URL's port is not a number: '" + std::string(text) + "'";
    return std::nullopt;
  }
  return url;
}

// One connection's worth of Asio state, reset for each request. Every asynchronous operation runs
// to completion on the private io_context (tcp_stream's deadlines apply to asynchronous
// operations only), so each call below is blocking with a deadline. An https URL gets a TLS
// stream over the TCP one (a new one per request: a TLS stream is not reused after its close).
struct HttpClient::Impl {
  net::io_context ioc;
  std::optional<ssl::context> tls_context;  // https only
  std::optional<beast::tcp_stream> plain;
  std::optional<beast::ssl_stream<beast::tcp_stream>> tls;
  beast::flat_buffer buffer{64 * 1024};

  // Calls f(stream) with a fresh stream of the URL's kind.
  template <typename F>
  decltype(auto) with_stream(F&& f) {
    buffer.clear();
    if (tls_context) {
      plain.reset();
      tls.emplace(ioc, *tls_context);
      return f(*tls);
    }
    plain.emplace(ioc);
    return f(*plain);
  }

  template <typename Start>
  beast::error_code run(Start&& start) {
    beast::error_code result = net::error::would_block;
    start([&result](beast::error_code ec, auto&&...) { result = ec; });
    ioc.restart();
    ioc.run();
    return result;
  }
};

HttpClient::HttpClient(BaseUrl url, ClientOptions options)
    : url_(std::move(url)), options_(std::move(options)), impl_(std::make_unique<Impl>()) {
  if (!url_.tls) return;
  auto& context = impl_->tls_context.emplace(ssl::context::tls_client);
  SSL_CTX_set_min_proto_version(context.native_handle(), TLS1_2_VERSION);
  beast::error_code ec;
  if (options_.insecure) {
    context.set_verify_mode(ssl::verify_none);
    return;
  }
  context.set_verify_mode(ssl::verify_peer);
  if (options_.cacert.empty()) {
    context.set_default_verify_paths(ec);
  } else {
    if (!std::ifstream(options_.cacert)) throw TlsSetupError("--cacert: cannot read '" + options_.cacert + "'");
    context.load_verify_file(options_.cacert, ec);
    if (ec) throw TlsSetupError("--cacert: '" + options_.cacert + "' holds no PEM certificate (" + ec.message() + ")");
  }
}

HttpClient::~HttpClient() = default;

namespace {

[[noreturn]] void unreachable(const BaseUrl& url, const std::string& what, const beast::error_code& ec) {
  const std::string why = ec == beast::error::timeout ? "timed out" : ec.message();
  throw Unreachable("cannot reach the coordinator at " + url.text + ": " + what + " " + why);
}

}  // namespace

namespace {

// Connects (and for https, shakes hands: SNI, the server's certificate checked against the URL's
// host), sends the request and reads the response's header into `parser`. Throws Unreachable.
template <typename Impl, typename Stream>
void send_and_read_header(Impl& impl, Stream& stream, const BaseUrl& url, const ClientOptions& options,
                          http::request<http::string_body>& req, http::response_parser<http::empty_body>& parser) {
  beast::error_code ec;
  beast::tcp_stream& socket = beast::get_lowest_layer(stream);
  tcp::resolver resolver(impl.ioc);
  tcp::resolver::results_type endpoints;
  {
    beast::error_code result = net::error::would_block;
    resolver.async_resolve(url.host, url.port, [&](beast::error_code e, tcp::resolver::results_type r) {
      result = e;
      endpoints = std::move(r);
    });
    impl.ioc.restart();
    impl.ioc.run_for(options.connect_timeout);
    if (result == net::error::would_block) {
      resolver.cancel();
      impl.ioc.restart();
      impl.ioc.run();
      unreachable(url, "resolving " + url.host, beast::error::timeout);
    }
    if (result) unreachable(url, "resolving " + url.host, result);
  }
  socket.expires_after(options.connect_timeout);
  ec = impl.run([&](auto handler) { socket.async_connect(endpoints, handler); });
  if (ec) unreachable(url, "connect:", ec);
  if constexpr (!std::is_same_v<Stream, beast::tcp_stream>) {
    beast::error_code address_error;
    net::ip::make_address(url.host, address_error);
    // SNI names a host, never an address (RFC 6066).
    if (address_error && SSL_set_tlsext_host_name(stream.native_handle(), url.host.c_str()) != 1) {
      unreachable(url, "TLS:", beast::error_code(static_cast<int>(::ERR_get_error()), net::error::get_ssl_category()));
    }
    if (!options.insecure) stream.set_verify_callback(ssl::host_name_verification(url.host));
    socket.expires_after(options.connect_timeout);
    ec = impl.run([&](auto handler) { stream.async_handshake(ssl::stream_base::client, handler); });
    if (ec) {
      const bool verify = ec.category() == net::error::get_ssl_category() &&
                          ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == SSL_R_CERTIFICATE_VERIFY_FAILED;
      unreachable(url, verify ? "TLS handshake (give the server's CA with --cacert or PSTRAIN_CACERT):" : "TLS handshake:", ec);
    }
  }
  socket.expires_after(options.read_timeout);
  ec = impl.run([&](auto handler) { http::async_write(stream, req, handler); });
  if (ec) unreachable(url, "sending the request:", ec);
  parser.body_limit(std::numeric_limits<uint64_t>::max());
  socket.expires_after(options.read_timeout);
  ec = impl.run([&](auto handler) { http::async_read_header(stream, impl.buffer, parser, handler); });
  if (ec) unreachable(url, "reading the answer:", ec);
}

// Reads the rest of the body into `parser` (a parser of a body type that holds it), each read with
// the deadline `timeout`.
template <typename Impl, typename Stream, typename Parser>
void read_body(Impl& impl, Stream& stream, const BaseUrl& url, std::chrono::milliseconds timeout, Parser& parser) {
  while (!parser.is_done()) {
    beast::get_lowest_layer(stream).expires_after(timeout);
    const beast::error_code ec =
        impl.run([&](auto handler) { http::async_read_some(stream, impl.buffer, parser, handler); });
    if (ec) unreachable(url, "reading the answer:", ec);
  }
}

http::request<http::string_body> make_request(const BaseUrl& url, const ClientOptions& options, http::verb verb,
                                              const std::string& target) {
  http::request<http::string_body> req{verb, url.base + target, 11};
  req.set(http::field::host, url.host + ":" + url.port);
  req.set(http::field::user_agent, "pstrain-cli");
  if (!options.token.empty()) req.set(http::field::authorization, "Bearer " + options.token);
  req.keep_alive(false);
  return req;
}

Response head_of(const http::response_parser<http::empty_body>& parser) {
  Response r;
  r.status = parser.get().result_int();
  r.content_type = std::string(parser.get()[http::field::content_type]);
  return r;
}

}  // namespace

Response HttpClient::request(const std::string& method, const std::string& target, const std::string& body,
                             const std::string& content_type) {
  const http::verb verb = http::string_to_verb(method);
  auto req = make_request(url_, options_, verb, target);
  req.set(http::field::accept, "application/json, application/problem+json");
  if (!content_type.empty()) req.set(http::field::content_type, content_type);
  req.body() = body;
  req.prepare_payload();
  return impl_->with_stream([&](auto& stream) {
    http::response_parser<http::empty_body> header_parser;
    send_and_read_header(*impl_, stream, url_, options_, req, header_parser);
    Response r = head_of(header_parser);
    http::response_parser<http::string_body> parser(std::move(header_parser));
    parser.body_limit(options_.max_body_bytes);
    if (verb != http::verb::head) read_body(*impl_, stream, url_, options_.read_timeout, parser);
    r.body = std::move(parser.get().body());
    beast::get_lowest_layer(stream).close();
    return r;
  });
}

Response HttpClient::download(const std::string& target, const std::string& path, uint64_t* bytes) {
  auto req = make_request(url_, options_, http::verb::get, target);
  return impl_->with_stream([&](auto& stream) {
    http::response_parser<http::empty_body> header_parser;
    send_and_read_header(*impl_, stream, url_, options_, req, header_parser);
    Response r = head_of(header_parser);
    if (r.status != 200) {
      http::response_parser<http::string_body> parser(std::move(header_parser));
      parser.body_limit(options_.max_body_bytes);
      read_body(*impl_, stream, url_, options_.read_timeout, parser);
      r.body = std::move(parser.get().body());
      beast::get_lowest_layer(stream).close();
      return r;
    }
    const std::string partial = path + ".part";
    http::response_parser<http::file_body> parser(std::move(header_parser));
    parser.body_limit(std::numeric_limits<uint64_t>::max());
    beast::error_code ec;
    parser.get().body().open(partial.c_str(), beast::file_mode::write, ec);
    if (ec) throw std::runtime_error("cannot write " + partial + ": " + ec.message());
    try {
      read_body(*impl_, stream, url_, options_.read_timeout, parser);
    } catch (...) {
      parser.get().body().close();
      std::remove(partial.c_str());
      throw;
    }
    parser.get().body().close();
    std::error_code size_error;
    *bytes = std::filesystem::file_size(partial, size_error);
    beast::get_lowest_layer(stream).close();
    if (std::rename(partial.c_str(), path.c_str()) != 0) {
      std::remove(partial.c_str());
      throw std::runtime_error("cannot rename " + partial + " to " + path);
    }
    return r;
  });
}

Response HttpClient::stream(const std::string& target, const std::vector<std::pair<std::string, std::string>>& headers,
                            std::chrono::milliseconds idle_timeout,
                            const std::function<bool(std::string_view)>& on_data) {
  auto req = make_request(url_, options_, http::verb::get, target);
  for (const auto& [name, value] : headers) req.set(name, value);
  return impl_->with_stream([&](auto& stream) {
    http::response_parser<http::empty_body> header_parser;
    send_and_read_header(*impl_, stream, url_, options_, req, header_parser);
    Response r = head_of(header_parser);
    if (r.status != 200) {
      http::response_parser<http::string_body> parser(std::move(header_parser));
      parser.body_limit(options_.max_body_bytes);
      read_body(*impl_, stream, url_, options_.read_timeout, parser);
      r.body = std::move(parser.get().body());
      beast::get_lowest_layer(stream).close();
      return r;
    }
    http::response_parser<http::buffer_body> parser(std::move(header_parser));
    parser.body_limit(std::numeric_limits<uint64_t>::max());
    char piece[16 * 1024];
    while (!parser.is_done()) {
      parser.get().body().data = piece;
      parser.get().body().size = sizeof piece;
      beast::get_lowest_layer(stream).expires_after(idle_timeout);
      beast::error_code ec =
          impl_->run([&](auto handler) { http::async_read_some(stream, impl_->buffer, parser, handler); });
      if (ec == http::error::need_buffer) ec = {};
      if (ec) unreachable(url_, "reading the event stream:", ec);
      const size_t n = sizeof piece - parser.get().body().size;
      if (n > 0 && !on_data(std::string_view(piece, n))) break;
    }
    beast::get_lowest_layer(stream).close();
    return r;
  });
}

std::string problem_message(const Response& r) {
  boost::system::error_code ec;
  const boost::json::value v = pstrain::parse_json(r.body, ec);
  if (!ec && v.is_object()) {
    const auto& o = v.as_object();
    std::string text;
    if (const auto* d = o.if_contains("detail"); d != nullptr && d->is_string()) text = std::string(d->as_string());
    if (text.empty()) {
      if (const auto* t = o.if_contains("title"); t != nullptr && t->is_string()) text = std::string(t->as_string());
    }
    if (const auto* f = o.if_contains("field"); f != nullptr && f->is_string() && !text.empty()) {
      text += " (field " + std::string(f->as_string()) + ")";
    }
    if (!text.empty()) return "HTTP " + std::to_string(r.status) + ": " + text;
  }
  std::string start = r.body.substr(0, 300);
  while (!start.empty() && (start.back() == '\n' || start.back() == '\r')) start.pop_back();
  return "HTTP " + std::to_string(r.status) + (start.empty() ? "" : ": " + start);
}

}  // namespace pstrain::cli
