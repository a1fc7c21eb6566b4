#include "common/data/table_split.h"

#include <algorithm>
#include <cstring>

#include "common/base/error.h"
#include "common/data/stored_examples.h"
#include "common/data/tokenizer.h"

namespace pstrain {
namespace {

void check_table(const Split& split) {
  if (!split.table || split.dtype != Dtype::kFloat32 || split.shape.size() != 1) {
    throw DataError("dataset '" + split.dataset + "': the split is not a stored table");
  }
}

// Rows read at a time from a stored table (256 KiB of a 16-column table).
constexpr uint32_t kChunkRows = 4096;

// One pass over the split's rows in example order, in chunks.
RowPass rows_of(const Split& split) {
  return [&split](const RowChunk& chunk) {
    const size_t width = split.example_size();
    if (!split.stored) {
      chunk({reinterpret_cast<const float*>(split.examples.data()), size_t{split.size} * width}, split.size);
      return;
    }
    std::vector<uint32_t> ids;
    std::vector<float> values;
    for (uint32_t first = 0; first < split.size; first += kChunkRows) {
      const uint32_t n = std::min(kChunkRows, split.size - first);
      ids.resize(n);
      for (uint32_t i = 0; i < n; ++i) ids[i] = first + i;
      values.resize(size_t{n} * width);
      split.read_examples(ids, reinterpret_cast<uint8_t*>(values.data()));
      chunk(values, n);
    }
  };
}

// A text split's tokenizer, fitted by one pass over its documents in example order (tf_idf: two).
FittedPreprocessing fit_tokenizer_on_split(const PreprocessingSpec& spec, const Split& train) {
  if (!spec.text) {
    throw DataError("dataset '" + train.dataset + "' holds text documents: the job's preprocessing.text says how they "
                    "become features (docs/JOB-SPEC.md)");
  }
  TokenizerFit fit(*spec.text);
  std::vector<uint8_t> document;
  const auto pass = [&](auto&& add) {
    for (uint32_t i = 0; i < train.size; ++i) {
      train.stored->read_document(i, document);
      add(std::string_view(reinterpret_cast<const char*>(document.data()), document.size()));
    }
  };
  pass([&](std::string_view text) { fit.add(text); });
  if (fit.needs_second_pass()) pass([&](std::string_view text) { fit.add_second(text); });
  FittedPreprocessing fitted;
  fitted.class_names = train.class_names;
  fitted.text = std::make_shared<const FittedTokenizer>(fit.finish());
  return fitted;
}

// A split of `raw`'s examples as `width` float32 features: its labels or targets, no examples yet.
Split features_of(const Split& raw, uint32_t width) {
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
  out.shape = {static_cast<int64_t>(width)};
  return out;
}

// A text split tokenized as it is read (the workers too: the store carries the tokenizer).
Split tokenize_split(const Split& raw, const FittedPreprocessing& fitted) {
  if (!raw.stored || !fitted.text) throw DataError("dataset '" + raw.dataset + "': documents need a fitted tokenizer");
  Split out = features_of(raw, fitted.width());
  out.class_names = raw.class_names;
  out.stored = std::make_shared<const StoredExamples>(raw.stored, std::make_shared<const FittedPreprocessing>(fitted));
  if (raw.store) {
    auto store = std::make_shared<Split::StoredShards>(*raw.store);
    store->preprocessing = fitted_to_json(fitted);
    out.store = std::move(store);
  }
  return out;
}

// The cells of a table split's text column `name` (DataError when the split does not hold them).
const std::shared_ptr<const StoredExamples>& cells_of(const Split& split, const std::string& name) {
  for (const Split::TextCells& t : split.text_cells) {
    if (t.column == name && t.cells) return t.cells;
  }
  throw DataError("dataset '" + split.dataset + "': text column '" + name + "' is tokenized by the job, but the split does not "
                  "hold its cells (text columns are read from a table uploaded to the cluster's dataset store)");
}

// The table's text columns that the spec tokenizes, each fitted by a pass over its training cells
// in example order (tf_idf: two), and taken out of other_columns.
void fit_text_columns(const PreprocessingSpec& spec, const Split& train, FittedPreprocessing& fitted) {
  std::vector<uint8_t> cell;
  for (const TableColumn* c : train.table->text_columns()) {
    const TokenizerSpec* steps = text_steps(spec, c->name);
    if (steps == nullptr) continue;
    const StoredExamples& cells = *cells_of(train, c->name);
    TokenizerFit fit(*steps);
    const auto pass = [&](auto&& add) {
      for (uint32_t i = 0; i < train.size; ++i) {
        cells.read_document(i, cell);
        add(std::string_view(reinterpret_cast<const char*>(cell.data()), cell.size()));
      }
    };
    pass([&](std::string_view text) { fit.add(text); });
    if (fit.needs_second_pass()) pass([&](std::string_view text) { fit.add_second(text); });
    fitted.text_columns.push_back({c->name, std::make_shared<const FittedTokenizer>(fit.finish())});
    std::erase(fitted.other_columns, c->name);
  }
}

}  // namespace

FittedPreprocessing fit_on_split(const PreprocessingSpec& spec, const Split& train) {
  if (train.documents) return fit_tokenizer_on_split(spec, train);
  check_table(train);
  FittedPreprocessing fitted = fit_preprocessing(spec, *train.table, *train.table, rows_of(train));
  fit_text_columns(spec, train, fitted);
  return fitted;
}

Split preprocess_split(const Split& raw, const FittedPreprocessing& fitted) {
  if (raw.documents) return tokenize_split(raw, fitted);
  check_table(raw);
  const uint32_t width = fitted.width();
  Split out = features_of(raw, width);
  if (raw.stored) {  // preprocessed as read: no copy of the table
    std::vector<std::shared_ptr<const StoredExamples>> texts;
    for (const FittedTextColumn& t : fitted.text_columns) texts.push_back(cells_of(raw, t.name));
    out.stored = std::make_shared<const StoredExamples>(raw.stored, std::make_shared<const FittedPreprocessing>(fitted), *raw.table,
                                                        std::move(texts));
    if (raw.store) {  // workers that see the shards read and preprocess the rows themselves
      auto store = std::make_shared<Split::StoredShards>(*raw.store);
      store->preprocessing = fitted_to_json(fitted);
      store->table = table_to_json(*raw.table);
      out.store = std::move(store);
    }
    return out;
  }
  if (!fitted.text_columns.empty()) cells_of(raw, fitted.text_columns[0].name);  // (throws: in memory, no cells)
  out.examples.resize(size_t{raw.size} * width * sizeof(float));
  apply_preprocessing(fitted, *raw.table, {reinterpret_cast<const float*>(raw.examples.data()), size_t{raw.size} * raw.example_size()},
                      raw.size, reinterpret_cast<float*>(out.examples.data()));
  return out;
}

PreparedTable prepare_table(const PreprocessingSpec& spec, const Split& train, const Split* validation, const Split& test) {
  PreparedTable p;
  auto fitted = std::make_shared<FittedPreprocessing>(fit_on_split(spec, train));
  p.train = std::make_shared<const Split>(preprocess_split(train, *fitted));
  if (validation != nullptr) p.validation = std::make_shared<const Split>(preprocess_split(*validation, *fitted));
  if (test.table || train.documents) {
    p.test = std::make_shared<const Split>(preprocess_split(test, *fitted));
  } else {
    // A test split uploaded as arrays (NPZ) beside a table: its values are the stored columns'
    // when the table has no categorical or id column (no codes to map).
    for (const TableColumn* c : train.table->stored_columns()) {
      if (c->type == ColumnType::kCategorical || c->type == ColumnType::kId) {
        throw DataError("dataset '" + train.dataset + "': the test split holds arrays but the train split is a table with a " +
                        column_type_name(c->type) + " column ('" + c->name + "'): upload the test split as a table too");
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
