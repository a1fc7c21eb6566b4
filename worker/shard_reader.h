// Reads a data shard from the coordinator's data service, keeping one request in flight ahead
// of the consumer, so the next batches arrive while the current step computes.
//
// Thread rules: event-loop thread only (it waits on the loop).
#pragma once

#include <capnp/capability.h>
#include <kj/async.h>

#include <deque>
#include <memory>

#include "common/proto/pstrain.capnp.h"

namespace pstrain {

class ShardReader {
 public:
  ShardReader(proto::DataStream::Client stream, kj::WaitScope& wait_scope, uint32_t batches_per_call = 4);

  // The next batch, or false when the shard is exhausted. The reader stays valid until the next
  // call of next().
  bool next(proto::Batch::Reader* batch);

 private:
  using Response = capnp::Response<proto::DataStream::NextResults>;
  void request_more();

  proto::DataStream::Client stream_;
  kj::WaitScope& wait_scope_;
  uint32_t batches_per_call_;
  kj::Maybe<kj::Promise<Response>> in_flight_;
  std::deque<std::pair<std::shared_ptr<Response>, unsigned>> ready_;
  std::shared_ptr<Response> current_;
  bool ended_ = false;
};

}  // namespace pstrain
