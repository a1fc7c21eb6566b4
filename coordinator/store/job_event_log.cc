#include "coordinator/store/job_event_log.h"

#include <algorithm>

namespace pstrain {
namespace {

std::string padded(uint64_t n) { return key_number(n, 12); }

}  // namespace

void JobEventLog::restore(const std::string& job, Stored& events) {
  MutexLock lock(mutex_);
  Log& log = log_of(job);
  for (auto& [seq, e] : events) {
    while (log.frames.size() + 1 < seq) {
      const JobEventData lost{"note", "{\"job\":\"" + job + "\",\"time_ms\":0,\"text\":\"(an event lost in storage)\"}"};
      log.frames.push_back(std::make_shared<const std::string>(event_frame(log.frames.size() + 1, lost)));
      log.terminal.push_back(false);
    }
    if (log.frames.size() + 1 != seq) continue;  // (a duplicate: cannot happen with ordered keys)
    log.frames.push_back(std::make_shared<const std::string>(event_frame(seq, e)));
    log.terminal.push_back(e.terminal);
    if (e.terminal) log.ended = true;
  }
  log.visible = log.frames.size();
  if (job.empty()) log.ended = false;  // the global stream never ends
}

void JobEventLog::end(const std::string& job) {
  MutexLock lock(mutex_);
  logs_[job].ended = true;
}

std::pair<uint64_t, uint64_t> JobEventLog::record(const std::string& id, const std::vector<JobEventData>& events,
                                                  std::vector<KvStore::Write>& writes) {
  MutexLock lock(mutex_);
  Log& log = logs_[id];
  uint64_t global_upto = 0;
  for (const JobEventData& e : events) {
    const uint64_t seq = log.frames.size() + 1;
    log.frames.push_back(std::make_shared<const std::string>(event_frame(seq, e)));
    log.terminal.push_back(e.terminal);
    ++stats_.events;
    writes.push_back({"job/" + id + "/event/" + padded(seq), event_to_stored(e)});
    if (e.type == "state") {
      global_upto = global_.frames.size() + 1;
      global_.frames.push_back(std::make_shared<const std::string>(event_frame(global_upto, e)));
      global_.terminal.push_back(false);  // the global stream never ends
      writes.push_back({"events/" + padded(global_upto), event_to_stored(e)});
    }
  }
  return {events.empty() ? 0 : log.frames.size(), global_upto};
}

void JobEventLog::publish_upto(Log& log, uint64_t upto) {
  upto = std::min<uint64_t>(upto, log.frames.size());
  while (log.visible < upto) {
    const size_t i = log.visible++;
    const bool last = log.terminal[i];
    auto& subs = log.subscribers;
    for (auto it = subs.begin(); it != subs.end();) {
      const auto subscriber = it->lock();
      if (subscriber && subscriber->push(log.frames[i], last)) {
        ++it;
      } else {
        it = subs.erase(it);
      }
    }
    if (last) {
      log.ended = true;
      subs.clear();
    }
  }
}

void JobEventLog::show(const std::string& id, uint64_t job_upto, uint64_t global_upto) {
  MutexLock lock(mutex_);
  if (job_upto != 0) {
    if (const auto it = logs_.find(id); it != logs_.end()) publish_upto(it->second, job_upto);
  }
  if (global_upto != 0) publish_upto(global_, global_upto);
}

void JobEventLog::subscribe(const std::string& id, uint64_t after, const std::shared_ptr<EventSubscriber>& subscriber) {
  MutexLock lock(mutex_);
  Log& log = log_of(id);
  std::vector<EventFrame> replay;
  for (uint64_t i = std::min<uint64_t>(after, log.visible); i < log.visible; ++i) replay.push_back(log.frames[i]);
  subscriber->replay(std::move(replay), log.ended);
  if (!log.ended) {
    std::erase_if(log.subscribers, [](const std::weak_ptr<EventSubscriber>& s) { return s.expired(); });
    log.subscribers.push_back(subscriber);
  }
}

size_t JobEventLog::count(const std::string& id) const {
  MutexLock lock(mutex_);
  const auto it = logs_.find(id);
  return it == logs_.end() ? 0 : it->second.frames.size();
}

}  // namespace pstrain
