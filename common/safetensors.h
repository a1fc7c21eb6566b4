// The safetensors format (what PyTorch, numpy and JAX users load directly): an 8-byte
// little-endian header length, a JSON header mapping each tensor name to its dtype, shape and
// byte range, then the raw little-endian data.
#pragma once

#include <map>
#include <optional>
#include <span>
#include <string_view>
#include <vector>
#include <string>

#include "common/param_layout.h"

namespace pstrain {

// Tensors in layout order, named as in the layout ("layers.1.kernel"), float32 ("F32"), in
// TensorFlow's shapes. `metadata` entries go under "__metadata__" (string values).
std::string encode_safetensors(const ParamLayout& layout, std::span<const float> params,
                               const std::vector<std::pair<std::string, std::string>>& metadata);
// The same file cut into consecutive pieces of at most max_piece_bytes (the header alone may be a
// piece): what the JobStore keeps, one RocksDB value each, so that no value, and no buffer but
// the parameters themselves, is the size of the model.
std::vector<std::string> encode_safetensors_pieces(const ParamLayout& layout, std::span<const float> params,
                                                   const std::vector<std::pair<std::string, std::string>>& metadata,
                                                   size_t max_piece_bytes);
// The parameters of a file encode_safetensors made for `layout` (laid out by it, zeros in its
// padding), or nullopt if the file does not fit the layout.
std::optional<std::vector<float>> decode_safetensors(const ParamLayout& layout, std::string_view file);
// The string entries of a file's "__metadata__" (empty if it has none); nullopt if the header is
// not a safetensors header.
std::optional<std::map<std::string, std::string>> safetensors_metadata(std::string_view file);

}  // namespace pstrain
