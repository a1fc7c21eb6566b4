#include "common/storage/kv_store.h"

#include <cstdio>

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "common/base/crc32c.h"
#include "common/base/log.h"

namespace pstrain {
namespace {

constexpr size_t kChecksumBytes = 4;

uint32_t legacy_checksum(std::string_view bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  // zlib takes lengths as uInt: feed large values in pieces.
  for (size_t done = 0; done < bytes.size();) {
    const auto n = static_cast<uInt>(std::min<size_t>(bytes.size() - done, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + done), n);
    done += n;
  }
  return static_cast<uint32_t>(crc);
}


std::string with_checksum(std::string_view value) {
  std::string stored(kChecksumBytes + value.size(), '\0');
  const uint32_t crc = checksum(value);
  std::memcpy(stored.data(), &crc, kChecksumBytes);
  std::memcpy(stored.data() + kChecksumBytes, value.data(), value.size());
  return stored;
}

bool strip_checksum(const std::string& stored, std::string* value) {
  if (stored.size() < kChecksumBytes) return false;
  uint32_t crc;
  std::memcpy(&crc, stored.data(), kChecksumBytes);
  const std::string_view payload(stored.data() + kChecksumBytes, stored.size() - kChecksumBytes);
  // Values written before the switch to CRC-32C carry zlib's CRC-32: still accepted.
  if (checksum(payload) != crc && legacy_checksum(payload) != crc) return false;
  value->assign(payload);
  return true;
}

// An iteration that stopped on an I/O error or corruption returned only part of the keys: say so.
void warn_if_failed(const rocksdb::Iterator& it, const std::string& prefix) {
  if (!it.status().ok()) {
    PSLOG(kWarning) << "reading keys under '" << prefix << "' stopped early: " << it.status().ToString();
  }
}

KvStatus from_rocks(const rocksdb::Status& s) {
  if (s.ok()) return KvStatus::Ok();
  if (s.IsNotFound()) return {KvStatus::Code::kNotFound, s.ToString()};
  if (s.IsCorruption()) return {KvStatus::Code::kCorrupt, s.ToString()};
  return {KvStatus::Code::kIoError, s.ToString()};
}

}  // namespace

uint32_t checksum(std::string_view bytes) {
  // CRC-32C (common/base/crc32c.h): ~10x zlib's CRC-32 with SSE 4.2, which took 2% of both cores
  // while backups were written.
  return crc32c(bytes);
}

namespace {

class RocksKvStore final : public KvStore {
 public:
  RocksKvStore(std::unique_ptr<rocksdb::DB> db, std::string directory)
      : db_(std::move(db)), directory_(std::move(directory)) {}

  KvStatus write(const std::vector<Write>& writes, bool sync) override {
    rocksdb::WriteBatch batch;
    for (const Write& w : writes) {
      if (w.value) {
        batch.Put(w.key, with_checksum(*w.value));
      } else {
        batch.Delete(w.key);
      }
    }
    rocksdb::WriteOptions options;
    options.sync = sync;
    std::lock_guard lock(write_mutex_);
    return from_rocks(db_->Write(options, &batch));
  }

  KvStatus get(const std::string& key, std::string* value) const override {
    std::string stored;
    const KvStatus status = from_rocks(db_->Get(rocksdb::ReadOptions(), key, &stored));
    if (!status.ok()) return status;
    if (!strip_checksum(stored, value)) return {KvStatus::Code::kCorrupt, key + ": checksum mismatch"};
    return KvStatus::Ok();
  }

  std::vector<Entry> scan(const std::string& prefix) const override {
    std::vector<Entry> entries;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
      Entry e;
      e.key = it->key().ToString();
      e.corrupt = !strip_checksum(it->value().ToString(), &e.value);
      if (e.corrupt) e.value.clear();
      entries.push_back(std::move(e));
    }
    warn_if_failed(*it, prefix);
    return entries;
  }

  std::vector<std::string> keys(const std::string& prefix) const override {
    std::vector<std::string> keys;
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) keys.push_back(it->key().ToString());
    warn_if_failed(*it, prefix);
    return keys;
  }

  const std::string& directory() const override { return directory_; }

 private:
  std::unique_ptr<rocksdb::DB> db_;
  std::string directory_;
  std::mutex write_mutex_;  // held for the length of each write() (see the thread rules)
};

}  // namespace

std::unique_ptr<KvStore> KvStore::open(const std::string& directory, std::string* error) {
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  if (ec) {
    *error = directory + ": cannot create the data directory: " + ec.message();
    return nullptr;
  }
  rocksdb::Options options;
  options.create_if_missing = true;
  options.paranoid_checks = true;
  options.max_open_files = 256;
  options.keep_log_file_num = 2;
  // Values are mostly float32 parameters, which do not compress: compressing them only cost CPU.
  options.compression = rocksdb::kNoCompression;
  rocksdb::DB* raw = nullptr;
  const rocksdb::Status s = rocksdb::DB::Open(options, directory, &raw);
  if (!s.ok()) {
    *error = directory + ": cannot open the RocksDB store: " + s.ToString();
    return nullptr;
  }
  return std::make_unique<RocksKvStore>(std::unique_ptr<rocksdb::DB>(raw), directory);
}

KvStatus KvStore::erase_prefix(const std::string& prefix, bool sync) {
  std::vector<Write> writes;
  for (std::string& key : keys(prefix)) writes.push_back({std::move(key), std::nullopt});
  return write(writes, sync);
}

std::string key_number(uint64_t n, int width) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%0*llu", width, static_cast<unsigned long long>(n));
  return buffer;
}

}  // namespace pstrain
