// What the REST API counts for /metrics and keeps for pollers:
//   - RequestCounters: responses by route and status, and requests refused by access control;
//   - StatusCache: GET /v1/jobs/{id} is what dashboards and scripts poll, so a job's status body
//     is built at most every kAge per job (and again after any command): polling costs a lookup.
//
// Thread rules: both are called from any thread (the HTTP thread, the catalog's, the loop's);
// each guards its state itself. StatusCache::get builds a body without its mutex held.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "common/base/mutex.h"

namespace pstrain {

class RequestCounters {
 public:
  void count(const std::string& route, unsigned status) {
    MutexLock lock(mutex_);
    ++responses_[{route, status}];
  }
  // Responses so far, by (route, status).
  std::map<std::pair<std::string, unsigned>, uint64_t> responses() const {
    MutexLock lock(mutex_);
    return responses_;
  }
  // Refusals: no token, an unknown one, a role too weak.
  std::atomic<uint64_t> auth_missing{0}, auth_invalid{0}, auth_forbidden{0};

 private:
  mutable Mutex mutex_;
  std::map<std::pair<std::string, unsigned>, uint64_t> responses_ PS_GUARDED_BY(mutex_);
};

class StatusCache {
 public:
  static constexpr std::chrono::milliseconds kAge{100};

  // The job's status body: the cached one if younger than kAge, else `build()`'s (nullopt: no
  // such job), cached unless a command invalidated the job meanwhile (the body may have been
  // built from a record older than the command's: caching it would undo the invalidation).
  std::optional<std::string> get(const std::string& id, const std::function<std::optional<std::string>()>& build) {
    const auto now = std::chrono::steady_clock::now();
    uint64_t invalidations = 0;
    {
      MutexLock lock(mutex_);
      const auto it = bodies_.find(id);
      if (it != bodies_.end() && now - it->second.first < kAge) return it->second.second;
      invalidations = invalidations_;
    }
    std::optional<std::string> body = build();
    if (!body) return std::nullopt;
    MutexLock lock(mutex_);
    if (invalidations_ == invalidations) bodies_[id] = {now, *body};
    return body;
  }
  // A command changed the job: its next poll builds the body afresh.
  void invalidate(const std::string& id) {
    MutexLock lock(mutex_);
    bodies_.erase(id);
    ++invalidations_;
  }

 private:
  Mutex mutex_;
  std::map<std::string, std::pair<std::chrono::steady_clock::time_point, std::string>> bodies_ PS_GUARDED_BY(mutex_);
  uint64_t invalidations_ PS_GUARDED_BY(mutex_) = 0;  // invalidate() calls so far
};

}  // namespace pstrain
