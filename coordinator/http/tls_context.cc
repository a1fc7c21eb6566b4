#include "coordinator/http/tls_context.h"

#include <boost/asio/ssl/context.hpp>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "common/base/error.h"

namespace pstrain {
namespace ssl = boost::asio::ssl;

namespace {

// OpenSSL's own reason for the last failure ("no start line", "key values mismatch"), if any.
std::string openssl_reason() {
  std::string reason;
  while (const unsigned long e = ERR_get_error()) {
    const char* r = ERR_reason_error_string(e);
    reason = r != nullptr ? r : "error " + std::to_string(e);  // the last is the most specific
  }
  return reason;
}

void require_readable(const std::string& flag, const std::string& path) {
  if (path.empty()) throw Error(flag + " is empty");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(flag + ": cannot read '" + path + "': " + std::strerror(errno));
}

// ALPN: only HTTP/1.1 is spoken here.
int select_alpn(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in, unsigned int inlen,
                void*) {
  static const unsigned char kHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  unsigned char* selected = nullptr;
  if (SSL_select_next_proto(&selected, outlen, kHttp11, sizeof kHttp11, in, inlen) != OPENSSL_NPN_NEGOTIATED) {
    return SSL_TLSEXT_ERR_NOACK;
  }
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

}  // namespace

std::shared_ptr<ssl::context> make_server_tls_context(const std::string& cert_file, const std::string& key_file) {
  require_readable("--tls-cert", cert_file);
  require_readable("--tls-key", key_file);
  auto context = std::make_shared<ssl::context>(ssl::context::tls_server);
  context->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                       ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::single_dh_use);
  SSL_CTX* native = context->native_handle();
  SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION);
  ERR_clear_error();
  if (SSL_CTX_use_certificate_chain_file(native, cert_file.c_str()) != 1) {
    throw Error("--tls-cert: '" + cert_file + "' is not a PEM certificate chain (" + openssl_reason() + ")");
  }
  if (SSL_CTX_use_PrivateKey_file(native, key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    const std::string reason = openssl_reason();
    throw Error("--tls-key: '" + key_file + "' is not a PEM private key for the certificate of --tls-cert (" +
                reason + ")");
  }
  if (SSL_CTX_check_private_key(native) != 1) {
    throw Error("--tls-key: the key in '" + key_file + "' does not match the certificate of --tls-cert '" + cert_file +
                "' (" + openssl_reason() + ")");
  }
  SSL_CTX_set_alpn_select_cb(native, select_alpn, nullptr);
  return context;
}

}  // namespace pstrain
