// The one thread that touches the server's RocksDB: backup writes, the reads of restores and
// replicas, listings and deletions all run there, so the event loop never waits for a disk read
// or for RocksDB's fsync.
//
// Order: tasks run one at a time, in the order they were queued. A read queued after a write (of
// any job) sees it; a restore sees every backup whose write was queued before it; a deletion
// queued before a write cannot remove what that write puts.
//
// Each task completes a cross-thread promise that the loop awaits (make_cross_thread_paf(), which
// makes the hand-off visible to ThreadSanitizer); the store thread never waits for the loop, so
// shutting down with a task in flight cannot deadlock.
//
// Thread rules: construct, queue (write_backup(), run()) and destroy on the event-loop thread;
// the promises resolve there and `written` runs there. A task's body runs on the store thread
// and may touch only the BackupStore and what the task owns (capture by value). The destructor
// runs every task still queued (their results are dropped: the loop is no longer waiting).
// Ownership: borrows the BackupStore, which must outlive this; owns the queue and the thread.
#pragma once

#include <kj/async.h>
#include <kj/exception.h>
#include <kj/function.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "common/base/cross_thread.h"
#include "common/base/mutex.h"
#include "server/backup_store.h"

namespace pstrain {

class StoreThread {
 public:
  // A backup's write is over (durable, or failed: see status): what happens next (releasing the
  // durability hold, reporting the backup). The promise it returns is kept until it completes;
  // its failure is logged.
  using Written = std::function<kj::Promise<void>(const std::string& job, uint64_t version, const KvStatus& status,
                                                  double seconds)>;

  StoreThread(BackupStore& store, Written written);
  ~StoreThread();
  StoreThread(const StoreThread&) = delete;
  StoreThread& operator=(const StoreThread&) = delete;

  // Queues the write of a backup (BackupStore::write); `written` runs on the loop once it is over.
  void write_backup(std::string job, uint64_t version, std::vector<ChunkSnapshot> chunks);

  // Queues `task`, a callable taking BackupStore& and returning a value; the promise resolves on
  // the loop with that value, or fails with what the task threw.
  template <typename Task>
  kj::Promise<std::invoke_result_t<Task&, BackupStore&>> run(Task task);

 private:
  struct LogErrors : kj::TaskSet::ErrorHandler {
    void taskFailed(kj::Exception&& e) override;
  };
  void enqueue(kj::Function<void(BackupStore&)> task);
  void work();

  LogErrors errors_;
  BackupStore& store_;
  Written written_;
  kj::TaskSet reports_;  // the loop side: one promise per backup write in flight or being reported
  Mutex mutex_;
  std::condition_variable_any wake_;
  std::deque<kj::Function<void(BackupStore&)>> queue_ PS_GUARDED_BY(mutex_);
  bool stopping_ PS_GUARDED_BY(mutex_) = false;
  std::thread thread_;
};

template <typename Task>
kj::Promise<std::invoke_result_t<Task&, BackupStore&>> StoreThread::run(Task task) {
  using Result = std::invoke_result_t<Task&, BackupStore&>;
  auto paf = make_cross_thread_paf<Result>();
  enqueue([task = kj::mv(task), fulfiller = kj::mv(paf.fulfiller)](BackupStore& store) mutable {
    // Never blocks: the loop picks the result up when it runs.
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&] { fulfiller->fulfill(task(store)); })) {
      fulfiller->reject(kj::mv(*e));
    }
  });
  return kj::mv(paf.promise);
}

}  // namespace pstrain
