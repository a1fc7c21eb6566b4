// One Server-Sent Events client's view of a job's (or every job's) event history: the stored
// events it asked to replay, then the live ones in a bounded queue.
//
// The JobStore fills a subscriber (replay(), then push() as events become visible, under its own
// lock); the HTTP session that owns it drains it (take()) as fast as its client reads. push()
// never waits for the client: when the live queue is full (max_events or max_bytes), the
// subscriber is dropped instead (the session closes the connection; the client may reconnect
// with Last-Event-ID and resume from the stored history), so a client that does not read never
// slows the event loop, training, or other clients.
//
// Frames are shared: one event's text is made once and held by the history and every queue.
//
// Thread rules: thread-safe. The wakeup runs on the pushing thread, outside the subscriber's
// lock, and must only post work elsewhere (the session posts to its strand).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/base/mutex.h"

namespace pstrain {

// One event as sent: "id: N\nevent: T\ndata: {...}\n\n" (immutable, shared).
using EventFrame = std::shared_ptr<const std::string>;

// For /metrics; owned by the JobStore, outlives every subscriber.
struct EventStreamStats {
  std::atomic<int64_t> open{0};       // subscribers alive (open streams)
  std::atomic<uint64_t> dropped{0};   // subscribers dropped for a full queue
  std::atomic<uint64_t> events{0};    // job events recorded by this process
};

struct EventQueueLimits {
  size_t max_events = 1024;            // live events waiting for the client
  size_t max_bytes = size_t{4} << 20;  // and their bytes
};

class EventSubscriber {
 public:
  EventSubscriber(EventQueueLimits limits, EventStreamStats* stats);
  ~EventSubscriber();
  EventSubscriber(const EventSubscriber&) = delete;
  EventSubscriber& operator=(const EventSubscriber&) = delete;

  // The store, once, before any push: the stored events to send first (not bounded by the
  // limits: they are in memory already), and whether the stream ends after them (a finished job).
  void replay(std::vector<EventFrame> frames, bool ends);
  // A live event; `last`: the stream ends after it. Returns false if the subscriber is gone
  // (dropped just now or before, cancelled, or ended): the caller forgets it.
  bool push(EventFrame frame, bool last);

  // The session: called (on the pushing thread) when events arrive after take() emptied the
  // queue; called at once if some are already waiting.
  void set_wakeup(std::function<void()> wakeup);
  struct Batch {
    std::vector<EventFrame> frames;
    bool end = false;      // after these frames, close the stream
    bool dropped = false;  // the queue overflowed: close now
  };
  // Everything waiting (replay first), at most `max_frames` of it.
  Batch take(size_t max_frames = 256);
  // The session ended: pushes from now on return false.
  void cancel();

 private:
  const EventQueueLimits limits_;
  EventStreamStats* stats_;
  Mutex mutex_;
  std::deque<EventFrame> replay_ PS_GUARDED_BY(mutex_);
  std::deque<EventFrame> queue_ PS_GUARDED_BY(mutex_);   // live events
  size_t queued_bytes_ PS_GUARDED_BY(mutex_) = 0;        // of queue_
  bool ends_ PS_GUARDED_BY(mutex_) = false;              // the stream ends once both queues are sent
  bool dropped_ PS_GUARDED_BY(mutex_) = false;
  bool cancelled_ PS_GUARDED_BY(mutex_) = false;
  bool notified_ PS_GUARDED_BY(mutex_) = false;          // a wakeup is on its way
  std::function<void()> wakeup_ PS_GUARDED_BY(mutex_);
};

}  // namespace pstrain
