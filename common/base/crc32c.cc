#include "common/base/crc32c.h"

#include <array>
#include <cstring>

namespace pstrain {
namespace {

// CRC-32C one byte at a time through a table, for CPUs without SSE 4.2.
constexpr std::array<uint32_t, 256> kCrc32cTable = [] {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
    table[i] = c;
  }
  return table;
}();

uint32_t crc_table(uint32_t crc, const unsigned char* p, size_t n) {
  for (; n > 0; ++p, --n) crc = (crc >> 8) ^ kCrc32cTable[(crc ^ *p) & 0xFFu];
  return crc;
}

#if defined(__x86_64__)
// The CPU's crc32 instruction, 8 bytes at a time: compiled for SSE 4.2 whatever the build's
// level (a portable build is x86-64 baseline) and chosen at run time.
__attribute__((target("sse4.2"))) uint32_t crc_sse42(uint32_t crc, const unsigned char* p, size_t n) {
  uint64_t crc64 = crc;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    crc64 = __builtin_ia32_crc32di(crc64, word);
  }
  crc = static_cast<uint32_t>(crc64);
  for (; n > 0; ++p, --n) crc = __builtin_ia32_crc32qi(crc, *p);
  return crc;
}

bool has_sse42() {
  // (__builtin_cpu_init first: this may run before the runtime's own initialisation.)
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2") != 0;
  }();
  return has;
}
#endif

}  // namespace

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n) {
  // Reflected, initial and final value ~0: the running register is the complement of the CRC.
  const auto* p = static_cast<const unsigned char*>(data);
#if defined(__x86_64__)
  if (has_sse42()) return ~crc_sse42(~crc, p, n);
#endif
  return crc32c_extend_table(crc, p, n);
}

uint32_t crc32c_extend_table(uint32_t crc, const void* data, size_t n) {
  return ~crc_table(~crc, static_cast<const unsigned char*>(data), n);
}

}  // namespace pstrain
