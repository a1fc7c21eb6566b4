#include "coordinator/base/event_stream.h"

namespace pstrain {

EventSubscriber::EventSubscriber(EventQueueLimits limits, EventStreamStats* stats) : limits_(limits), stats_(stats) {
  if (stats_ != nullptr) ++stats_->open;
}

EventSubscriber::~EventSubscriber() {
  if (stats_ != nullptr) --stats_->open;
}

void EventSubscriber::replay(std::vector<EventFrame> frames, bool ends) {
  MutexLock lock(mutex_);
  for (EventFrame& f : frames) replay_.push_back(std::move(f));
  ends_ = ends;
}

bool EventSubscriber::push(EventFrame frame, bool last) {
  std::function<void()> wakeup;
  bool kept = true;
  {
    MutexLock lock(mutex_);
    if (dropped_ || cancelled_ || ends_) return false;
    const size_t bytes = frame->size();
    if (queue_.size() + 1 > limits_.max_events || queued_bytes_ + bytes > limits_.max_bytes) {
      // The client does not keep up: drop it (what is queued is of no use without the rest).
      dropped_ = true;
      kept = false;
      queue_.clear();
      replay_.clear();
      queued_bytes_ = 0;
      if (stats_ != nullptr) ++stats_->dropped;
    } else {
      queue_.push_back(std::move(frame));
      queued_bytes_ += bytes;
      ends_ = last;
    }
    if (!notified_ && wakeup_) {
      notified_ = true;
      wakeup = wakeup_;
    }
  }
  if (wakeup) wakeup();
  return kept;
}

void EventSubscriber::set_wakeup(std::function<void()> wakeup) {
  std::function<void()> now;
  {
    MutexLock lock(mutex_);
    wakeup_ = std::move(wakeup);
    if (!replay_.empty() || !queue_.empty() || ends_ || dropped_) {
      notified_ = true;
      now = wakeup_;
    }
  }
  if (now) now();
}

EventSubscriber::Batch EventSubscriber::take(size_t max_frames) {
  MutexLock lock(mutex_);
  Batch batch;
  notified_ = false;
  if (dropped_) {
    batch.dropped = true;
    return batch;
  }
  while (!replay_.empty() && batch.frames.size() < max_frames) {
    batch.frames.push_back(std::move(replay_.front()));
    replay_.pop_front();
  }
  while (replay_.empty() && !queue_.empty() && batch.frames.size() < max_frames) {
    queued_bytes_ -= queue_.front()->size();
    batch.frames.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  batch.end = ends_ && replay_.empty() && queue_.empty();
  // More is waiting: the session takes again once it has written this batch.
  return batch;
}

void EventSubscriber::cancel() {
  MutexLock lock(mutex_);
  cancelled_ = true;
  wakeup_ = nullptr;
  queue_.clear();
  replay_.clear();
  queued_bytes_ = 0;
}

}  // namespace pstrain
