// Image augmentation as layers (Keras' preprocessing layers), on [height, width, channels]
// values, in training only (evaluation and prediction pass the values through):
//   random_flip         mirror left-right (`horizontal`), top-bottom (`vertical`), each with
//                       probability 1/2
//   random_crop         pad by `padding` zeros on every side, then take the original size at a
//                       random offset: a shift by -padding..padding rows and columns (the
//                       classic CIFAR augmentation; Keras' RandomCrop crops to a smaller size)
//   random_translation  a shift by up to floor(height_factor * height) rows and
//                       floor(width_factor * width) columns either way, in whole pixels, the
//                       uncovered part zero (Keras' fill_mode="constant", without interpolation)
// Like dropout (dropout.h), every draw is a pure function of (the model's seed, the layer, the
// epoch, the example's index in its split): N workers, a takeover and a recovered run augment
// each example the same way.
//
// Thread rules: as layer.h.
#pragma once

#include <cstdint>
#include <vector>

#include "common/engine/nn/dropout.h"
#include "common/engine/nn/layer.h"

namespace pstrain::nn {

template <typename T>
class Augmentation final : public Layer<T> {
 public:
  struct Draws {
    bool flip_horizontal = false, flip_vertical = false;  // may flip that way
    int64_t max_shift_rows = 0, max_shift_cols = 0;       // shifts drawn from -max..max
  };
  Augmentation(int64_t height, int64_t width, int64_t channels, Draws draws, uint64_t stream, int64_t max_batch);
  void set_keys(const ExampleKeys& keys) { keys_ = keys; }
  void forward(const T* params, ConstMatMap<T> in, MatMap<T> out) override;
  void backward(const T* params, ConstMatMap<T> in, ConstMatMap<T> out, MatMap<T> dout, T* grads,
                T* din) override;

  // One example's transform: out(i, j) = in(source row, source column), or zero outside.
  struct Transform {
    bool flip_h = false, flip_v = false;
    int64_t shift_rows = 0, shift_cols = 0;
  };
  static Transform draw(const Draws& draws, uint64_t stream, uint32_t epoch, uint32_t id);

 private:
  // in(r, c) for out(i, j) under t, or -1 when it falls outside the image.
  int64_t source_pixel(const Transform& t, int64_t i, int64_t j) const;

  int64_t height_, width_, channels_;
  Draws draws_;
  uint64_t stream_;
  ExampleKeys keys_;
  std::vector<Transform> transforms_;  // the last training forward's, by example
};

}  // namespace pstrain::nn
