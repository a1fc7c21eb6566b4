// The safetensors format (what PyTorch, numpy and JAX users load directly): an 8-byte
// little-endian header length, a JSON header mapping each tensor name to its dtype, shape and
// byte range, then the raw little-endian data.
#pragma once

#include <span>
#include <string>

#include "common/param_layout.h"

namespace pstrain {

// Tensors in layout order, named as in the layout ("layers.1.kernel"), float32 ("F32"), in
// TensorFlow's shapes. `metadata` entries go under "__metadata__" (string values).
std::string encode_safetensors(const ParamLayout& layout, std::span<const float> params,
                               const std::vector<std::pair<std::string, std::string>>& metadata);

}  // namespace pstrain
