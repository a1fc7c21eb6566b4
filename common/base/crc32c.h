// CRC-32C (Castagnoli): the checksum of the stored values (storage/kv_store.h) and of dataset
// shard files (data/shard_file.h). Where the CPU has SSE 4.2 (checked at run time, so portable
// builds have it too) its crc32 instruction takes 8 bytes at a time, about 10x zlib's CRC-32;
// elsewhere, a table.
//
// Thread rules: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace pstrain {

// The CRC-32C of `n` bytes following bytes whose CRC-32C is `crc` (0 for none): crc32c_extend(
// crc32c(a), b) == crc32c(a + b).
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t n);
// The same through a table, a byte at a time: what CPUs without SSE 4.2 run (public so that tests
// on CPUs with it check this path too).
uint32_t crc32c_extend_table(uint32_t crc, const void* data, size_t n);
inline uint32_t crc32c(std::string_view bytes) { return crc32c_extend(0, bytes.data(), bytes.size()); }

}  // namespace pstrain
