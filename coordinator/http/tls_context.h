// The REST server's TLS configuration: an OpenSSL server context made from a PEM certificate
// chain (--tls-cert) and its PEM private key (--tls-key). TLS 1.2 and later only; ALPN agrees on
// "http/1.1" only (a client that offers nothing else, such as h2 alone, gets no ALPN answer and
// speaks HTTP/1.1 or leaves).
//
// Errors: make_server_tls_context throws pstrain::Error naming the flag at fault: a file that
// cannot be read, is not PEM, or a key that does not match the certificate.
// Thread rules: made once in main before the server starts; the server's thread then only reads
// it (OpenSSL contexts are safe to share between the connections made from them).
#pragma once

#include <memory>
#include <string>

namespace boost::asio::ssl {
class context;
}  // namespace boost::asio::ssl

namespace pstrain {

std::shared_ptr<boost::asio::ssl::context> make_server_tls_context(const std::string& cert_file,
                                                                   const std::string& key_file);

}  // namespace pstrain
