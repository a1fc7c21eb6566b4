// Keras' Dropout(rate): in training each value is zeroed with probability `rate` and the kept
// ones scaled by 1 / (1 - rate) (inverted dropout, so inference is the identity).
//
// Which values are dropped is a pure function of (the model's seed, the layer, the epoch, the
// example's index in its split, the value's position): never of a worker's random stream, so a
// batch split over any number of workers, recomputed after a fault, or taken over by another
// worker drops the same values (the exactness rule of docs/DESIGN-NOTES.md).
//
// Thread rules: as layer.h.
#pragma once

#include <cstdint>
#include <vector>

#include "common/engine/nn/layer.h"

namespace pstrain::nn {

// The identity of a training batch's examples: the epoch and each example's index in the split.
struct ExampleKeys {
  uint32_t epoch = 0;
  const uint32_t* ids = nullptr;  // batch entries; nullptr: no keys (inference)
};

template <typename T>
class Dropout final : public Layer<T> {
 public:
  // `stream`: the model's seed mixed with the layer's identity (Model derives it).
  Dropout(float rate, uint64_t stream, int64_t size, int64_t max_batch);
  // Training with these keys (valid until the next forward), or inference (ids == nullptr).
  void set_keys(const ExampleKeys& keys) { keys_ = keys; }
  void forward(const T* params, ConstMatMap<T> in, MatMap<T> out) override;
  void backward(const T* params, ConstMatMap<T> in, ConstMatMap<T> out, MatMap<T> dout, T* grads,
                T* din) override;

  // Whether value `position` of example `id` in `epoch` is kept (exposed for tests).
  static bool kept(uint64_t stream, uint32_t epoch, uint32_t id, int64_t position, float rate);
  // out[k] = 0 or 1 / (1 - rate): whether value first + k of batch entry b is kept, as forward
  // draws it (multi_head_attention's dropout of its weights draws this way too).
  static void factors(uint64_t stream, const ExampleKeys& keys, int64_t b, int64_t first, int64_t n, float rate, T* out);

 private:
  float rate_;
  uint64_t stream_;
  ExampleKeys keys_;
  std::vector<T> scale_;  // the last training forward's factors: 0 or 1 / (1 - rate), by value
};

}  // namespace pstrain::nn
