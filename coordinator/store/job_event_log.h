// The numbered event histories of the jobs (job/<id>/event/<seq>) and the global one of state
// changes (events/<seq>, GET /v1/events), and their subscribers: JobStore's event half.
//
// record() numbers a change's events and adds their writes to the change's batch; they become
// visible (sent to subscribers, replayed to new ones) only when show() is called, which JobStore
// does once its writer has applied the batch: a client never sees an event a crash could take
// back, and the numbers a client resumes from hold across restarts.
//
// Thread rules: thread-safe (its own mutex, taken after JobStore's where both are held).
// Publishing never waits for a client (event_stream.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/base/mutex.h"
#include "common/storage/kv_store.h"
#include "coordinator/base/event_stream.h"
#include "coordinator/store/job_events.h"

namespace pstrain {

class JobEventLog {
 public:
  // Stored events by sequence number, as load() found them.
  using Stored = std::vector<std::pair<uint64_t, JobEventData>>;

  // At start-up: job `job`'s stored history (empty id: the global one). A gap (an entry that
  // failed its checksum) becomes a note, so later numbers stay what clients saw.
  void restore(const std::string& job, Stored& events);
  // Job `job` is finished: its stream ends after its history.
  void end(const std::string& job);

  // Numbers `events` of job `id` (state events in the global log too) and adds their writes.
  // Returns the last sequence numbers of the job's log and the global log (0: none).
  std::pair<uint64_t, uint64_t> record(const std::string& id, const std::vector<JobEventData>& events,
                                       std::vector<KvStore::Write>& writes);
  // Makes the events up to these numbers visible, publishing them.
  void show(const std::string& id, uint64_t job_upto, uint64_t global_upto);

  // Streams job `id`'s events after `after` to `subscriber` (empty id: the global log): the
  // visible ones at once (replay), then each new one as it becomes visible.
  void subscribe(const std::string& id, uint64_t after, const std::shared_ptr<EventSubscriber>& subscriber);
  // The job's events so far (visible or not), for tests.
  size_t count(const std::string& id) const;
  EventStreamStats& stats() { return stats_; }

 private:
  // One sequence of events (a job's, or the global one of state changes) and its subscribers.
  struct Log {
    std::vector<EventFrame> frames;   // frames[i] is event i + 1
    std::vector<bool> terminal;       // frames[i] ends a job's stream
    uint64_t visible = 0;             // events 1..visible are applied by the writer
    bool ended = false;               // a job's: its terminal event is visible (or it was finished when loaded)
    std::vector<std::weak_ptr<EventSubscriber>> subscribers;
  };
  Log& log_of(const std::string& id) PS_REQUIRES(mutex_) { return id.empty() ? global_ : logs_[id]; }
  static void publish_upto(Log& log, uint64_t upto);

  mutable Mutex mutex_;
  std::map<std::string, Log> logs_ PS_GUARDED_BY(mutex_);  // each job's events
  Log global_ PS_GUARDED_BY(mutex_);                       // every job's state events
  EventStreamStats stats_;
};

}  // namespace pstrain
