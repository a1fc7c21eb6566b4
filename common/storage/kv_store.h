// A key-value store, for the coordinator's job records and the servers' backups: durable on
// RocksDB (open), or in this process's memory (in_memory: a coordinator state nobody keeps, as
// the REST fuzz target's). Callers see one interface and never ask which.
//
// On RocksDB every value is stored with a CRC-32C of its bytes in front; a read whose checksum
// fails reports kCorrupt instead of returning damaged data. Writes of one logical change go in one atomic
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
  // Opens (creating if needed) the RocksDB store in `directory`. On failure returns nullptr and
  // sets *error to a message naming the directory.
  static std::unique_ptr<KvStore> open(const std::string& directory, std::string* error);
  // A store in memory (memory_kv_store.cc): the same contract without durability; directory()
  // is "(memory)".
  static std::unique_ptr<KvStore> in_memory();
  virtual ~KvStore() = default;

  struct Write {
    std::string key;
    std::optional<std::string> value;  // nullopt: delete the key
  };
  // Applies all writes atomically.
  [[nodiscard]] virtual KvStatus write(const std::vector<Write>& writes, bool sync) = 0;
  [[nodiscard]] KvStatus put(const std::string& key, std::string_view value, bool sync) {
    return write({{key, std::string(value)}}, sync);
  }
  [[nodiscard]] virtual KvStatus get(const std::string& key, std::string* value) const = 0;
  // Every key with the prefix, in key order, with its (verified) value. A value whose checksum
  // fails is returned with corrupt = true and an empty value.
  struct Entry {
    std::string key, value;
    bool corrupt = false;
  };
  virtual std::vector<Entry> scan(const std::string& prefix) const = 0;
  // Every key with the prefix, in key order, without reading the values (listing backups must
  // not copy and verify megabytes of parameters).
  virtual std::vector<std::string> keys(const std::string& prefix) const = 0;
  // Deletes every key with the prefix (atomically).
  [[nodiscard]] KvStatus erase_prefix(const std::string& prefix, bool sync);

  virtual const std::string& directory() const = 0;
};

// `n` zero-padded to `width` digits: numbers in keys, so that key order is numeric order.
std::string key_number(uint64_t n, int width);

// CRC-32C of bytes (what every stored value carries, to detect corruption).
uint32_t checksum(std::string_view bytes);

}  // namespace pstrain
