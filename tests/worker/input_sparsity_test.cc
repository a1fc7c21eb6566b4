// Which parts of which chunks a row-sparse push or reply carries (worker/input_sparsity.h).
#include <doctest/doctest.h>

#include "worker/input_sparsity.h"

using namespace pstrain;

namespace {

ModelSpec model(std::vector<LayerSpec> layers) {
  ModelSpec m;
  m.input_shape = {4, 4, 1};
  m.seed = 1;
  m.layers = std::move(layers);
  return m;
}

LayerSpec layer(LayerType type, int64_t units = 0) {
  LayerSpec l;
  l.type = type;
  l.units = units;
  return l;
}

}  // namespace

TEST_CASE("the features of a batch are those nonzero in some example") {
  const ModelSpec m = model({layer(LayerType::kFlatten), layer(LayerType::kDense, 300)});
  const ParamLayout layout = make_param_layout(m);
  const InputSparsity s(m, layout, plan_chunks(layout, 1));
  REQUIRE(s.active());
  const std::vector<uint8_t> pixels = {0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9,   // example 0
                                       0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0};  // example 1
  std::vector<uint8_t> mask;
  s.mark_features(pixels.data(), Dtype::kUint8, 2, 16, &mask);
  std::vector<uint8_t> expected(16, 0);
  expected[1] = expected[14] = expected[15] = 1;
  CHECK(mask == expected);
}

namespace {

// The ranges of every kernel chunk, in tensor elements, adjacent ones joined; checks that each is
// inside its chunk and even-aligned.
std::vector<ChunkRange> kernel_ranges(const InputSparsity& s, const std::vector<ChunkInfo>& chunks,
                                      const std::vector<uint8_t>& mask) {
  const auto ranges = s.chunk_ranges(mask);
  REQUIRE(ranges.size() == chunks.size());
  std::vector<ChunkRange> out;
  for (size_t k = 0; k < chunks.size(); ++k) {
    if (chunks[k].param != 0) {
      CHECK_FALSE(ranges[k].has_value());  // bias and later layers: dense
      continue;
    }
    REQUIRE(ranges[k].has_value());
    for (const ChunkRange& r : *ranges[k]) {
      CHECK(r.offset % 2 == 0);
      CHECK(r.offset + r.size <= chunks[k].size);
      const size_t at = chunks[k].offset + r.offset;
      if (!out.empty() && out.back().offset + out.back().size == at) {
        out.back().size += r.size;
      } else {
        out.push_back({at, r.size});
      }
    }
  }
  return out;
}

}  // namespace

TEST_CASE("kernel chunks carry the rows of the marked features, other chunks go whole") {
  // 16 features x 300 units; the kernel is cut into several chunks.
  const ModelSpec m = model({layer(LayerType::kFlatten), layer(LayerType::kDense, 300), layer(LayerType::kDense, 2)});
  const ParamLayout layout = make_param_layout(m);
  const auto chunks = plan_chunks(layout, 2);
  const InputSparsity s(m, layout, chunks);
  std::vector<uint8_t> mask(16, 0);
  mask[1] = mask[2] = mask[9] = 1;
  // Rows 1-2 and row 9, 1800 elements apart: two ranges.
  CHECK(kernel_ranges(s, chunks, mask) == std::vector<ChunkRange>{{300, 600}, {2700, 300}});
  // Every row: not worth ranges.
  for (const auto& r : s.chunk_ranges(std::vector<uint8_t>(16, 1))) CHECK_FALSE(r.has_value());
  // No row at all (an empty slice): kernel chunks carry nothing.
  CHECK(kernel_ranges(s, chunks, std::vector<uint8_t>(16, 0)).empty());
}

TEST_CASE("ranges are word-aligned and bridge small gaps") {
  // 16 features x 7 units (odd): rows start on odd elements and get rounded to even ones.
  const ModelSpec m = model({layer(LayerType::kFlatten), layer(LayerType::kDense, 7)});
  const ParamLayout layout = make_param_layout(m);
  const auto chunks = plan_chunks(layout, 1, 64);  // the 112-element kernel in several chunks
  const InputSparsity s(m, layout, chunks);
  std::vector<uint8_t> mask(16, 0);
  mask[3] = 1;
  // Row 3 is elements [21, 28): sent as [20, 28).
  CHECK(kernel_ranges(s, chunks, mask) == std::vector<ChunkRange>{{20, 8}});
  // Rows 1 ([7, 14)) and 12 ([84, 91)) are 70 elements apart, less than the smallest gap worth
  // a part: one range, [6, 92).
  mask.assign(16, 0);
  mask[1] = mask[12] = 1;
  CHECK(kernel_ranges(s, chunks, mask) == std::vector<ChunkRange>{{6, 86}});
}

TEST_CASE("a model that does not start with a dense layer on the input has no sparse exchange") {
  ModelSpec m = model({layer(LayerType::kReLU), layer(LayerType::kFlatten), layer(LayerType::kDense, 3)});
  const ParamLayout layout = make_param_layout(m);
  CHECK_FALSE(InputSparsity(m, layout, plan_chunks(layout, 1)).active());
}
