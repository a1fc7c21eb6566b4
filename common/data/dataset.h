// Datasets as the engine sees them: a Split (one split of a dataset, in memory), made from the
// named IDX datasets (mnist10k, fashion, fashion-mnist) by load_split, or from any parsed upload
// (dataset_formats.h) by make_split.
//
// A split keeps its examples as stored (uint8 images as bytes, or float32 values), in memory or,
// for a split stored as shards, on disk (stored_examples.h: only its labels are loaded), and
// converts to the engine's floats only when a batch is gathered: uint8 scaled by 1/255 into [0, 1] (a quarter
// of the memory, and the conversion is free next to the math), float32 as is.
//
// Where the IDX files are: in the data directory (flag --data-dir), or in `<data dir>/<subdir>`
// for a dataset that names a subdirectory. A dataset that a Debian package ships (fashion-mnist,
// from `dataset-fashion-mnist`) also names the package's directory, read when the data directory
// holds no copy: deploy/setup.sh installs the package, so it needs no download.
//
// Thread rules: a loaded Split is immutable; any number of threads may gather from it. The free
// functions keep no state: any thread may call them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/data/example_types.h"
#include "common/data/table_schema.h"
#include "common/engine/param_layout.h"

namespace pstrain {

struct ParsedExamples;
class StoredExamples;

enum class SplitKind { kTrain, kTest };

struct Split {
  std::string dataset;
  SplitKind kind = SplitKind::kTrain;
  uint32_t size = 0;              // number of examples
  Shape shape;                    // one example: {d} features or {h, w, c} (IDX images: {h, w, 1})
  Dtype dtype = Dtype::kUint8;    // of `examples`
  uint32_t num_classes = 0;       // labels are in [0, num_classes), num_classes <= kMaxClasses; 0: regression
  // size * example_size() values of `dtype`, little-endian, example-major. From operator new, so
  // aligned for float. Empty when `stored` holds them.
  std::vector<uint8_t> examples;
  // The examples left on disk, read on demand (a split stored as shards, or a subset of one);
  // null when `examples` holds them. Read them through read_examples().
  std::shared_ptr<const StoredExamples> stored;
  std::vector<int32_t> labels;    // size (classification; empty for regression)
  // Regression: `target_width` float targets per example (size * target_width), example after
  // example; empty (and target_width 0) for classification.
  std::vector<float> targets;
  uint32_t target_width = 0;
  // The SHA-256 (hex) of the files it was loaded from, as "file=hex" entries separated by spaces
  // (the dataset catalog's record of them; empty when the loader does not know them).
  std::string sha256;
  // A table's schema and this split's profile (its categorical values are codes of this split's
  // categories); null for arrays and images. A job trains on the preprocessed form
  // (preprocessing.h), a split of its own without a table.
  std::shared_ptr<const TableSchema> table;
  // A text split (class folders of documents, text_folders.h): `stored` holds one UTF-8 document
  // an example (StoredExamples::read_document), `shape` is empty. A job trains on the tokenized
  // form (table_split.h: the spec's preprocessing.text fitted on its training documents).
  bool documents = false;
  // A stored table's text columns: each column's cells as documents (row i's cell is document i,
  // read as `stored` is numbered; text_folders.h TextColumnWriter), in the table's order. A job
  // tokenizes those its preprocessing says (preprocessing.h FittedTextColumn).
  struct TextCells {
    std::string column;
    std::shared_ptr<const StoredExamples> cells;
  };
  std::vector<TextCells> text_cells;
  // A class-folder dataset's class names (class i's at i; dataset_manifest.h "class_names"), which
  // a job's model files keep so that predictions name classes; empty otherwise.
  std::vector<std::string> class_names;
  // Where the examples are stored as shards (shard_file.h), for a split loaded as it is stored:
  // a worker that sees the directory reads its examples from there itself. Null for other
  // formats and splits made from another (a hold-out). A stored table preprocessed for a job
  // keeps its raw rows' shards here with the steps that make its examples from them.
  struct StoredShards {
    std::string dir;                 // absolute
    std::vector<std::string> files;  // in the split's order
    std::vector<uint32_t> crcs;      // each shard's CRC-32C, from its header when loaded
    // A table's rows preprocessed as they are read (table_split.h): the fitted steps
    // (fitted_to_json) and the schema whose category codes the rows hold (table_to_json); both
    // empty for examples as stored.
    std::string preprocessing, table;
    // The table's text columns' shards (Split::text_cells), for a worker to read the cells its
    // preprocessing tokenizes: each column's name, shards and their CRC-32C.
    struct TextColumn {
      std::string column;
      std::vector<std::string> files;
      std::vector<uint32_t> crcs;
    };
    std::vector<TextColumn> text_columns;
    // A validation hold-out's part of the stored split (validation_split.h): the workers cut the
    // same parts from the shards' labels, with the same fraction and seed, out of the
    // `stored_examples` the shards hold. fraction 0: the whole split as stored.
    struct HoldOut {
      double fraction = 0;
      uint64_t seed = 0;
      bool validation = false;  // the held-out part; false: the training part
      uint64_t stored_examples = 0;
    } hold_out;
  };
  std::shared_ptr<const StoredShards> store;

  // Values per example (the product of `shape`).
  uint32_t example_size() const { return static_cast<uint32_t>(num_elements(shape)); }
  size_t example_bytes() const { return size_t{example_size()} * dtype_size(dtype); }
  // The shape of one example as loaded.
  const Shape& example_shape() const { return shape; }

  bool regression() const { return target_width > 0; }
  // Target values per example as the engine takes them (nn/loss.h): the class index (1), or the
  // regression targets (target_width).
  uint32_t target_size() const { return regression() ? target_width : 1; }

  // The bytes of the examples `indices`, one after another into `out` (indices.size() x
  // example_bytes()), from memory or from the store. Throws DataError naming a shard that cannot
  // be read.
  void read_examples(std::span<const uint32_t> indices, uint8_t* out) const;

  // Writes the examples `indices` as columns of a column-major float matrix (example_size() rows,
  // indices.size() columns; uint8 values scaled by 1/255, float32 ones copied) and their targets
  // (target_size() floats each: the label as a float, or the regression targets).
  void gather(std::span<const uint32_t> indices, float* columns, float* out_targets) const;
  // The same with integer labels (classification splits only).
  void gather(std::span<const uint32_t> indices, float* columns, int32_t* out_labels) const;
};

// Where a split comes from, given the dataset's name: load_split on a data directory
// (idx_split_loader), or a dataset catalog. Owners call it off their event loop; it may be called
// from any thread and throws DataError naming the dataset or file for any defect.
using SplitLoader = std::function<Split(const std::string& dataset, SplitKind kind)>;

// Makes a split of `dataset` from parsed examples, taking their storage. Throws DataError naming
// the dataset if they are inconsistent: a shape other than {d} or {h, w, c} with positive sizes,
// bytes that do not hold size() examples of that shape, more than 2^32 - 1 examples, classes
// outside [1, kMaxClasses], a label outside [0, classes), or a regression target that is not
// finite.
Split make_split(const std::string& dataset, SplitKind kind, ParsedExamples&& parsed);

// Where Debian's `dataset-fashion-mnist` package puts the official Fashion-MNIST files
// (train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz,
// t10k-labels-idx1-ubyte.gz): the fallback of the `fashion-mnist` dataset.
inline constexpr std::string_view kDebianFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// The datasets the project knows, and the files behind them. A split's files are
// `<prefix>-images-idx3-ubyte` and `<prefix>-labels-idx1-ubyte`, each gzip'd (`.gz`) or plain.
//
// A dataset describes itself: the shape of one example and the number of classes. For the known
// datasets both come from this table, so a job spec is checked against them at submit without
// loading anything; loading then takes the image size from the files (an IDX image is
// [rows, cols, 1]) and the class count from the table, rejecting labels outside it. The class
// count is fixed rather than computed from the labels (max + 1) so that it does not depend on
// which labels a split happens to contain, and so that submit and job start agree.
struct DatasetInfo {
  std::string name;          // "mnist10k"
  std::string subdir;        // directory under the data directory holding the files ("": none)
  std::string train_prefix;  // "mnist10k-train" -> mnist10k-train-images-idx3-ubyte.gz
  std::string test_prefix;   // "mnist10k-test"
  uint32_t num_classes;      // labels are in [0, num_classes); 0 for a regression dataset
  std::string system_dir;    // read when the data directory has no copy ("": no fallback)
  std::string install_hint;  // what to run when the files are missing everywhere
  // One example: [height, width, channels] for images. Empty: known only once the files are
  // loaded (the submit-time check of the input shape is then skipped; job start still checks).
  Shape example_shape = {};
  // Regression datasets: float targets per example (0: class labels).
  uint32_t target_width = 0;
  // A table (a CSV upload): its train split's schema and profile; the input shape a job sees is
  // then the preprocessed width (preprocessing.h). Null otherwise.
  std::shared_ptr<const TableSchema> table;
  // Text documents (class folders of .txt): the input a job sees is its tokenizer's width
  // (preprocessing.text, tokenizer.h).
  bool text = false;
};
const std::vector<DatasetInfo>& known_datasets();
bool is_known_dataset(const std::string& name);
// The known dataset called `name`, or nullptr.
const DatasetInfo* find_dataset(const std::string& name);
// The known names, comma-separated ("mnist10k, fashion, fashion-mnist"), for error messages.
std::string known_dataset_names();

// Loads one split of a named dataset from `data_dir` (or its fallback directory, see DatasetInfo),
// accepting `<file>.gz` or the plain `<file>`. Throws DataError naming the file for any defect,
// including an unknown dataset name (the message lists the known ones), label/image count
// mismatches and labels out of range.
Split load_split(const std::string& data_dir, const std::string& dataset, SplitKind kind);

// The files a split of `info` is read from: {images, labels}, each `.gz` or plain, from the data
// directory or the fallback (as load_split picks them). Throws DataError if either is missing.
std::pair<std::string, std::string> split_files(const std::string& data_dir, const DatasetInfo& info, SplitKind kind);

// The same for a dataset described by `info` (known or not): what load_split does after the lookup.
Split load_split(const std::string& data_dir, const DatasetInfo& info, SplitKind kind);

// load_split on `data_dir`, as a SplitLoader: what the coordinator and the trainer use by default.
SplitLoader idx_split_loader(std::string data_dir);

}  // namespace pstrain
