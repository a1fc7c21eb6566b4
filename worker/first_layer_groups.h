// The first dense layer's kernel rows grouped by the server that holds them (common/engine/nn/row_groups.h):
// how every worker of a cluster computes that layer, and how the standalone trainer computes it
// when asked to match such a cluster bit for bit (LocalTrainerOptions::servers).
#pragma once

#include <cstdint>
#include <vector>

#include "common/engine/chunk_plan.h"
#include "common/engine/nn/data_parallel_model.h"

namespace pstrain {

// Sets the row groups and returns true; false (the model unchanged) when the first layer is not a
// dense layer on the input, or a chunk of its kernel starts inside a row.
bool group_first_layer_by_server(nn::DataParallelModel<float>& model, const std::vector<ChunkInfo>& chunks,
                                 uint32_t servers);

}  // namespace pstrain
