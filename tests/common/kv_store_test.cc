// The checksum every stored value carries (common/kv_store.h).
#include <doctest/doctest.h>

#include <string>

#include "common/kv_store.h"

using namespace pstrain;

TEST_CASE("the checksum is CRC-32C") {
  CHECK(checksum("") == 0u);
  CHECK(checksum("123456789") == 0xE3069283u);  // the standard check value
  CHECK(checksum("a") == 0xC1D04330u);
  // Lengths around the 8-byte steps agree with a bytewise reference, and any flipped bit shows.
  std::string bytes;
  for (int i = 0; i < 37; ++i) bytes.push_back(static_cast<char>(i * 37 + 11));
  const auto reference = [](const std::string& s) {
    uint32_t crc = ~0u;
    for (unsigned char c : s) {
      crc ^= c;
      for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
    }
    return ~crc;
  };
  for (size_t n = 0; n <= bytes.size(); ++n) CHECK(checksum(bytes.substr(0, n)) == reference(bytes.substr(0, n)));
  for (size_t bit = 0; bit < bytes.size() * 8; bit += 13) {
    std::string flipped = bytes;
    flipped[bit / 8] = static_cast<char>(flipped[bit / 8] ^ (1 << (bit % 8)));
    CHECK(checksum(flipped) != checksum(bytes));
  }
}
