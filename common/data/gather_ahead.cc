#include "common/data/gather_ahead.h"

#include "common/base/error.h"

namespace pstrain {

GatherAhead::GatherAhead(const Split& split, size_t max_examples) : split_(split), max_examples_(max_examples) {
  const size_t per_target = split.regression() ? split.target_width : 1;
  for (Buffer& b : buffers_) {
    b.ids.reserve(max_examples);
    b.inputs.resize(max_examples * split.example_size());
    b.targets.resize(max_examples * per_target);
  }
  thread_ = std::thread([this] { run(); });
}

GatherAhead::~GatherAhead() {
  {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return state_ != State::kRequested; });
    state_ = State::kStopping;
  }
  changed_.notify_all();
  thread_.join();
}

void GatherAhead::start(std::span<const uint32_t> ids) {
  if (ids.size() > max_examples_) {
    throw Error("GatherAhead: a batch of " + std::to_string(ids.size()) + " examples; at most " +
                std::to_string(max_examples_));
  }
  {
    std::lock_guard lock(mutex_);
    if (state_ != State::kIdle) throw Error("GatherAhead: start() before the last batch was taken");
    buffers_[filling_].ids.assign(ids.begin(), ids.end());
    error_ = nullptr;
    state_ = State::kRequested;
  }
  changed_.notify_all();
}

GatherAhead::Batch GatherAhead::take() {
  std::unique_lock lock(mutex_);
  if (state_ == State::kIdle) throw Error("GatherAhead: take() without a start()");
  changed_.wait(lock, [&] { return state_ == State::kDone; });
  state_ = State::kIdle;
  const Buffer& b = buffers_[filling_];
  filling_ = 1 - filling_;
  if (error_) std::rethrow_exception(error_);
  return {{b.ids.data(), b.ids.size()}, b.inputs.data(), b.targets.data()};
}

void GatherAhead::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return state_ == State::kRequested || state_ == State::kStopping; });
    if (state_ == State::kStopping) return;
    Buffer& b = buffers_[filling_];  // start() and take() leave it alone until kDone
    lock.unlock();
    std::exception_ptr error;
    try {
      split_.gather({b.ids.data(), b.ids.size()}, b.inputs.data(), b.targets.data());
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    error_ = error;
    state_ = State::kDone;
    changed_.notify_all();
  }
}

}  // namespace pstrain
