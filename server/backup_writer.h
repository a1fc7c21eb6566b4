// Writes backups on a thread of its own, so the event loop never waits for RocksDB's fsync, and
// reports each finished write back on the event loop.
//
// Thread rules: submit() from the event-loop thread; `done` runs on the event-loop thread (via its
// kj::Executor). The destructor finishes every queued write.
#pragma once

#include <kj/async.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/backup_store.h"

namespace pstrain {

class BackupWriter {
 public:
  using Done = std::function<void(const std::string& job, uint64_t version, const KvStatus& status, double seconds)>;

  BackupWriter(BackupStore& store, const kj::Executor& loop, Done done);
  ~BackupWriter();

  void submit(std::string job, uint64_t version, std::vector<ChunkSnapshot> chunks);

 private:
  struct Task {
    std::string job;
    uint64_t version;
    std::vector<ChunkSnapshot> chunks;
  };
  void run();

  BackupStore& store_;
  const kj::Executor& loop_;
  Done done_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Task> queue_;  // guarded by mutex_
  bool stopping_ = false;   // guarded by mutex_
  std::thread thread_;
};

}  // namespace pstrain
