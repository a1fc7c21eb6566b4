// A thread of its own that runs posted closures one at a time, in the order they were posted:
// for blocking work (file loads, disk writes) that must not run on an event loop. A closure
// reports back to a loop by fulfilling a promise from make_cross_thread_paf(); it never waits
// for the loop, so destroying the TaskThread while work is queued cannot deadlock.
//
// Thread rules: post() from any thread. The destructor runs every closure already posted, then
// joins the thread.
#pragma once

#include <kj/function.h>

#include <condition_variable>
#include <deque>
#include <thread>

#include "common/base/mutex.h"

namespace pstrain {

class TaskThread {
 public:
  TaskThread() : thread_([this] { run(); }) {}
  ~TaskThread() {
    {
      MutexLock lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }
  TaskThread(const TaskThread&) = delete;
  TaskThread& operator=(const TaskThread&) = delete;

  // `task` may be move-only (it can own a cross-thread fulfiller).
  void post(kj::Function<void()> task) {
    {
      MutexLock lock(mutex_);
      tasks_.push_back(std::move(task));
    }
    wake_.notify_one();
  }

 private:
  void run() {
    MutexLock lock(mutex_);
    for (;;) {
      while (!stopping_ && tasks_.empty()) wake_.wait(lock);
      if (tasks_.empty()) return;
      auto task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      task();
      lock.lock();
    }
  }

  Mutex mutex_;
  std::condition_variable_any wake_;
  std::deque<kj::Function<void()>> tasks_ PS_GUARDED_BY(mutex_);
  bool stopping_ PS_GUARDED_BY(mutex_) = false;
  std::thread thread_;                       // last: starts once the rest is initialised
};

}  // namespace pstrain
