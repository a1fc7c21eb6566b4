// A durable key-value store on RocksDB, for the coordinator's job records and the servers'
// backups.
//
// Every value is stored with a CRC-32 of its bytes in front; a read whose checksum fails reports
// kCorrupt instead of returning damaged data. Writes of one logical change go in one atomic
// batch; `sync` makes the batch durable (WAL fsync) before the call returns.
//
// Thread rules: thread-safe; one KvStore per directory per process. Writes from several threads
// (the coordinator's job records and its replicas each have a writer thread) are applied one at a
// time, each on the thread that built its batch: RocksDB writes its log one group at a time
// anyway, and its group commit, where one thread copies the others' batches into the log, hands
// memory between threads through librocksdb's own atomics, which ThreadSanitizer cannot see
// (docs/SANITIZERS.md). Reads do not wait for writes.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rocksdb {
class DB;
}

namespace pstrain {

struct KvStatus {
  enum class Code { kOk, kNotFound, kCorrupt, kIoError };
  Code code = Code::kOk;
  std::string message;
  bool ok() const { return code == Code::kOk; }
  static KvStatus Ok() { return {}; }
};

class KvStore {
 public:
  // Opens (creating if needed) the store in `directory`. On failure returns nullptr and sets
  // *error to a message naming the directory.
  static std::unique_ptr<KvStore> open(const std::string& directory, std::string* error);
  ~KvStore();

  struct Write {
    std::string key;
    std::optional<std::string> value;  // nullopt: delete the key
  };
  // Applies all writes atomically.
  [[nodiscard]] KvStatus write(const std::vector<Write>& writes, bool sync);
  [[nodiscard]] KvStatus put(const std::string& key, std::string_view value, bool sync);
  [[nodiscard]] KvStatus get(const std::string& key, std::string* value) const;
  // Every key with the prefix, in key order, with its (verified) value. A value whose checksum
  // fails is returned with corrupt = true and an empty value.
  struct Entry {
    std::string key, value;
    bool corrupt = false;
  };
  std::vector<Entry> scan(const std::string& prefix) const;
  // Every key with the prefix, in key order, without reading the values (listing backups must
  // not copy and verify megabytes of parameters).
  std::vector<std::string> keys(const std::string& prefix) const;
  // Deletes every key with the prefix (atomically).
  [[nodiscard]] KvStatus erase_prefix(const std::string& prefix, bool sync);

  const std::string& directory() const { return directory_; }

 private:
  KvStore(std::unique_ptr<rocksdb::DB> db, std::string directory);
  std::unique_ptr<rocksdb::DB> db_;
  std::string directory_;
  std::mutex write_mutex_;  // held for the length of each write() (see the thread rules)
};

// `n` zero-padded to `width` digits: numbers in keys, so that key order is numeric order.
std::string key_number(uint64_t n, int width);

// CRC-32C of bytes (what every stored value carries, to detect corruption).
uint32_t checksum(std::string_view bytes);

}  // namespace pstrain
