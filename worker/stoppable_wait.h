// Waiting on a peer while the worker may be told to stop: a training session's waits on the
// servers and the coordinator end when the worker must drop everything (preemption done, SIGINT),
// even if a server holds the step.
//
// Thread rules: the thread whose event loop `wait_scope` belongs to.
#pragma once

#include <kj/async.h>
#include <kj/debug.h>

namespace pstrain {

// Waits for `promise`; throws DISCONNECTED ("the worker is stopping") if `stop` resolves first.
template <typename T>
T wait_unless_stopped(kj::Promise<T>&& promise, kj::ForkedPromise<void>& stop, kj::WaitScope& wait_scope) {
  return promise
      .exclusiveJoin(stop.addBranch().then([]() -> kj::Promise<T> {
        return KJ_EXCEPTION(DISCONNECTED, "the worker is stopping");
      }))
      .wait(wait_scope);
}

}  // namespace pstrain
