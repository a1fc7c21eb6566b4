// Turns a data-service batch into the engine's input: [0, 1] floats, one column per example.
#pragma once

#include <kj/debug.h>

#include <cstddef>
#include <cstdint>

#include "common/proto/pstrain.capnp.h"

namespace pstrain {

// `inputs` holds input_size floats per example, `labels` one int per example; the batch must have
// exactly that shape (a malformed batch fails the call instead of writing past the buffers).
inline void decode_batch(proto::Batch::Reader batch, size_t input_size, float* inputs, int32_t* labels) {
  const auto pixels = batch.getPixels();
  const auto label_bytes = batch.getLabels();
  KJ_REQUIRE(pixels.size() == size_t{batch.getSize()} * input_size && label_bytes.size() == batch.getSize(),
             "batch does not match the model's input", pixels.size(), label_bytes.size(), batch.getSize());
  constexpr float kScale = 1.0f / 255.0f;
  for (size_t i = 0; i < pixels.size(); ++i) inputs[i] = static_cast<float>(pixels[i]) * kScale;
  for (size_t i = 0; i < label_bytes.size(); ++i) labels[i] = label_bytes[i];
}

}  // namespace pstrain
