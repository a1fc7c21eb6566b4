// Turns a data-service batch into the engine's input: floats, one column per example (uint8
// examples scaled by 1/255 into [0, 1], float32 ones as they are), and float targets (the class
// index, or the regression targets: nn/loss.h).
//
// A batch comes from the coordinator (DataService::fill_batch): its dtype, sizes and labels are
// checked against what the model takes, and a batch that does not fit fails the call
// (KJ_REQUIRE) instead of writing past the buffers or letting a label index outside the logits.
//
// Thread rules: pure functions; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/data/example_types.h"
#include "common/engine/model_spec.h"
#include "common/rpc/proto/pstrain.capnp.h"

namespace pstrain {

// What a batch must hold for the model.
struct BatchShape {
  size_t example_size = 0;  // values per example: the model's input size
  uint32_t classes = 0;     // labels are in [0, classes): the model's outputs (classification)
  uint32_t targets = 0;     // regression: target values per example (the model's outputs); 0: labels
  // Binary cross-entropy: the batch may hold class labels (one output) or `targets` float labels
  // per example (a dataset of float targets: multi-label), whichever its dataset has.
  bool labels_or_targets = false;
};

// A batch's examples, checked: known dtype, exampleSize == example_size and exactly
// size * example_size values of the dtype. `bytes` points into the batch's message.
struct BatchExamples {
  Dtype dtype = Dtype::kUint8;
  const uint8_t* bytes = nullptr;
  size_t count = 0;  // examples
};
BatchExamples checked_examples(proto::Batch::Reader batch, size_t example_size);

// The shape of a model's batches: `inputs` values per example; under a regression loss `outputs`
// targets per example, else labels in [0, the loss's classes).
BatchShape model_batch_shape(const LossSpec& loss, int64_t inputs, int64_t outputs);

// Writes the batch into `inputs` (shape.example_size floats per example) and `targets` (one label
// per example as a float, or shape.targets regression values); both must have room for
// batch.getSize() examples. Also checks that there is one label per example, each in
// [0, shape.classes), or shape.targets finite targets per example.
void decode_batch(proto::Batch::Reader batch, const BatchShape& shape, float* inputs, float* targets);

// The batch's examples' indices in their split (what dropout draws from: nn::ExampleKeys), into
// `ids`; checks there is one per example.
void decode_ids(proto::Batch::Reader batch, std::vector<uint32_t>* ids);

}  // namespace pstrain
