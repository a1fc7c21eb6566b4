#include "common/data/table_split.h"

#include <cstring>

#include "common/base/error.h"

namespace pstrain {
namespace {

// The split's values; a split whose examples stay on disk (an array test split beside a table)
// is read into `scratch` first: tables are prepared in memory.
std::span<const float> values_of(const Split& split, std::vector<uint8_t>& scratch) {
  if (!split.table || split.dtype != Dtype::kFloat32 || split.shape.size() != 1) {
    throw DataError("dataset '" + split.dataset + "': the split is not a stored table");
  }
  const uint8_t* bytes = split.examples.data();
  if (split.stored) {
    std::vector<uint32_t> all(split.size);
    for (uint32_t i = 0; i < split.size; ++i) all[i] = i;
    scratch.resize(all.size() * split.example_bytes());
    split.read_examples(all, scratch.data());
    bytes = scratch.data();
  }
  return {reinterpret_cast<const float*>(bytes), size_t{split.size} * split.example_size()};
}

}  // namespace

FittedPreprocessing fit_on_split(const PreprocessingSpec& spec, const Split& train) {
  std::vector<uint8_t> scratch;
  return fit_preprocessing(spec, *train.table, *train.table, values_of(train, scratch), train.size);
}

Split preprocess_split(const Split& raw, const FittedPreprocessing& fitted) {
  Split out;
  out.dataset = raw.dataset;
  out.kind = raw.kind;
  out.size = raw.size;
  out.dtype = Dtype::kFloat32;
  out.num_classes = raw.num_classes;
  out.labels = raw.labels;
  out.targets = raw.targets;
  out.target_width = raw.target_width;
  out.sha256 = raw.sha256;
  const uint32_t width = fitted.width();
  out.shape = {static_cast<int64_t>(width)};
  out.examples.resize(size_t{raw.size} * width * sizeof(float));
  std::vector<uint8_t> scratch;
  apply_preprocessing(fitted, *raw.table, values_of(raw, scratch), raw.size, reinterpret_cast<float*>(out.examples.data()));
  return out;
}

PreparedTable prepare_table(const PreprocessingSpec& spec, const Split& train, const Split* validation, const Split& test) {
  PreparedTable p;
  auto fitted = std::make_shared<FittedPreprocessing>(fit_on_split(spec, train));
  p.train = std::make_shared<const Split>(preprocess_split(train, *fitted));
  if (validation != nullptr) p.validation = std::make_shared<const Split>(preprocess_split(*validation, *fitted));
  if (test.table) {
    p.test = std::make_shared<const Split>(preprocess_split(test, *fitted));
  } else {
    // A test split uploaded as arrays (NPZ) beside a table: its values are the stored columns'
    // when the table has no categorical column (no codes to map).
    for (const TableColumn* c : train.table->stored_columns()) {
      if (c->type == ColumnType::kCategorical) {
        throw DataError("dataset '" + train.dataset + "': the test split holds arrays but the train split is a table with a categorical column ('" +
                        c->name + "'): upload the test split as a table too");
      }
    }
    Split as_table = test;
    as_table.table = train.table;
    p.test = std::make_shared<const Split>(preprocess_split(as_table, *fitted));
  }
  p.fitted = std::move(fitted);
  return p;
}

}  // namespace pstrain
