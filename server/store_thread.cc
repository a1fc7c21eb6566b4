#include "server/store_thread.h"

#include <chrono>

#include "common/base/log.h"

namespace pstrain {

void StoreThread::LogErrors::taskFailed(kj::Exception&& e) {
  PSLOG(kWarning) << "backup report: " << e.getDescription().cStr();
}

StoreThread::StoreThread(BackupStore& store, Written written)
    : store_(store), written_(std::move(written)), reports_(errors_), thread_([this] { work(); }) {}

StoreThread::~StoreThread() {
  {
    MutexLock lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void StoreThread::write_backup(std::string job, uint64_t version, std::vector<ChunkSnapshot> chunks) {
  struct Outcome {
    KvStatus status;
    double seconds = 0;
  };
  auto outcome = run([job, version, chunks = std::move(chunks)](BackupStore& store) {
    const auto start = std::chrono::steady_clock::now();
    Outcome out;
    out.status = store.write(job, version, chunks);
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return out;
  });
  // A write that threw is a failed write: the job's durability hold must still be released.
  reports_.add(outcome
                   .catch_([](kj::Exception&& e) {
                     return Outcome{{KvStatus::Code::kIoError, e.getDescription().cStr()}, 0};
                   })
                   .then([this, job = std::move(job), version](Outcome out) {
                     return written_(job, version, out.status, out.seconds);
                   }));
}

void StoreThread::enqueue(kj::Function<void(BackupStore&)> task) {
  {
    MutexLock lock(mutex_);
    queue_.push_back(kj::mv(task));
  }
  wake_.notify_one();
}

void StoreThread::work() {
  while (true) {
    kj::Function<void(BackupStore&)> task;
    {
      MutexLock lock(mutex_);
      while (!stopping_ && queue_.empty()) wake_.wait(lock);
      if (queue_.empty()) return;  // stopping, and every task has run
      task = kj::mv(queue_.front());
      queue_.pop_front();
    }
    task(store_);
  }
}

}  // namespace pstrain
