// A split's batches gathered one step ahead of the consumer, on a thread of its own: while the
// trainer computes step s, this class reads and converts step s + 1's examples (Split::gather:
// a stored split's preads and every split's uint8 -> float conversion), so that reading is not
// added to each step's time (pstrain-train; docs/BENCHMARKS.md "Reading alone").
//
// The batches are exactly Split::gather's for the ids given, in the order given: reading ahead
// changes when examples are read, never which or how (the exactness contract holds).
//
// Use: start(ids of step 0); then per step: b = take(); start(ids of the next step) if there is
// one; compute on b. A batch that take() handed out stays valid until the take() after next (two
// buffers alternate).
//
// Thread rules: start() and take() from one thread (the consumer); the gathering thread touches
// only the buffer being filled, handed over under the mutex. Ownership: the split must outlive
// this object; the destructor waits for a gather in flight and joins the thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "common/base/aligned.h"
#include "common/data/dataset.h"

namespace pstrain {

class GatherAhead {
 public:
  // Batches of at most `max_examples` of `split` (targets: one per example for labels,
  // target_width for regression).
  GatherAhead(const Split& split, size_t max_examples);
  ~GatherAhead();
  GatherAhead(const GatherAhead&) = delete;
  GatherAhead& operator=(const GatherAhead&) = delete;

  struct Batch {
    std::span<const uint32_t> ids;
    const float* inputs = nullptr;   // ids.size() x example_size()
    const float* targets = nullptr;  // ids.size() x (target_width or 1)
  };

  // Starts gathering `ids` (at most max_examples) into the buffer the last take() did not hand
  // out. One gather at a time: call take() between two start()s.
  void start(std::span<const uint32_t> ids);
  // Waits for the last start()'s gather and hands its batch out; rethrows what the gather threw
  // (a DataError naming a shard).
  Batch take();

 private:
  struct Buffer {
    std::vector<uint32_t> ids;
    AlignedFloats inputs;
    std::vector<float> targets;
  };
  enum class State { kIdle, kRequested, kDone, kStopping };

  void run();

  const Split& split_;
  size_t max_examples_;
  Buffer buffers_[2];
  int filling_ = 0;  // the buffer start() fills next
  std::mutex mutex_;
  std::condition_variable changed_;
  State state_ = State::kIdle;     // guarded by mutex_
  std::exception_ptr error_;       // guarded by mutex_: the last gather's
  std::thread thread_;             // last: started once the rest is built
};

}  // namespace pstrain
