// The element type of a dataset's examples and the class cap, shared by the upload parsers
// (dataset_formats.h), the loaded splits (dataset.h) and the wire (Batch.dtype in
// proto/pstrain.capnp), so that one enum names a dtype everywhere.
#pragma once

#include <cstdint>
#include <string_view>

namespace pstrain {

// How an example's values are stored: uint8 (images as stored; the engine reads v / 255) or
// float32 (used as is). Values are little-endian, example after example.
enum class Dtype : uint8_t { kUint8, kFloat32 };

inline constexpr uint32_t dtype_size(Dtype dtype) { return dtype == Dtype::kUint8 ? 1 : 4; }
inline constexpr std::string_view dtype_name(Dtype dtype) { return dtype == Dtype::kUint8 ? "uint8" : "float32"; }

// Most classes a dataset may have (labels are in [0, kMaxClasses)).
inline constexpr uint32_t kMaxClasses = 10'000;

}  // namespace pstrain
