#include "worker/input_sparsity.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace pstrain {
namespace {

// Gaps between ranges narrower than this many elements are sent along (1 KiB: a separate part
// costs more than the bytes it saves).
constexpr size_t kMinGap = 256;
// A chunk whose ranges would cover more than 7/8 of it, or need more parts than this, goes dense.
constexpr size_t kMaxRanges = 64;

size_t round_down_even(size_t x) { return x & ~size_t{1}; }
size_t round_up_even(size_t x) { return (x + 1) & ~size_t{1}; }

}  // namespace

InputSparsity::InputSparsity(const ModelSpec& spec, const ParamLayout& layout, const std::vector<ChunkInfo>& chunks)
    : chunks_(chunks) {
  // The first layer with parameters, if only layers that keep the input's values in order
  // (flatten, reshape) come before it, in a chain from the model's input (no named inputs).
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const LayerType type = spec.layers[i].type;
    if (!spec.layers[i].inputs.empty()) return;
    if (type == LayerType::kFlatten || type == LayerType::kReshape) continue;
    if (type != LayerType::kDense) return;
    if ((i == 0 ? spec.input_shape : infer_shapes(spec)[i - 1]).size() != 1) return;  // a dense over a sequence
    const ParamInfo* kernel = layout.find("layers." + layer_key(spec, i) + ".kernel");
    if (kernel == nullptr || kernel->shape.size() != 2 || kernel->shape[0] != num_elements(spec.input_shape)) return;
    kernel_param_ = kernel - layout.params().data();
    features_ = static_cast<size_t>(kernel->shape[0]);
    units_ = static_cast<size_t>(kernel->shape[1]);
    return;
  }
}

void InputSparsity::mark_features(const uint8_t* data, Dtype dtype, size_t examples, size_t example_size,
                                  std::vector<uint8_t>* mask) const {
  mask->assign(features_, 0);
  const size_t n = std::min(example_size, features_);
  uint8_t* m = mask->data();
  for (size_t e = 0; e < examples; ++e) {
    if (dtype == Dtype::kUint8) {
      const uint8_t* x = data + e * example_size;
      for (size_t j = 0; j < n; ++j) m[j] |= x[j];  // nonzero stays nonzero
    } else {
      // On the bits (the data may not be float-aligned): zero unless something but the sign is set.
      const uint8_t* x = data + e * example_size * sizeof(float);
      for (size_t j = 0; j < n; ++j) {
        uint32_t bits;
        std::memcpy(&bits, x + j * sizeof(float), sizeof bits);
        m[j] |= static_cast<uint8_t>((bits & 0x7fffffffu) != 0);
      }
    }
  }
  for (size_t j = 0; j < n; ++j) m[j] = m[j] != 0;
}

std::vector<InputSparsity::Ranges> InputSparsity::chunk_ranges(const std::vector<uint8_t>& mask) const {
  std::vector<Ranges> out(chunks_.size());
  if (!active() || mask.size() != features_) return out;
  // The kernel rows of the marked features, as element ranges of the whole tensor, gaps bridged.
  std::vector<ChunkRange> rows;
  for (size_t j = 0; j < features_;) {
    if (mask[j] == 0) {
      ++j;
      continue;
    }
    size_t end = j;
    while (end < features_ && mask[end] != 0) ++end;
    const size_t begin_el = round_down_even(j * units_);
    const size_t end_el = std::min(round_up_even(end * units_), features_ * units_);
    if (!rows.empty() && begin_el < rows.back().offset + rows.back().size + kMinGap) {
      rows.back().size = end_el - rows.back().offset;
    } else {
      rows.push_back({begin_el, end_el - begin_el});
    }
    j = end;
  }
  for (size_t k = 0; k < chunks_.size(); ++k) {
    const ChunkInfo& c = chunks_[k];
    if (static_cast<int64_t>(c.param) != kernel_param_) continue;
    std::vector<ChunkRange> ranges;
    size_t covered = 0;
    for (const ChunkRange& r : rows) {
      const size_t begin = std::max(r.offset, c.offset), end = std::min(r.offset + r.size, c.offset + c.size);
      if (begin >= end) continue;
      ranges.push_back({begin - c.offset, end - begin});
      covered += end - begin;
    }
    if (ranges.size() <= kMaxRanges && covered * 8 <= c.size * 7) out[k] = std::move(ranges);
  }
  return out;
}

}  // namespace pstrain
