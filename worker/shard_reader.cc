#include "worker/shard_reader.h"

namespace pstrain {

ShardReader::ShardReader(proto::DataStream::Client stream, kj::WaitScope& wait_scope, uint32_t batches_per_call)
    : stream_(kj::mv(stream)), wait_scope_(wait_scope), batches_per_call_(batches_per_call) {
  request_more();
}

void ShardReader::request_more() {
  auto request = stream_.nextRequest();
  request.setMaxBatches(batches_per_call_);
  in_flight_ = request.send().then([](Response&& r) { return kj::mv(r); });
}

bool ShardReader::next(proto::Batch::Reader* batch) {
  while (ready_.empty()) {
    if (ended_) return false;
    KJ_IF_MAYBE(pending, in_flight_) {
      auto response = std::make_shared<Response>(pending->wait(wait_scope_));
      in_flight_ = nullptr;
      ended_ = response->getEnd();
      const unsigned count = response->getBatches().size();
      for (unsigned i = 0; i < count; ++i) ready_.emplace_back(response, i);
      if (!ended_) request_more();
    } else {
      return false;
    }
  }
  auto [response, index] = ready_.front();
  ready_.pop_front();
  current_ = response;
  *batch = current_->getBatches()[index];
  // Keep the pipeline full: ask for more as soon as the buffered batches run low.
  if (ready_.empty() && !ended_ && in_flight_ == nullptr) request_more();
  return true;
}

}  // namespace pstrain
