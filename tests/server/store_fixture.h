// A StoreThread over RocksDB in a temporary directory, on the test's own event loop, and a gate
// that keeps the store thread busy: what the event loop does meanwhile is what the tests check.
#pragma once

#include <doctest/doctest.h>
#include <kj/async-io.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/storage/kv_store.h"
#include "server/backup_store.h"
#include "server/store_thread.h"
#include "tests/test_support.h"

namespace pstrain::testing {

// A task blocked() waits at the gate, on the store thread, until the test opens it (or 30 s pass:
// then the task's promise says false).
class Gate {
 public:
  void open() {
    {
      std::lock_guard lock(mutex_);
      open_ = true;
    }
    opened_.notify_all();
  }
  kj::Promise<bool> blocked(StoreThread& store) {
    return store.run([this](BackupStore&) {
      std::unique_lock lock(mutex_);
      return opened_.wait_for(lock, std::chrono::seconds(30), [this] { return open_; });
    });
  }

 private:
  std::mutex mutex_;
  std::condition_variable opened_;
  bool open_ = false;
};

inline std::unique_ptr<KvStore> open_kv(const TempDir& dir) {
  std::string error;
  auto kv = KvStore::open(dir.file("kv"), &error);
  REQUIRE_MESSAGE(kv != nullptr, error);
  return kv;
}

struct StoreFixture {
  TempDir dir;
  kj::AsyncIoContext io = kj::setupAsyncIo();
  kj::WaitScope& ws = io.waitScope;
  std::unique_ptr<KvStore> kv = open_kv(dir);
  BackupStore backups{*kv};
  Gate gate;  // before the store thread: open (below) and alive while the thread finishes
  std::vector<std::pair<uint64_t, KvStatus>> written;  // (version, status) of each backup write
  StoreThread store{backups, [this](const std::string&, uint64_t version, const KvStatus& status, double) {
                      written.emplace_back(version, status);
                      return kj::Promise<void>(kj::READY_NOW);
                    }};

  ~StoreFixture() { gate.open(); }
};

}  // namespace pstrain::testing
