// Persists key-value writes on a thread of its own, so that the threads which change state (the
// coordinator's event loop above all) never wait for RocksDB.
//
// Writes are applied in the order they were queued. Writes queued while the thread is busy are
// applied together as one atomic batch, synced if any of them asked for it; a key written several
// times in one batch is written once, with its last value (so a slow disk costs at most one
// pending value per key, not a growing queue of every progress report). A batch takes queued
// calls while their values stay within kMaxBatchBytes (at least one call; one call's writes are
// never split): a model queued as one call per 16 MiB piece is written a few pieces at a time,
// not copied whole into one RocksDB batch.
//
// Durability: enqueue() returns before anything is on disk. A write queued with `sync` is durable
// once the batch that carries it has been applied; flush() waits for that. A crash loses what was
// still queued: at most the last few milliseconds of changes.
//
// Thread rules: thread-safe. Owns its thread; the destructor applies everything queued before it
// and joins the thread. The KvStore must outlive the writer.
#pragma once

#include <condition_variable>
#include <deque>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "common/base/mutex.h"
#include "common/storage/kv_store.h"

namespace pstrain {

class KvWriter {
 public:
  static constexpr size_t kMaxBatchBytes = size_t{32} << 20;

  explicit KvWriter(KvStore& kv);
  ~KvWriter();
  KvWriter(const KvWriter&) = delete;
  KvWriter& operator=(const KvWriter&) = delete;

  // `applied`, if given, runs on the writer thread once the batch that carries `writes` has been
  // applied (durably when `sync`), in queue order, with no lock of the writer held.
  void enqueue(std::vector<KvStore::Write> writes, bool sync, std::function<void()> applied = {});
  // Returns once everything queued before the call has been applied (durably, where asked).
  void flush();
  // Batches RocksDB refused (each also logged with its message).
  uint64_t failures() const;

 private:
  void run();

  KvStore& kv_;
  mutable Mutex mutex_;
  std::condition_variable_any wake_, drained_;  // (on a MutexLock)
  struct Call {  // one enqueue()
    std::vector<KvStore::Write> writes;
    bool sync = false;
    std::function<void()> applied;
    size_t bytes = 0;  // of the values
  };
  std::deque<Call> pending_ PS_GUARDED_BY(mutex_);
  // enqueue() calls, and those applied
  uint64_t queued_ PS_GUARDED_BY(mutex_) = 0;
  uint64_t applied_ PS_GUARDED_BY(mutex_) = 0;
  uint64_t failures_ PS_GUARDED_BY(mutex_) = 0;
  bool stopping_ PS_GUARDED_BY(mutex_) = false;
  std::thread thread_;                   // last member: starts once the rest is initialised
};

}  // namespace pstrain
