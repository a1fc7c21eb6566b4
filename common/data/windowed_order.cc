#include "common/data/windowed_order.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace pstrain {
namespace {
constexpr uint64_t kBlocksPerWindow = 256;
}

uint64_t WindowedOrder::block_size(uint32_t n, uint64_t window) {
  if (window == 0) throw std::invalid_argument("a shuffle window of at least one example");
  if (n <= window) return std::max<uint64_t>(1, n);
  return (window + kBlocksPerWindow - 1) / kBlocksPerWindow;
}

WindowedOrder::WindowedOrder(uint32_t n, uint64_t seed, uint32_t epoch, uint64_t window)
    : size_(n), block_(block_size(n, window)), rng_(mix_seed(seed, epoch)) {
  // The blocks' permutation (none to draw for one block: the same draws as epoch_order).
  block_order_.resize(static_cast<size_t>((uint64_t{n} + block_ - 1) / block_));
  std::iota(block_order_.begin(), block_order_.end(), 0u);
  for (size_t i = block_order_.size(); i > 1; --i) {
    std::swap(block_order_[i - 1], block_order_[rng_.uniform_index(i)]);
  }
  const uint64_t fill = std::min<uint64_t>(window, n);
  window_.reserve(fill);
  while (window_.size() < fill) window_.push_back(next_from_stream());
}

uint32_t WindowedOrder::next_from_stream() {
  const uint64_t first = block_order_[stream_block_] * block_;
  if (stream_within_ == std::min<uint64_t>(block_, size_ - first)) {
    ++stream_block_;
    stream_within_ = 0;
  }
  ++streamed_;
  return static_cast<uint32_t>(block_order_[stream_block_] * block_ + stream_within_++);
}

uint32_t WindowedOrder::next() {
  if (emitted_ == size_) throw std::out_of_range("the epoch's order has no more positions");
  ++emitted_;
  if (streamed_ < size_) {
    const size_t j = static_cast<size_t>(rng_.uniform_index(window_.size()));
    const uint32_t out = window_[j];
    window_[j] = next_from_stream();
    return out;
  }
  if (!draining_) {
    // The stream is spent: the window's rest in a Fisher-Yates order (epoch_order's loop).
    draining_ = true;
    for (size_t i = window_.size(); i > 1; --i) std::swap(window_[i - 1], window_[rng_.uniform_index(i)]);
  }
  return window_[drain_at_++];
}

void WindowedOrder::skip(uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) next();
}

}  // namespace pstrain
