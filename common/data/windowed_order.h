// The order in which an epoch visits a sharded split's examples (docs/DESIGN-NOTES.md "Dataset
// store"), as a function of the seed and the epoch only, never of who reads it:
//   1. the shards in a seeded permutation (Fisher-Yates over shard ids);
//   2. their examples, each shard in stored order, streamed through a shuffle window of W
//      examples: the window starts as the stream's first W; each next position takes the window's
//      slot j (uniform, seeded) and refills it from the stream; when the stream is spent, the
//      window's rest follows in a seeded Fisher-Yates order.
// Memory: W example ids plus the shard table, whatever the split's size. With W >= the split's
// size this is a uniform random permutation; with one shard it is then exactly epoch_order(n,
// seed, epoch) (common/base/rng.h), the order of a split held in memory.
//
// Positions come in order: a reader that starts at position p replays the window from the
// epoch's start (index arithmetic only, about 10 ns a position).
//
// Thread rules: a value; one per reader.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/base/rng.h"

namespace pstrain {

class WindowedOrder {
 public:
  // `shard_sizes`: examples per shard, in stored order (shard s's examples have the global ids
  // that follow shard s - 1's). `window` >= 1.
  WindowedOrder(const std::vector<uint64_t>& shard_sizes, uint64_t seed, uint32_t epoch, uint64_t window);

  uint64_t size() const { return size_; }
  uint64_t position() const { return emitted_; }
  bool done() const { return emitted_ == size_; }
  // The example (global id) at the next position.
  uint64_t next();
  // Moves `n` positions on.
  void skip(uint64_t n);
  // The permutation of shard ids the stream follows.
  const std::vector<uint32_t>& shard_order() const { return shard_order_; }

 private:
  uint64_t next_from_stream();

  std::vector<uint64_t> first_, sizes_;  // per shard id
  std::vector<uint32_t> shard_order_;
  uint64_t size_ = 0, emitted_ = 0;
  size_t stream_shard_ = 0;   // position in shard_order_
  uint64_t stream_within_ = 0;
  uint64_t streamed_ = 0;     // stream items taken so far
  std::vector<uint64_t> window_;
  bool draining_ = false;
  size_t drain_at_ = 0;
  Rng rng_;
};

}  // namespace pstrain
