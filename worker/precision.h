// A job's `precision` (job_spec.h) applied to the model a worker or pstrain-train trains: with
// mixed_bfloat16, the convolutions compute in bfloat16 where the CPU does so natively
// (nn/onednn_conv.h: AVX512-BF16 or AMX), else the job trains in float32 on this node.
//
// Thread rules: call it on the thread that owns the model, before its first step.
#pragma once

#include <string>

#include "common/data/job_spec.h"
#include "common/engine/nn/data_parallel_model.h"

namespace pstrain {

// Applies `precision` to `model`; returns what to log ("" for float32).
std::string apply_precision(Precision precision, nn::DataParallelModel<float>& model);

}  // namespace pstrain
