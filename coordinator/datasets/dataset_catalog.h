// The coordinator's dataset catalog: every dataset a job may name, with what a user needs to know
// about it (input shape, dtype, classes, examples and per-class counts per split, files with
// sha256, source, creation time), and the one place that turns uploads into datasets.
//
// Three sources, one list:
// - builtin: the dataset table of common/data/dataset.h (mnist10k, fashion, fashion-mnist), IDX files
//   in the data directory or a Debian package's directory;
// - upload: made by PUT /v1/datasets/{name}/{split}; stored as a dataset directory (below);
// - directory: a dataset directory a user dropped into the data directory or the uploads directory.
// The data directory may be read-only (a container's volume); uploads go to the uploads directory
// (the coordinator's --datasets-dir, by default the data directory).
//
// A dataset directory is `<dir>/<name>/` holding `dataset.json` (common/data/dataset_manifest.h)
// and the files it names. Uploads are converted to the catalog's stored form, the dataset store's
// shard files per split (common/data/shard_file.h: the examples as uploaded, uint8 or float32,
// with int32 labels or float32 targets, 64 MiB a shard at most), which any process that sees the
// directory can read example by example. (Dropped-in directories may hold .npy pairs, NPZ, CSV,
// JSON Lines or IDX files: read as they are.)
//
// Durability and visibility: an upload is parsed and converted into a staging directory
// (`<uploads dir>/.uploads/`), then moved in by rename and the manifest replaced by rename, so a
// dataset or split is visible only once complete and valid, and a crash leaves either the old or
// the new dataset (the staging directory is emptied at start-up). The statistics (counts, hashes)
// are kept in RocksDB under `dataset/<name>` with a fingerprint of the files (names, sizes, mtimes),
// so a restart re-reads only datasets whose files changed.
//
// Threads: the catalog's own TaskThread does all file work (indexing, converting uploads,
// splitting); the HTTP thread and the event loop only read the in-memory records, under a mutex.
// Results of long work come back through callbacks, called on the catalog's thread.
//
// Thread rules: thread-safe. Ownership: owns its thread; borrows the KvStore (may be null: nothing
// persisted), which must outlive it.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/data/dataset.h"
#include "common/data/dataset_formats.h"
#include "common/data/dataset_manifest.h"
#include "common/data/image_decode.h"
#include "common/data/shard_file.h"
#include "common/storage/kv_store.h"
#include "common/base/task_thread.h"
#include "common/base/mutex.h"
#include "coordinator/base/service_error.h"

namespace pstrain {

struct DatasetFileInfo {
  std::string name;  // file name within the dataset's directory
  uint64_t bytes = 0;
  std::string sha256;  // lowercase hex
};

struct DatasetSplitInfo {
  uint64_t examples = 0;
  uint32_t target_width = 0;  // regression: float targets per example (0: class labels)
  std::vector<uint64_t> class_counts;  // examples per class (num_classes entries)
  std::vector<DatasetFileInfo> files;
  std::optional<TableSchema> table;  // a table's columns and this split's profile (CSV uploads)
  std::optional<TextProfile> text;   // a text split's profile (its examples are documents)
};

struct DatasetRecord {
  std::string name;
  std::string source;  // "builtin", "upload" or "directory"
  std::vector<uint32_t> shape;  // one example: {d} or {h, w, c}
  ParsedExamples::Dtype dtype = ParsedExamples::Dtype::kUint8;
  uint32_t num_classes = 0;   // 0 for a regression dataset
  uint32_t target_width = 0;  // regression: float targets per example (0: class labels)
  std::vector<std::string> class_names;  // a class-folder dataset's classes (a table's: table())
  int64_t created_ms = 0;
  std::map<std::string, DatasetSplitInfo> splits;  // "train", "test"
  std::string error;        // why the dataset cannot be used ("" when it can), e.g. missing files
  std::string dir;          // its dataset directory ("" for a built-in one); not shown to users
  std::string fingerprint;  // of the files the record describes (sizes and mtimes)
  uint64_t generation = 0;  // changes whenever the dataset's files do (replaced, split)
  // Listed at start-up before its files were read (what is known then: a built-in dataset's
  // table entry, or the record stored last time); the start-up indexing replaces it.
  bool indexing = false;

  bool usable() const { return !indexing && error.empty() && splits.count("train") != 0; }
  // Its examples are text documents (shape [], dtype "string"): a job tokenizes them (preprocessing.text).
  bool text() const {
    return std::any_of(splits.begin(), splits.end(), [](const auto& s) { return s.second.text.has_value(); });
  }
  // A table's schema (its train split's, else any split's), or null for arrays and images.
  const TableSchema* table() const {
    for (const char* name : {"train", "test"}) {
      if (const auto it = splits.find(name); it != splits.end() && it->second.table) return &*it->second.table;
    }
    return nullptr;
  }
};

// What went wrong with a catalog operation, as the REST layer answers it.
using CatalogError = ServiceError;

// A dataset's JSON form (GET /v1/datasets/{name}): its record and the jobs that use it.
std::string dataset_json(const DatasetRecord& record, const std::vector<std::string>& used_by);

class DatasetCatalog {
 public:
  struct Options {
    std::string data_dir;     // built-in datasets' files and dropped-in dataset directories (may be read-only)
    std::string uploads_dir;  // where uploads are stored (and dropped-in directories read too); "": data_dir
    uint64_t max_upload_bytes = uint64_t{4} << 30;  // one uploaded file
    ExampleLimits limits;                           // what one split may hold
    ShardLimits shards;                             // each shard file of a stored split
  };
  // Returns the ids of unfinished jobs that use a dataset (for DELETE and replace: 409).
  using JobsUsing = std::function<std::vector<std::string>(const std::string& dataset)>;

  // Lists the data directory and indexes what changed since the records in `kv` were made (on
  // the catalog's thread: the constructor returns at once; wait_indexed() waits).
  DatasetCatalog(Options options, KvStore& kv, JobsUsing jobs_using);
  ~DatasetCatalog();
  DatasetCatalog(const DatasetCatalog&) = delete;
  DatasetCatalog& operator=(const DatasetCatalog&) = delete;

  const Options& options() const { return options_; }

  // Reads: the records as of now. From the first request on, every dataset known at start-up (the
  // built-in ones, those stored last time) is listed, with `indexing` set until its files are read.
  std::vector<DatasetRecord> list() const;
  std::optional<DatasetRecord> get(const std::string& name) const;
  // The DatasetInfo a job spec is checked against at submit (shape and class count), or an
  // error naming why the dataset cannot be used (unknown, not indexed, files missing).
  std::optional<DatasetInfo> info(const std::string& name, std::string* why) const;

  // Runs `submit` while no DELETE or replacement of `name` can happen, after checking that the
  // dataset is usable (else returns false with *why set and does not run it): a job and a
  // deletion cannot cross.
  bool with_dataset(const std::string& name, std::string* why, const std::function<void(const DatasetInfo&)>& submit);

  // Loads one split for training (any thread; blocking: call it off the event loop; waits for the
  // start-up indexing). Throws DataError naming the dataset and file.
  Split load(const std::string& name, SplitKind kind) const;
  // The dataset's generation now (0 if unknown): a DataService cache keyed by it never serves
  // the files of a replaced dataset.
  uint64_t generation(const std::string& name) const;

  // --- Uploads (the HTTP layer streams a body to a file first; see HttpServer) ---
  enum class UploadPart { kWhole, kImages, kLabels };  // CSV/NPZ, or one file of an IDX pair
  // kArchive: a .zip or .tar, of class folders of images (image_folders.h), or a zip holding
  // x.npy and y.npy (an .npz sent as application/zip).
  enum class UploadFormat { kCsv, kNpz, kIdx, kJsonl, kArchive };
  struct Upload {
    std::string name, split;  // "train" | "test"
    UploadPart part = UploadPart::kWhole;
    UploadFormat format = UploadFormat::kCsv;
    std::string label_column = "label";  // CSV
    bool regression = false;             // CSV: the label column is float targets (?task=regression)
    char separator = 0;                  // CSV: ',', ';' or '\t' (?sep=); 0: detected
    std::map<std::string, ColumnType> types;  // CSV: column types given (?types=name:type,...)
    std::optional<std::vector<std::string>> missing;  // CSV: the missing-value cells (?missing=)
    uint32_t image_height = 0, image_width = 0;  // class folders: ?image_size= (0: the files' own size)
    ColorMode color_mode = ColorMode::kRgb;      // class folders: ?color_mode=
    bool replace = false;
    std::string body_path;  // the streamed body, in staging_dir(); the catalog deletes it
    uint64_t body_bytes = 0;
    std::string body_sha256;
  };
  struct UploadResult {
    std::optional<CatalogError> error;
    unsigned status = 201;   // 201 created, 200 replaced, 202 half of an IDX pair stored
    std::string waiting_for; // 202: the other part of the pair ("images" or "labels")
    std::optional<DatasetRecord> record;
  };
  // Checks that can be made before the body is read (name, split, an existing split without
  // replace, an upload of the same split in progress): nullopt when the upload may proceed.
  std::optional<CatalogError> precheck(const std::string& name, const std::string& split, bool replace) const;
  // Where a body being streamed should go (a fresh path in the staging directory).
  std::string new_staging_path();
  // Converts and stores an upload on the catalog's thread; `done` is called there.
  void ingest(Upload upload, std::function<void(UploadResult)> done);

  // Stratified split of `name`'s train split into train and test (the dataset must have no test
  // split). `done` is called on the catalog's thread.
  struct SplitResult {
    std::optional<CatalogError> error;
    std::optional<DatasetRecord> record;
  };
  void split(const std::string& name, double test_fraction, uint64_t seed, std::function<void(SplitResult)> done);

  // Deletes an uploaded or dropped-in dataset and its directory. Errors: 404 unknown, 409
  // built-in or in use by a job (named).
  // Blocking (renames, a synced RocksDB write): call it off any event loop, or use the form below.
  std::optional<CatalogError> erase(const std::string& name);
  // The same on the catalog's thread; `done` is called there.
  void erase(const std::string& name, std::function<void(std::optional<CatalogError>)> done);

  // Returns once everything posted to the catalog's thread before the call has run (tests).
  void wait_idle();

 private:
  void index_all();  // catalog thread
  std::optional<DatasetRecord> index_directory(const std::string& name, const std::string& source);
  UploadResult ingest_now(Upload& upload);
  SplitResult split_now(const std::string& name, double test_fraction, uint64_t seed);
  void commit(DatasetRecord record);  // stores and publishes a record (catalog thread)
  std::string dataset_dir(const std::string& name) const;  // an existing dataset's, else a new upload's
  const std::string& uploads_dir() const { return options_.uploads_dir.empty() ? options_.data_dir : options_.uploads_dir; }
  std::optional<DatasetRecord> index_directory_at(const std::string& name, const std::string& dir);

  Options options_;
  KvStore& kv_;
  JobsUsing jobs_using_;
  mutable Mutex mutex_;
  std::map<std::string, DatasetRecord> records_ PS_GUARDED_BY(mutex_);
  std::set<std::string> busy_ PS_GUARDED_BY(mutex_);  // "name/split" being uploaded
  uint64_t next_generation_ PS_GUARDED_BY(mutex_) = 1;
  uint64_t next_staging_ PS_GUARDED_BY(mutex_) = 0;
  bool indexed_ PS_GUARDED_BY(mutex_) = false;  // the start-up indexing is done
  mutable std::condition_variable_any indexed_changed_;
  // Held while a job is submitted on a dataset, and while one is deleted or replaced: it orders
  // those against each other and guards no member (the records stay under mutex_).
  Mutex use_mutex_;
  TaskThread thread_;     // last: destroyed (joined) first
};

}  // namespace pstrain
