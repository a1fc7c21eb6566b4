// The order in which an epoch visits a training split's examples (docs/DESIGN-NOTES.md "The
// epoch's order"), as a function of the seed, the epoch and the window only, never of who reads it
// or how the split is stored:
//   - a split of at most W examples (the window) is in a uniform random permutation, exactly
//     epoch_order(n, seed, epoch) (common/base/rng.h): every dataset that fits the window keeps
//     the order it always had;
//   - a larger split is cut into blocks of ceil(W / 256) consecutive ids (the last shorter), the
//     blocks go in a seeded permutation (Fisher-Yates), and that stream of ids passes through a
//     shuffle window of W: the window starts as the stream's first W ids; each position takes the
//     window's slot j (uniform, seeded) and refills it from the stream; when the stream is spent,
//     the window's rest follows in a seeded Fisher-Yates order.
// Memory: W ids (4 bytes each) plus one per block (256 / W per example: 1 KiB for a billion
// examples with W = 2^20), whatever the split's size. Reads stay within the window's blocks.
//
// Positions come in order: a reader that starts at position p replays the draws from the
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
  // The order of ids 0..n-1 for (seed, epoch) with a window of `window` >= 1 examples.
  WindowedOrder(uint32_t n, uint64_t seed, uint32_t epoch, uint64_t window);

  // The blocks' size for a split of n examples and a window: n when the window holds the split.
  static uint64_t block_size(uint32_t n, uint64_t window);

  uint32_t size() const { return size_; }
  uint64_t position() const { return emitted_; }
  bool done() const { return emitted_ == size_; }
  // The example at the next position.
  uint32_t next();
  // Moves `n` positions on.
  void skip(uint64_t n);
  // The permutation of blocks the stream follows, and their size.
  const std::vector<uint32_t>& block_order() const { return block_order_; }
  uint64_t block() const { return block_; }

 private:
  uint32_t next_from_stream();

  uint32_t size_ = 0;
  uint64_t block_ = 1;
  std::vector<uint32_t> block_order_;
  uint64_t emitted_ = 0;
  size_t stream_block_ = 0;   // position in block_order_
  uint64_t stream_within_ = 0;
  uint64_t streamed_ = 0;     // stream items taken so far
  std::vector<uint32_t> window_;
  bool draining_ = false;
  size_t drain_at_ = 0;
  Rng rng_;
};

}  // namespace pstrain
