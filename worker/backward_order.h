// The order in which backward finishes the gradients of a step's pushes (chunks, factor groups):
// by descending offset in the flat parameter buffer (tensors are laid out in layer order and
// backward runs from the last layer to the first), equal offsets in index order; and how many of
// the current step's pushes have gone out, so each leaves as soon as its gradient is final.
//
// Thread rules: its owner's thread.
#pragma once

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <vector>

namespace pstrain {

class BackwardOrder {
 public:
  // offsets[i]: where push i's gradient starts in the flat buffer; only the pushes in `indices`.
  BackwardOrder(const std::vector<size_t>& offsets, std::vector<size_t> indices) : order_(std::move(indices)) {
    std::stable_sort(order_.begin(), order_.end(), [&](size_t a, size_t b) { return offsets[a] > offsets[b]; });
    for (size_t i : order_) offsets_.push_back(offsets[i]);
  }
  // Every push of `offsets`.
  explicit BackwardOrder(const std::vector<size_t>& offsets) : BackwardOrder(offsets, all(offsets.size())) {}

  // Calls send(i) for every push not sent yet this step whose gradient starts at or after `from`
  // (from 0: all the rest), in order. Returns how many it sent.
  template <typename Send>
  size_t send_from(size_t from, Send&& send) {
    const size_t before = sent_;
    for (; sent_ < order_.size() && offsets_[sent_] >= from; ++sent_) send(order_[sent_]);
    return sent_ - before;
  }
  // Every push of the step has gone out: the next step starts from the first.
  void restart() { sent_ = 0; }

 private:
  static std::vector<size_t> all(size_t n) {
    std::vector<size_t> indices(n);
    std::iota(indices.begin(), indices.end(), size_t{0});
    return indices;
  }

  std::vector<size_t> order_;    // push indices, in the order backward finishes them
  std::vector<size_t> offsets_;  // their offsets, likewise
  size_t sent_ = 0;              // of the current step
};

}  // namespace pstrain
