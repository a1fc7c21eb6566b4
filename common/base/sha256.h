// SHA-256 (OpenSSL's libcrypto), incremental, for the checksums users compare with sha256sum.
//
// Thread rules: one Sha256 per thread at a time; the free function is thread-safe.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace pstrain {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, size_t n);
  std::string hex();  // the digest in lowercase hex; ends the hash (call once)

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The hex SHA-256 of a file's bytes. Throws pstrain::Error if it cannot be read.
std::string sha256_file(const std::string& path);

}  // namespace pstrain
