#include "server/backup_writer.h"

#include <chrono>

namespace pstrain {

BackupWriter::BackupWriter(BackupStore& store, const kj::Executor& loop, Done done)
    : store_(store), loop_(loop), done_(std::move(done)), thread_([this] { run(); }) {}

BackupWriter::~BackupWriter() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void BackupWriter::submit(std::string job, uint64_t version, std::vector<ChunkSnapshot> chunks) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back({std::move(job), version, std::move(chunks)});
  }
  wake_.notify_one();
}

void BackupWriter::run() {
  while (true) {
    Task task;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything is written
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    const auto start = std::chrono::steady_clock::now();
    const KvStatus status = store_.write(task.job, task.version, task.chunks);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // Report on the event loop. If the loop is gone (shutting down), there is nobody to tell.
    try {
      loop_.executeSync([&] { done_(task.job, task.version, status, seconds); });
    } catch (const kj::Exception&) {
    }
  }
}

}  // namespace pstrain
