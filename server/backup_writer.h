// Writes backups on a thread of its own, so the event loop never waits for RocksDB's fsync, and
// reports each finished write back on the event loop.
//
// The writer thread never waits for the event loop: each write completes a cross-thread promise
// that the loop awaits (kj::newPromiseAndCrossThreadFulfiller), so shutting down while a write is
// in flight cannot deadlock.
//
// Thread rules: construct, submit() and destroy on the event-loop thread; `done` runs there. The
// destructor finishes every queued write.
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

  BackupWriter(BackupStore& store, Done done);
  ~BackupWriter();

  void submit(std::string job, uint64_t version, std::vector<ChunkSnapshot> chunks);

 private:
  struct Outcome {
    KvStatus status;
    double seconds = 0;
  };
  struct Task {
    std::string job;
    uint64_t version;
    std::vector<ChunkSnapshot> chunks;
    kj::Own<kj::CrossThreadPromiseFulfiller<Outcome>> fulfiller;
  };
  void run();

  struct LogErrors : kj::TaskSet::ErrorHandler {
    void taskFailed(kj::Exception&& e) override;
  } errors_;
  BackupStore& store_;
  Done done_;
  kj::TaskSet reports_;  // the loop side: one promise per write in flight
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Task> queue_;  // guarded by mutex_
  bool stopping_ = false;   // guarded by mutex_
  std::thread thread_;
};

}  // namespace pstrain
