#include "server/backup_writer.h"

#include <chrono>

#include "common/log.h"

namespace pstrain {

void BackupWriter::LogErrors::taskFailed(kj::Exception&& e) {
  PSLOG(kWarning) << "backup report: " << e.getDescription().cStr();
}

BackupWriter::BackupWriter(BackupStore& store, Done done)
    : store_(store), done_(std::move(done)), reports_(errors_), thread_([this] { run(); }) {}

BackupWriter::~BackupWriter() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void BackupWriter::submit(std::string job, uint64_t version, std::vector<ChunkSnapshot> chunks) {
  auto paf = kj::newPromiseAndCrossThreadFulfiller<Outcome>();
  reports_.add(paf.promise.then([this, job, version](Outcome outcome) {
    done_(job, version, outcome.status, outcome.seconds);
  }));
  {
    std::lock_guard lock(mutex_);
    queue_.push_back({std::move(job), version, std::move(chunks), kj::mv(paf.fulfiller)});
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
    Outcome outcome;
    outcome.status = store_.write(task.job, task.version, task.chunks);
    outcome.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    task.fulfiller->fulfill(kj::mv(outcome));  // never blocks: the loop picks it up when it runs
  }
}

}  // namespace pstrain
