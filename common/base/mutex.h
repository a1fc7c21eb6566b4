// A mutex whose users clang's thread-safety analysis checks (-Wthread-safety): `Mutex` is a
// std::mutex marked as a capability, `MutexLock` holds one for a scope, and the PS_* macros mark
// what a mutex guards (PS_GUARDED_BY on a member) and what a function needs held (PS_REQUIRES)
// or must not hold (PS_EXCLUDES). Under GCC the macros are empty and the types are a plain mutex
// and lock. tests/lint/thread_safety.sh compiles every source that uses them with clang and
// -Werror=thread-safety (CTest `thread_safety`).
//
// A condition variable waits on a MutexLock with std::condition_variable_any (it unlocks and
// relocks through the lock's own annotated calls).
//
// Thread rules: those of std::mutex.
#pragma once

#include <mutex>

#if defined(__clang__)
#define PS_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define PS_THREAD_ANNOTATION(x)
#endif

#define PS_CAPABILITY(x) PS_THREAD_ANNOTATION(capability(x))
#define PS_SCOPED_CAPABILITY PS_THREAD_ANNOTATION(scoped_lockable)
#define PS_GUARDED_BY(x) PS_THREAD_ANNOTATION(guarded_by(x))
#define PS_PT_GUARDED_BY(x) PS_THREAD_ANNOTATION(pt_guarded_by(x))
#define PS_REQUIRES(...) PS_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define PS_EXCLUDES(...) PS_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define PS_ACQUIRE(...) PS_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define PS_RELEASE(...) PS_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define PS_NO_THREAD_SAFETY_ANALYSIS PS_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace pstrain {

class PS_CAPABILITY("mutex") Mutex {
 public:
  void lock() PS_ACQUIRE() { mutex_.lock(); }
  void unlock() PS_RELEASE() { mutex_.unlock(); }

 private:
  std::mutex mutex_;
};

class PS_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mutex) PS_ACQUIRE(mutex) : mutex_(mutex) { mutex_.lock(); }
  ~MutexLock() PS_RELEASE() {
    if (held_) mutex_.unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // For std::condition_variable_any (and a scope that lets go early).
  void lock() PS_ACQUIRE() {
    mutex_.lock();
    held_ = true;
  }
  void unlock() PS_RELEASE() {
    held_ = false;
    mutex_.unlock();
  }

 private:
  Mutex& mutex_;
  bool held_ = true;
};

}  // namespace pstrain
