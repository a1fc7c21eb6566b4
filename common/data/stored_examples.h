// A split's examples left in the dataset store (shard_file.h) and read on demand, so that a
// process that trains on or serves a split holds its labels (4 bytes an example) but not its
// examples: what the coordinator and pstrain-train load for a split stored as shards
// (docs/DESIGN-NOTES.md "Dataset store").
//
// load_stored_split() reads each shard's header and labels (never its examples) and returns a
// Split whose `stored` reads examples by id through one StoreReader (shards opened on demand,
// store_reader.h says how many stay open and what each holds). A subset (a validation hold-out) maps its ids onto the same
// reader. The shards' contents were checked against their CRC-32C when written; here each
// header is checked against the CRC recorded at load whenever a shard is opened, so a replaced
// file is an error naming it, never other examples.
//
// Thread rules: StoredExamples is immutable to its users and thread-safe: read() takes the
// shared reader's mutex (reads of different threads queue on it).
// A preprocessed view reads its raw rows into a buffer of the call's own (any thread) and applies
// the fitted steps there.
// Ownership: a StoredExamples shares its reader with its subsets and its preprocessed views.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/data/dataset.h"
#include "common/data/preprocessing.h"

namespace pstrain {

class StoredExamples {
 public:
  // Every example of the shards `files` in `dir` (their CRCs as recorded; empty: not checked).
  StoredExamples(const std::string& dir, const std::vector<std::string>& files, const std::vector<uint32_t>& crcs);
  // The examples `ids` (of `of`'s numbering) of `of`, as examples 0, 1, ... of a split of their own.
  StoredExamples(const StoredExamples& of, const std::vector<uint32_t>& ids);
  // The examples of `raw` (a table's stored rows: float32, one per stored column of `schema`)
  // preprocessed by `fitted` as they are read: fitted.width() floats an example. What a job on a
  // stored table trains on, without a preprocessed copy of the table (table_split.h). `texts`:
  // the cells of fitted.text_columns (the same order; numbered as `raw`), tokenized into their
  // features.
  StoredExamples(std::shared_ptr<const StoredExamples> raw, std::shared_ptr<const FittedPreprocessing> fitted,
                 const TableSchema& schema, std::vector<std::shared_ptr<const StoredExamples>> texts = {});
  // The documents of `documents` (a text split's shards) tokenized by `fitted` (its `text`) as
  // they are read: fitted.width() floats an example.
  StoredExamples(std::shared_ptr<const StoredExamples> documents, std::shared_ptr<const FittedPreprocessing> fitted);

  uint64_t size() const;
  uint64_t example_bytes() const { return example_bytes_; }  // 0: documents (variable size)
  bool documents() const { return documents_; }
  // The examples `indices`, one after another into `out` (indices.size() x example_bytes()).
  // Throws DataError naming the shard on an I/O error or a replaced file, or for documents.
  void read(std::span<const uint32_t> indices, uint8_t* out) const;
  // Document `index`'s bytes (a text split; `out` resized to them). Throws DataError as read().
  void read_document(uint32_t index, std::vector<uint8_t>& out) const;

 private:
  struct Shared;
  struct Preprocessed;
  std::shared_ptr<Shared> shared_;                // null for a preprocessed view
  std::shared_ptr<const Preprocessed> preprocess_;  // a preprocessed view's raw rows and steps
  bool subset_ = false;
  bool documents_ = false;  // variable-size examples: read_document only
  std::vector<uint32_t> ids_;  // a subset's ids in the store
  uint64_t example_bytes_ = 0;
};

// Split `kind` of dataset `name`, stored as the shards `files` of `dir` holding examples of
// `shape` and `dtype`: its labels (or regression targets) read, its examples left on disk
// (Split::stored), its shards' place and CRCs in Split::store; num_classes is its largest label
// + 1, at least 2 (0 for regression targets: the caller may raise it to the dataset's). An empty
// `shape` loads a text split: shards of documents (Split::documents). Throws
// DataError naming the shard or dataset for a shard of another layout, an unlabelled shard, a
// label outside [0, kMaxClasses), a target that is not finite, or more than 2^32 - 1 examples.
Split load_stored_split(const std::string& dir, const std::vector<std::string>& files, const std::vector<uint32_t>& shape,
                        Dtype dtype, const std::string& name, SplitKind kind);

// A stored table's text columns (`columns`: each column's name and its shards of cells in `dir`,
// in the table's order) added to `split` (loaded by load_stored_split): Split::text_cells to read
// them, and their shards and CRCs in Split::store for workers. Throws DataError naming the shard
// or column when a column's cells are not documents or not one per row.
void add_text_cells(const std::string& dir, const std::vector<std::pair<std::string, std::vector<std::string>>>& columns,
                    Split& split);

}  // namespace pstrain
