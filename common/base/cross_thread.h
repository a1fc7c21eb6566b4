// A promise on an event loop that a thread of ours (a TaskThread, the KvWriter) fulfils: kj's
// cross-thread promise and fulfiller, with the hand-off made visible to ThreadSanitizer.
//
// Why the annotation: Debian's libkj is built without ThreadSanitizer, so the happens-before edge
// inside kj::CrossThreadPromiseFulfiller (its atomics and futex wake-up) is invisible to it. When
// the loop then reads what the other thread built (a loaded split's memory, blobs read from
// RocksDB), TSan reports a race that is not one (it found one in CI, in a fork branch copying a
// shared_ptr that the loading thread had created). The fulfilling side releases a token the two
// sides share just before fulfil(); the promise's first continuation, on the loop, acquires it.
// Without TSan both are no-ops.
//
// Thread rules: make_cross_thread_paf() and `promise` belong to the loop's thread. `fulfiller` is
// a std::shared_ptr so that it fits a std::function (which wants a copyable callable); call
// fulfill() or reject() once, from any thread.
#pragma once

#include <kj/async.h>

#include <memory>
#include <type_traits>
#include <utility>

#if defined(__SANITIZE_THREAD__)
#define PSTRAIN_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PSTRAIN_TSAN 1
#endif
#endif

#ifdef PSTRAIN_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace pstrain {
namespace detail {

inline void handoff_release([[maybe_unused]] int* token) {
#ifdef PSTRAIN_TSAN
  __tsan_release(token);
#endif
}

inline void handoff_acquire([[maybe_unused]] int* token) {
#ifdef PSTRAIN_TSAN
  __tsan_acquire(token);
#endif
}

}  // namespace detail

template <typename T>
class CrossThreadFulfiller {
 public:
  CrossThreadFulfiller(kj::Own<kj::CrossThreadPromiseFulfiller<T>> fulfiller, std::shared_ptr<int> token)
      : fulfiller_(kj::mv(fulfiller)), token_(std::move(token)) {}

  template <typename... V>
  void fulfill(V&&... value) {
    detail::handoff_release(token_.get());
    fulfiller_->fulfill(std::forward<V>(value)...);
  }
  void reject(kj::Exception&& e) {
    detail::handoff_release(token_.get());
    fulfiller_->reject(kj::mv(e));
  }

 private:
  kj::Own<kj::CrossThreadPromiseFulfiller<T>> fulfiller_;
  std::shared_ptr<int> token_;
};

template <typename T>
struct CrossThreadPaf {
  kj::Promise<T> promise;
  std::shared_ptr<CrossThreadFulfiller<T>> fulfiller;
};

template <typename T>
CrossThreadPaf<T> make_cross_thread_paf() {
  auto paf = kj::newPromiseAndCrossThreadFulfiller<T>();
  auto token = std::make_shared<int>(0);
  auto fulfiller = std::make_shared<CrossThreadFulfiller<T>>(kj::mv(paf.fulfiller), token);
  kj::Promise<T> promise = [&] {
    if constexpr (std::is_void_v<T>) {
      return paf.promise.then([token] { detail::handoff_acquire(token.get()); },
                              [token](kj::Exception&& e) {
                                detail::handoff_acquire(token.get());
                                kj::throwFatalException(kj::mv(e));
                              });
    } else {
      return paf.promise.then(
          [token](T value) {
            detail::handoff_acquire(token.get());
            return value;
          },
          [token](kj::Exception&& e) -> T {
            detail::handoff_acquire(token.get());
            kj::throwFatalException(kj::mv(e));
          });
    }
  }();
  return {kj::mv(promise), std::move(fulfiller)};
}

}  // namespace pstrain
