#include "common/data/windowed_order.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace pstrain {

WindowedOrder::WindowedOrder(const std::vector<uint64_t>& shard_sizes, uint64_t seed, uint32_t epoch, uint64_t window)
    : sizes_(shard_sizes), rng_(mix_seed(seed, epoch)) {
  if (window == 0) throw std::invalid_argument("a shuffle window of at least one example");
  first_.resize(sizes_.size());
  for (size_t s = 0; s < sizes_.size(); ++s) {
    first_[s] = size_;
    size_ += sizes_[s];
  }
  // The shards' permutation (none to draw for one shard: the same draws as epoch_order).
  shard_order_.resize(sizes_.size());
  std::iota(shard_order_.begin(), shard_order_.end(), 0u);
  for (size_t i = shard_order_.size(); i > 1; --i) {
    std::swap(shard_order_[i - 1], shard_order_[rng_.uniform_index(i)]);
  }
  const uint64_t fill = std::min(window, size_);
  window_.reserve(fill);
  while (window_.size() < fill) window_.push_back(next_from_stream());
}

uint64_t WindowedOrder::next_from_stream() {
  while (stream_within_ == sizes_[shard_order_[stream_shard_]]) {
    ++stream_shard_;
    stream_within_ = 0;
  }
  ++streamed_;
  return first_[shard_order_[stream_shard_]] + stream_within_++;
}

uint64_t WindowedOrder::next() {
  if (emitted_ == size_) throw std::out_of_range("the epoch's order has no more positions");
  ++emitted_;
  if (streamed_ < size_) {
    const size_t j = static_cast<size_t>(rng_.uniform_index(window_.size()));
    const uint64_t out = window_[j];
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
