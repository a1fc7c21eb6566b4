// The checksum every stored value carries (common/storage/kv_store.h), and reading values written by
// earlier versions.
#include <doctest/doctest.h>

#include <rocksdb/db.h>
#include <zlib.h>

#include <cstring>
#include <memory>
#include <string>

#include "common/storage/kv_store.h"
#include "tests/test_support.h"

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

TEST_CASE("values written with the CRC-32 of earlier versions are still read, corrupted ones are not") {
  testing::TempDir dir;
  const std::string value = "parameters of an old backup";
  {
    // Written the way earlier versions did: zlib's CRC-32, little-endian, before the value.
    rocksdb::Options options;
    options.create_if_missing = true;
    rocksdb::DB* raw = nullptr;
    REQUIRE(rocksdb::DB::Open(options, dir.path(), &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    const auto crc = static_cast<uint32_t>(crc32(0L, reinterpret_cast<const Bytef*>(value.data()), static_cast<uInt>(value.size())));
    std::string stored(4, '\0');
    std::memcpy(stored.data(), &crc, 4);
    REQUIRE(db->Put(rocksdb::WriteOptions(), "old", stored + value).ok());
    stored[0] = static_cast<char>(stored[0] ^ 1);
    REQUIRE(db->Put(rocksdb::WriteOptions(), "broken", stored + value).ok());
  }
  std::string error;
  const auto store = KvStore::open(dir.path(), &error);
  REQUIRE(store != nullptr);
  std::string read;
  CHECK(store->get("old", &read).ok());
  CHECK(read == value);
  CHECK(store->get("broken", &read).code == KvStatus::Code::kCorrupt);
  // And what this version writes reads back.
  REQUIRE(store->put("new", value, /*sync=*/false).ok());
  CHECK(store->get("new", &read).ok());
  CHECK(read == value);
}
