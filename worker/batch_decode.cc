#include "worker/batch_decode.h"

#include <kj/debug.h>

#include <cstring>

#include "common/rpc/rpc_util.h"

namespace pstrain {

BatchExamples checked_examples(proto::Batch::Reader batch, size_t example_size) {
  const Dtype dtype = rpc::to_dtype(batch.getDtype(), "batch dtype");
  const auto examples = batch.getExamples();
  const size_t count = batch.getSize();
  KJ_REQUIRE(batch.getExampleSize() == example_size, "batch examples do not match the model's input size",
             batch.getExampleSize(), example_size);
  KJ_REQUIRE(examples.size() == count * example_size * dtype_size(dtype),
             "batch examples do not hold size x exampleSize values of their dtype", examples.size(), count,
             example_size, dtype_name(dtype).data());
  return {dtype, examples.begin(), count};
}

void decode_ids(proto::Batch::Reader batch, std::vector<uint32_t>* ids) {
  const auto indices = batch.getIndices();
  KJ_REQUIRE(indices.size() == batch.getSize(), "batch indices do not match its size", indices.size(), batch.getSize());
  ids->resize(indices.size());
  for (unsigned i = 0; i < indices.size(); ++i) (*ids)[i] = indices[i];
}

void decode_batch(proto::Batch::Reader batch, const BatchShape& shape, float* inputs, int32_t* labels) {
  const BatchExamples examples = checked_examples(batch, shape.example_size);
  const auto batch_labels = batch.getLabels();
  KJ_REQUIRE(batch_labels.size() == examples.count, "batch labels do not match its size", batch_labels.size(),
             examples.count);
  for (unsigned i = 0; i < batch_labels.size(); ++i) {
    const int32_t label = batch_labels[i];
    KJ_REQUIRE(label >= 0 && static_cast<uint32_t>(label) < shape.classes, "batch label outside the model's classes",
               label, shape.classes);
    labels[i] = label;
  }
  const size_t values = examples.count * shape.example_size;
  if (values == 0) return;  // an empty batch: `inputs` may be null (memcpy must not see it)
  if (examples.dtype == Dtype::kFloat32) {
    std::memcpy(inputs, examples.bytes, values * sizeof(float));
  } else {
    // Exactly Split::gather's conversion, so that a cluster computes what the trainer does.
    constexpr float kScale = 1.0f / 255.0f;
    for (size_t i = 0; i < values; ++i) inputs[i] = static_cast<float>(examples.bytes[i]) * kScale;
  }
}

}  // namespace pstrain
