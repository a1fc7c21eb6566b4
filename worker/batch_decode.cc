#include "worker/batch_decode.h"

#include <kj/debug.h>

#include <cmath>
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

BatchShape model_batch_shape(const LossSpec& loss, int64_t inputs, int64_t outputs) {
  if (is_regression(loss)) return {static_cast<size_t>(inputs), 0, static_cast<uint32_t>(outputs)};
  if (loss.type == LossType::kBinaryCrossEntropy) {
    // Class labels 0/1 for one output, or (from a dataset of float targets) one label per output.
    return {static_cast<size_t>(inputs), 2, static_cast<uint32_t>(outputs), true};
  }
  return {static_cast<size_t>(inputs), static_cast<uint32_t>(outputs), 0};
}

void decode_batch(proto::Batch::Reader batch, const BatchShape& shape, float* inputs, float* targets) {
  const BatchExamples examples = checked_examples(batch, shape.example_size);
  if (shape.targets > 0 && (!shape.labels_or_targets || batch.getTargets().size() > 0 || examples.count == 0)) {
    const auto batch_targets = batch.getTargets();
    KJ_REQUIRE(batch_targets.size() == examples.count * shape.targets, "batch targets do not match its size",
               batch_targets.size(), examples.count, shape.targets);
    for (unsigned i = 0; i < batch_targets.size(); ++i) {
      const float t = batch_targets[i];
      KJ_REQUIRE(std::isfinite(t), "batch target is not a finite number", i);
      targets[i] = t;
    }
  } else {
    const auto batch_labels = batch.getLabels();
    KJ_REQUIRE(batch_labels.size() == examples.count, "batch labels do not match its size", batch_labels.size(),
               examples.count);
    for (unsigned i = 0; i < batch_labels.size(); ++i) {
      const int32_t label = batch_labels[i];
      KJ_REQUIRE(label >= 0 && static_cast<uint32_t>(label) < shape.classes, "batch label outside the model's classes",
                 label, shape.classes);
      targets[i] = static_cast<float>(label);
    }
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
