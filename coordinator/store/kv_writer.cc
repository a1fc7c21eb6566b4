#include "coordinator/store/kv_writer.h"

#include <string_view>
#include <unordered_map>

#include "common/base/log.h"

namespace pstrain {

KvWriter::KvWriter(KvStore& kv) : kv_(kv), thread_([this] { run(); }) {}

KvWriter::~KvWriter() {
  {
    MutexLock lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void KvWriter::enqueue(std::vector<KvStore::Write> writes, bool sync, std::function<void()> applied) {
  size_t bytes = 0;
  for (const auto& w : writes) bytes += w.key.size() + (w.value ? w.value->size() : 0);
  {
    MutexLock lock(mutex_);
    pending_.push_back({std::move(writes), sync, std::move(applied), bytes});
    ++queued_;
  }
  wake_.notify_one();
}

void KvWriter::flush() {
  MutexLock lock(mutex_);
  const uint64_t target = queued_;
  while (applied_ < target) drained_.wait(lock);
}

uint64_t KvWriter::failures() const {
  MutexLock lock(mutex_);
  return failures_;
}

void KvWriter::run() {
  MutexLock lock(mutex_);
  for (;;) {
    while (!stopping_ && applied_ >= queued_) wake_.wait(lock);
    if (applied_ == queued_) return;  // stopping, and nothing left
    std::vector<KvStore::Write> batch;
    bool sync = false;
    std::vector<std::function<void()>> callbacks;
    uint64_t calls = 0;
    for (size_t bytes = 0; !pending_.empty() && (calls == 0 || bytes + pending_.front().bytes <= kMaxBatchBytes);
         ++calls) {
      Call& call = pending_.front();
      bytes += call.bytes;
      for (auto& w : call.writes) batch.push_back(std::move(w));
      sync = sync || call.sync;
      if (call.applied) callbacks.push_back(std::move(call.applied));
      pending_.pop_front();
    }
    const uint64_t upto = applied_ + calls;
    lock.unlock();
    // One value per key: the last one queued.
    std::vector<bool> keep(batch.size(), false);
    {
      std::unordered_map<std::string_view, size_t> last;
      for (size_t i = 0; i < batch.size(); ++i) last[batch[i].key] = i;
      for (const auto& [key, i] : last) keep[i] = true;
    }
    std::vector<KvStore::Write> writes;
    for (size_t i = 0; i < batch.size(); ++i) {
      if (keep[i]) writes.push_back(std::move(batch[i]));
    }
    KvStatus status;
    if (!writes.empty()) status = kv_.write(writes, sync);
    if (!status.ok()) {
      PSLOG(kError) << "kv writer: writing " << writes.size() << " key(s) to " << kv_.directory()
                    << " failed: " << status.message;
    }
    // Callbacks run after a failed write too (it is logged and counted): what they publish is
    // the running coordinator's truth, which no retry here would make durable either.
    for (auto& callback : callbacks) callback();
    lock.lock();
    failures_ += status.ok() ? 0 : 1;
    applied_ = upto;
    drained_.notify_all();
  }
}

}  // namespace pstrain
