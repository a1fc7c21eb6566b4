#include "common/data/stored_examples.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "common/base/error.h"
#include "common/base/mutex.h"
#include "common/data/shard_file.h"
#include "common/data/store_reader.h"
#include "common/data/tokenizer.h"

namespace pstrain {

struct StoredExamples::Shared {
  Shared(const std::string& dir, const std::vector<std::string>& files, const std::vector<uint32_t>& crcs)
      : reader(dir, files, 8, crcs) {}
  Mutex mutex;
  StoreReader reader PS_GUARDED_BY(mutex);
  std::vector<uint64_t> ids PS_GUARDED_BY(mutex);  // scratch
};

StoredExamples::StoredExamples(const std::string& dir, const std::vector<std::string>& files,
                               const std::vector<uint32_t>& crcs)
    : shared_(std::make_shared<Shared>(dir, files, crcs)) {
  MutexLock lock(shared_->mutex);
  documents_ = shared_->reader.layout().variable;
  example_bytes_ = documents_ ? 0 : shared_->reader.layout().example_bytes;
}

struct StoredExamples::Preprocessed {
  std::shared_ptr<const StoredExamples> raw;
  std::shared_ptr<const FittedPreprocessing> fitted;
  CategorySlots slots;  // the schema's category codes' slots and fingerprints
  std::vector<std::shared_ptr<const StoredExamples>> texts;  // fitted->text_columns' cells
};

StoredExamples::StoredExamples(const StoredExamples& of, const std::vector<uint32_t>& ids)
    : shared_(of.shared_), documents_(of.documents_), example_bytes_(of.example_bytes_) {
  if (of.preprocess_) {  // the subset of the raw rows, preprocessed the same way
    auto view = std::make_shared<Preprocessed>(*of.preprocess_);
    view->raw = std::make_shared<const StoredExamples>(*of.preprocess_->raw, ids);
    for (auto& cells : view->texts) cells = std::make_shared<const StoredExamples>(*cells, ids);
    preprocess_ = std::move(view);
    return;
  }
  subset_ = true;
  ids_.reserve(ids.size());
  for (uint32_t id : ids) ids_.push_back(of.subset_ ? of.ids_.at(id) : id);
}

StoredExamples::StoredExamples(std::shared_ptr<const StoredExamples> raw, std::shared_ptr<const FittedPreprocessing> fitted,
                               const TableSchema& schema, std::vector<std::shared_ptr<const StoredExamples>> texts) {
  if (raw->example_bytes() != schema.row_width() * sizeof(float)) {
    throw DataError("a stored table's rows are " + std::to_string(raw->example_bytes()) + " bytes; its schema has " +
                    std::to_string(schema.row_width()) + " stored float32 values");
  }
  if (texts.size() != fitted->text_columns.size()) {
    throw DataError("a stored table's view has " + std::to_string(texts.size()) + " text columns' cells for " +
                    std::to_string(fitted->text_columns.size()) + " tokenized text columns");
  }
  example_bytes_ = size_t{fitted->width()} * sizeof(float);
  auto view = std::make_shared<Preprocessed>();
  view->slots = category_slots(*fitted, schema);
  view->texts = std::move(texts);
  view->raw = std::move(raw);
  view->fitted = std::move(fitted);
  preprocess_ = std::move(view);
}

StoredExamples::StoredExamples(std::shared_ptr<const StoredExamples> documents, std::shared_ptr<const FittedPreprocessing> fitted) {
  if (!documents->documents() || !fitted->text) throw DataError("a tokenized view needs documents and a fitted tokenizer");
  example_bytes_ = size_t{fitted->width()} * sizeof(float);
  auto view = std::make_shared<Preprocessed>();
  view->raw = std::move(documents);
  view->fitted = std::move(fitted);
  preprocess_ = std::move(view);
}

void StoredExamples::read_document(uint32_t index, std::vector<uint8_t>& out) const {
  if (!documents_) throw DataError("the split holds arrays, not documents");
  MutexLock lock(shared_->mutex);
  shared_->reader.read(subset_ ? ids_.at(index) : index, out);
}

uint64_t StoredExamples::size() const {
  if (preprocess_) return preprocess_->raw->size();
  if (subset_) return ids_.size();
  MutexLock lock(shared_->mutex);
  return shared_->reader.size();
}

void StoredExamples::read(std::span<const uint32_t> indices, uint8_t* out) const {
  if (preprocess_ && preprocess_->fitted->text) {  // documents, tokenized one by one
    const Preprocessed& p = *preprocess_;
    const FittedTokenizer& tokenizer = *p.fitted->text;
    std::vector<uint8_t> document;
    std::vector<float> features(tokenizer.spec.width());  // (out need not be aligned for float)
    for (size_t i = 0; i < indices.size(); ++i) {
      p.raw->read_document(indices[i], document);
      tokenizer.apply(std::string_view(reinterpret_cast<const char*>(document.data()), document.size()), features.data());
      std::memcpy(out + i * example_bytes_, features.data(), example_bytes_);
    }
    return;
  }
  if (preprocess_) {
    const Preprocessed& p = *preprocess_;
    std::vector<float> rows(indices.size() * p.raw->example_bytes() / sizeof(float));
    p.raw->read(indices, reinterpret_cast<uint8_t*>(rows.data()));
    std::vector<float> features(indices.size() * p.fitted->width());  // (out need not be aligned for float)
    apply_preprocessing(*p.fitted, p.slots, rows, indices.size(), features.data());
    std::vector<uint8_t> cell;
    for (size_t k = 0; k < p.texts.size(); ++k) {
      for (size_t i = 0; i < indices.size(); ++i) {
        p.texts[k]->read_document(indices[i], cell);
        apply_text_cell(*p.fitted, k, std::string_view(reinterpret_cast<const char*>(cell.data()), cell.size()),
                        features.data() + i * p.fitted->width());
      }
    }
    std::memcpy(out, features.data(), features.size() * sizeof(float));
    return;
  }
  if (documents_) throw DataError("a text split's documents are read one by one (read_document), not as arrays");
  MutexLock lock(shared_->mutex);
  std::vector<uint64_t>& ids = shared_->ids;
  ids.resize(indices.size());
  for (size_t i = 0; i < indices.size(); ++i) ids[i] = subset_ ? ids_.at(indices[i]) : indices[i];
  shared_->reader.read_examples(ids, out);
}

Split load_stored_split(const std::string& dir, const std::vector<std::string>& files, const std::vector<uint32_t>& shape,
                        Dtype dtype, const std::string& name, SplitKind kind) {
  const std::string where = "dataset '" + name + "' (" + (kind == SplitKind::kTrain ? "train" : "test") + " split)";
  Split split;
  split.dataset = name;
  split.kind = kind;
  split.shape.assign(shape.begin(), shape.end());
  split.dtype = dtype;
  split.documents = shape.empty();
  if (!split.documents && split.shape.size() != 1 && split.shape.size() != 3) {
    throw DataError(where + ": an example is {d} or {h, w, c}");
  }
  auto store = std::make_shared<Split::StoredShards>();
  store->dir = std::filesystem::absolute(dir).lexically_normal().string();
  store->files = files;
  uint64_t size = 0;
  int32_t max_label = -1;
  bool regression = false;
  // The labels' room first (from the headers), so that loading them never holds two copies.
  uint64_t expected = 0, expected_values = 0;
  for (const std::string& file : files) {
    const ShardFile header(store->dir + "/" + file, ShardFile::Open::kHeader);
    expected += header.examples();
    expected_values += header.examples() * std::max<uint32_t>(1, header.layout().target_width);
  }
  if (expected <= std::numeric_limits<uint32_t>::max()) {
    const bool targets = !files.empty() && ShardFile(store->dir + "/" + files[0], ShardFile::Open::kHeader).layout().labels ==
                                               LabelKind::kTargets;
    if (targets) {
      split.targets.reserve(expected_values);
    } else {
      split.labels.reserve(expected);
    }
  }
  for (size_t s = 0; s < files.size(); ++s) {
    // The whole shard is opened for its labels: its examples are not read.
    const ShardFile shard(store->dir + "/" + files[s]);
    const ShardLayout& layout = shard.layout();
    if (split.documents && !layout.variable) throw DataError(shard.path() + ": its examples are arrays, not documents");
    if (!split.documents && (layout.variable || layout.dtype != dtype || layout.example_bytes != split.example_bytes())) {
      throw DataError(shard.path() + ": its examples are not the split's (" + std::string(dtype_name(dtype)) + ", " +
                      std::to_string(split.example_bytes()) + " bytes each)");
    }
    if (layout.labels == LabelKind::kNone) throw DataError(shard.path() + ": its examples have no labels");
    if (s > 0 && regression != (layout.labels == LabelKind::kTargets)) {
      throw DataError(shard.path() + ": its labels are not of the kind of the split's first shard");
    }
    regression = layout.labels == LabelKind::kTargets;
    if (regression) {
      if (s > 0 && layout.target_width != split.target_width) throw DataError(shard.path() + ": another target width");
      split.target_width = layout.target_width;
    }
    size += shard.examples();
    if (size > std::numeric_limits<uint32_t>::max()) throw DataError(where + ": more than 2^32 - 1 examples");
    for (uint64_t i = 0; i < shard.examples(); ++i) {
      if (regression) {
        const size_t at = split.targets.size();
        split.targets.resize(at + layout.target_width);
        shard.targets(i, split.targets.data() + at);
        for (size_t k = at; k < split.targets.size(); ++k) {
          if (!std::isfinite(split.targets[k])) {
            throw DataError(shard.path() + ": target " + std::to_string(split.targets[k]) + " of example " +
                            std::to_string(i) + " is not a finite number");
          }
        }
      } else {
        const int32_t label = shard.label(i);
        if (label < 0 || static_cast<uint32_t>(label) >= kMaxClasses) {
          throw DataError(shard.path() + ": label " + std::to_string(label) + " of example " + std::to_string(i) +
                          " is outside [0, " + std::to_string(kMaxClasses) + ")");
        }
        max_label = std::max(max_label, label);
        split.labels.push_back(label);
      }
    }
    store->crcs.push_back(shard.crc());
  }
  split.size = static_cast<uint32_t>(size);
  split.num_classes = regression ? 0 : std::max<uint32_t>(2, static_cast<uint32_t>(max_label + 1));
  split.stored = std::make_shared<const StoredExamples>(store->dir, store->files, store->crcs);
  split.store = std::move(store);
  return split;
}

void add_text_cells(const std::string& dir, const std::vector<std::pair<std::string, std::vector<std::string>>>& columns,
                    Split& split) {
  if (columns.empty()) return;
  auto store = split.store ? std::make_shared<Split::StoredShards>(*split.store) : std::make_shared<Split::StoredShards>();
  const std::string at = std::filesystem::absolute(dir).lexically_normal().string();
  for (const auto& [column, files] : columns) {
    Split::StoredShards::TextColumn shards{column, files, {}};
    for (const std::string& file : files) shards.crcs.push_back(ShardFile(at + "/" + file, ShardFile::Open::kHeader).crc());
    auto cells = std::make_shared<const StoredExamples>(at, files, shards.crcs);
    if (!cells->documents() || cells->size() != split.size) {
      throw DataError("dataset '" + split.dataset + "': text column '" + column + "' holds " + std::to_string(cells->size()) +
                      (cells->documents() ? " cells" : " arrays") + " for " + std::to_string(split.size) + " rows");
    }
    split.text_cells.push_back({column, std::move(cells)});
    store->text_columns.push_back(std::move(shards));
  }
  split.store = std::move(store);
}

}  // namespace pstrain
