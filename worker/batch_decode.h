// Turns a data-service batch into the engine's input: floats, one column per example (uint8
// examples scaled by 1/255 into [0, 1], float32 ones as they are), and int32 labels.
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
#include "common/rpc/proto/pstrain.capnp.h"

namespace pstrain {

// What a batch must hold for the model.
struct BatchShape {
  size_t example_size = 0;  // values per example: the model's input size
  uint32_t classes = 0;     // labels are in [0, classes): the model's outputs
};

// A batch's examples, checked: known dtype, exampleSize == example_size and exactly
// size * example_size values of the dtype. `bytes` points into the batch's message.
struct BatchExamples {
  Dtype dtype = Dtype::kUint8;
  const uint8_t* bytes = nullptr;
  size_t count = 0;  // examples
};
BatchExamples checked_examples(proto::Batch::Reader batch, size_t example_size);

// Writes the batch into `inputs` (shape.example_size floats per example) and `labels` (one per
// example); both must have room for batch.getSize() examples. Also checks that there is one
// label per example, each in [0, shape.classes).
void decode_batch(proto::Batch::Reader batch, const BatchShape& shape, float* inputs, int32_t* labels);

// The batch's examples' indices in their split (what dropout draws from: nn::ExampleKeys), into
// `ids`; checks there is one per example.
void decode_ids(proto::Batch::Reader batch, std::vector<uint32_t>* ids);

}  // namespace pstrain
