// KvStore::in_memory(): an ordered map under a mutex. Values need no checksum (nothing can damage
// them between a write and a read), so no read reports kCorrupt.
#include <map>

#include "common/base/mutex.h"
#include "common/storage/kv_store.h"

namespace pstrain {
namespace {

class MemoryKvStore final : public KvStore {
 public:
  KvStatus write(const std::vector<Write>& writes, bool) override {
    MutexLock lock(mutex_);
    for (const Write& w : writes) {
      if (w.value) {
        values_[w.key] = *w.value;
      } else {
        values_.erase(w.key);
      }
    }
    return KvStatus::Ok();
  }

  KvStatus get(const std::string& key, std::string* value) const override {
    MutexLock lock(mutex_);
    const auto it = values_.find(key);
    if (it == values_.end()) return {KvStatus::Code::kNotFound, key + ": not found"};
    *value = it->second;
    return KvStatus::Ok();
  }

  std::vector<Entry> scan(const std::string& prefix) const override {
    MutexLock lock(mutex_);
    std::vector<Entry> entries;
    for (auto it = values_.lower_bound(prefix); it != values_.end() && it->first.starts_with(prefix); ++it) {
      entries.push_back({it->first, it->second, false});
    }
    return entries;
  }

  std::vector<std::string> keys(const std::string& prefix) const override {
    MutexLock lock(mutex_);
    std::vector<std::string> keys;
    for (auto it = values_.lower_bound(prefix); it != values_.end() && it->first.starts_with(prefix); ++it) {
      keys.push_back(it->first);
    }
    return keys;
  }

  const std::string& directory() const override { return directory_; }

 private:
  const std::string directory_ = "(memory)";
  mutable Mutex mutex_;
  std::map<std::string, std::string> values_ PS_GUARDED_BY(mutex_);
};

}  // namespace

std::unique_ptr<KvStore> KvStore::in_memory() { return std::make_unique<MemoryKvStore>(); }

}  // namespace pstrain
