// Reads a data shard from the coordinator's data service ahead of the consumer: calls go out one
// after the other (the next as soon as a reply is in) until `prefetch_batches` are buffered or
// their examples hold `prefetch_bytes` (the bound of a worker's memory for data, whatever the
// examples' size: 256 batches of 512 KiB would be 128 MiB; one call's batches may pass it), so
// the next batches arrive while the current step computes, and training can go on for a while
// if the coordinator goes away (docs/DESIGN-NOTES.md "Training while the coordinator is down":
// not every step needs the coordinator).
//
// Thread rules: event-loop thread only (next() waits on the loop).
#pragma once

#include <capnp/capability.h>
#include <kj/async.h>

#include <deque>
#include <memory>

#include "common/rpc/proto/pstrain.capnp.h"

namespace pstrain {

class ShardReader {
 public:
  explicit ShardReader(proto::DataStream::Client stream, uint32_t batches_per_call = 8,
                       size_t prefetch_batches = 256, size_t prefetch_bytes = size_t{32} << 20);

  // The next batch, or false when the shard is exhausted; waits on `wait_scope` for it if it has
  // not arrived yet. The reader stays valid until the next call of next().
  bool next(kj::WaitScope& wait_scope, proto::Batch::Reader* batch);
  // The batch after the current one if it has arrived (without waiting), or false. The reader
  // stays valid until the next call of next().
  bool peek(proto::Batch::Reader* batch) const;

 private:
  using Response = capnp::Response<proto::DataStream::NextResults>;
  // Fetches calls one after the other while the buffer has room; ends with the shard.
  kj::Promise<void> pump();
  static void wake(kj::Own<kj::PromiseFulfiller<void>>& waiter);

  proto::DataStream::Client stream_;
  uint32_t batches_per_call_;
  size_t prefetch_batches_;
  size_t prefetch_bytes_;
  size_t buffered_bytes_ = 0;  // the examples' bytes of the batches in ready_
  std::deque<std::pair<std::shared_ptr<Response>, unsigned>> ready_;
  std::shared_ptr<Response> current_;
  bool ended_ = false;
  kj::Maybe<kj::Exception> failed_;                   // the stream broke; buffered batches are still served
  kj::Own<kj::PromiseFulfiller<void>> data_waiter_;   // next() waiting for a reply
  kj::Own<kj::PromiseFulfiller<void>> space_waiter_;  // pump() waiting for room in the buffer
  kj::Promise<void> pump_ = nullptr;                   // last: destroyed first
};

}  // namespace pstrain
