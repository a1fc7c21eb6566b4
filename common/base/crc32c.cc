#include "common/base/crc32c.h"

#include <array>
#include <cstring>

namespace pstrain {
namespace {

#if !defined(__SSE4_2__)
// CRC-32C one byte at a time through a table, for builds without SSE 4.2.
constexpr std::array<uint32_t, 256> kCrc32cTable = [] {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
    table[i] = c;
  }
  return table;
}();
#endif

}  // namespace

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n) {
  // Reflected, initial and final value ~0: the running register is the complement of the CRC.
  crc = ~crc;
  const auto* p = static_cast<const unsigned char*>(data);
#if defined(__SSE4_2__)
  uint64_t crc64 = crc;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    crc64 = __builtin_ia32_crc32di(crc64, word);
  }
  crc = static_cast<uint32_t>(crc64);
  for (; n > 0; ++p, --n) crc = __builtin_ia32_crc32qi(crc, *p);
#else
  for (; n > 0; ++p, --n) crc = (crc >> 8) ^ kCrc32cTable[(crc ^ *p) & 0xFFu];
#endif
  return ~crc;
}

}  // namespace pstrain
