#include "worker/shard_reader.h"

namespace pstrain {

ShardReader::ShardReader(proto::DataStream::Client stream, uint32_t batches_per_call, size_t prefetch_batches,
                         size_t prefetch_bytes)
    : stream_(kj::mv(stream)),
      batches_per_call_(batches_per_call),
      prefetch_batches_(prefetch_batches),
      prefetch_bytes_(prefetch_bytes) {
  pump_ = pump().eagerlyEvaluate([this](kj::Exception&& e) {
    failed_ = kj::mv(e);
    wake(data_waiter_);
  });
}

void ShardReader::wake(kj::Own<kj::PromiseFulfiller<void>>& waiter) {
  if (waiter.get() != nullptr && waiter->isWaiting()) waiter->fulfill();
  waiter = nullptr;
}

kj::Promise<void> ShardReader::pump() {
  if (ended_) return kj::READY_NOW;
  if (ready_.size() >= prefetch_batches_ || (!ready_.empty() && buffered_bytes_ >= prefetch_bytes_)) {
    auto paf = kj::newPromiseAndFulfiller<void>();
    space_waiter_ = kj::mv(paf.fulfiller);
    return paf.promise.then([this] { return pump(); });
  }
  auto request = stream_.nextRequest();
  request.setMaxBatches(batches_per_call_);
  return request.send().then([this](Response&& r) {
    auto response = std::make_shared<Response>(kj::mv(r));
    ended_ = response->getEnd();
    const unsigned count = response->getBatches().size();
    for (unsigned i = 0; i < count; ++i) {
      ready_.emplace_back(response, i);
      buffered_bytes_ += response->getBatches()[i].getExamples().size();
    }
    wake(data_waiter_);
    return pump();
  });
}

bool ShardReader::next(kj::WaitScope& wait_scope, proto::Batch::Reader* batch) {
  while (ready_.empty()) {
    if (ended_) return false;
    KJ_IF_MAYBE(e, failed_) { kj::throwFatalException(kj::cp(*e)); }
    auto paf = kj::newPromiseAndFulfiller<void>();
    data_waiter_ = kj::mv(paf.fulfiller);
    paf.promise.wait(wait_scope);
  }
  auto [response, index] = ready_.front();
  ready_.pop_front();
  current_ = response;
  *batch = current_->getBatches()[index];
  buffered_bytes_ -= batch->getExamples().size();
  wake(space_waiter_);  // room for more
  return true;
}

bool ShardReader::peek(proto::Batch::Reader* batch) const {
  if (ready_.empty()) return false;
  const auto& [response, index] = ready_.front();
  *batch = response->getBatches()[index];
  return true;
}

}  // namespace pstrain
