// A dataset split stored as shard files (docs/DESIGN-NOTES.md "Dataset store"): written once,
// streaming, in shards of bounded size; read example by example, from any process that sees the
// files, without loading a split whole.
//
// A shard file (little-endian):
//
//   header   64 bytes: "PSSHARD1", version, flags, examples, example bytes (fixed-size
//            examples) or 0 (variable-size), data bytes, dtype, label kind, target width, and the
//            CRC-32C of everything after the header
//   data     the examples, one after another (fixed-size: example i at i x example bytes)
//   offsets  variable-size examples only: examples + 1 uint64 offsets into data
//   labels   int32 class labels, or target_width float32 targets per example, or nothing
//
// Examples are fixed-size arrays (rows of a table, decoded images: `dtype` values) or
// variable-size blobs (encoded images, UTF-8 text). A writer holds at most one shard's offsets and
// labels in memory (ShardLimits); a reader one shard's offsets and labels per open file.
//
// Thread rules: ShardWriter single-owner. ShardFile is immutable once open: reads (pread) are
// safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/data/example_types.h"

namespace pstrain {

// What an example's label is: a class index, regression targets, or nothing (unlabelled data).
enum class LabelKind : uint8_t { kNone, kClass, kTargets };

// What every example of a split is, the same in each of its shards.
struct ShardLayout {
  bool variable = false;       // examples of varying size (encoded images, text)
  uint64_t example_bytes = 0;  // fixed-size examples: bytes each (a whole number of dtype values)
  Dtype dtype = Dtype::kUint8;  // of a fixed-size example's values (variable: bytes, kUint8)
  LabelKind labels = LabelKind::kClass;
  uint32_t target_width = 0;  // kTargets: float targets per example

  uint64_t label_bytes() const;  // per example
  bool operator==(const ShardLayout&) const = default;
};

// One written shard, as the split's record keeps it.
struct ShardInfo {
  std::string file;  // name within the split's directory
  uint64_t examples = 0;
  uint64_t bytes = 0;  // the file's size
  uint32_t crc = 0;    // CRC-32C of the file after its header
};

// Bounds of one shard: a shard is closed when either would be passed.
struct ShardLimits {
  uint64_t max_bytes = uint64_t{64} << 20;     // data bytes
  uint64_t max_examples = uint64_t{1} << 20;  // bounds the offsets and labels held in memory
};

// Writes a split's examples into `<dir>/<prefix>-00000.shard`, `-00001`, ... in the order given.
// Each shard is fsynced when closed; the directory's durability is the caller's (a staging
// directory renamed in: dataset_catalog.h). Throws DataError (naming the file) on an I/O error,
// an example of the wrong size, or a label the layout does not have.
class ShardWriter {
 public:
  ShardWriter(std::string dir, std::string prefix, ShardLayout layout, ShardLimits limits = {});
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // One example: its bytes, and its label (LabelKind::kClass), targets (kTargets: target_width
  // floats) or nothing (kNone).
  void add(const void* example, size_t bytes, int32_t label);
  void add(const void* example, size_t bytes, const float* targets);
  void add(const void* example, size_t bytes);

  // Labels that come after every example (the IDX and NumPy parsers give them last): the
  // examples with add_unlabelled(), then finish_labels() with their kind (the layout's is then
  // ignored) and all of them in order: int32 labels, target_width float32 targets per example,
  // or none. Shards are closed without their labels and sealed by finish_labels(); the labels
  // are the caller's memory, 4 bytes an example.
  void add_unlabelled(const void* example, size_t bytes);
  std::vector<ShardInfo> finish_labels(LabelKind kind, uint32_t target_width, const void* labels, size_t bytes);
  // Class labels after their examples, in pieces (never more than the examples added so far):
  // each shard closed so far is sealed as soon as its labels are in, so what waits is at most
  // the open shard's labels, whatever the split's size. End with finish_labels(kClass, 0,
  // nullptr, 0).
  void add_labels(const int32_t* labels, size_t n);

  uint64_t examples() const { return examples_; }
  // Closes the last shard; the shards written, in order.
  std::vector<ShardInfo> finish();

 private:
  // A shard closed without its labels (add_unlabelled), waiting for finish_labels().
  struct Unsealed {
    std::string path;
    uint64_t examples = 0, data_bytes = 0;
    uint32_t crc = 0;
  };
  void with_labels();  // the mode of add(): labels with their examples
  // Appends `n` bytes of labels to `shard` (closed without them) and seals it.
  void write_labels_and_seal(const Unsealed& shard, const uint8_t* labels, uint64_t n);
  void seal_waiting();  // the unsealed shards whose labels add_labels() gave
  void add_example(const void* example, size_t bytes);
  void open_shard();
  void close_shard();
  // Writes the header of the shard open at `fd` (closing it): then it is whole.
  void seal(int fd, const std::string& path, uint64_t examples, uint64_t data_bytes, uint32_t crc);
  void write(const void* data, size_t n);  // through buffer_, into the open shard
  void flush();

  const std::string dir_, prefix_;
  ShardLayout layout_;  // (its labels set by finish_labels when they come last)
  const ShardLimits limits_;
  std::vector<ShardInfo> shards_;
  uint64_t examples_ = 0;
  // The open shard.
  int fd_ = -1;
  std::string path_;
  uint64_t shard_examples_ = 0, data_bytes_ = 0;
  uint32_t crc_ = 0;
  std::vector<uint64_t> offsets_;  // variable-size examples
  std::vector<uint8_t> labels_;    // the labels section as it will be written
  std::vector<uint8_t> buffer_;    // writes gathered to 1 MiB
  enum class Labels { kUnknown, kWithExamples, kAfter } labels_mode_ = Labels::kUnknown;
  std::vector<Unsealed> unsealed_;
  // add_labels(): the labels given, those not yet written into a shard, and the shards sealed.
  uint64_t streamed_labels_ = 0;
  std::vector<uint8_t> pending_labels_;
  size_t sealed_unsealed_ = 0;  // unsealed_[0, this) are sealed
};

// One shard file, open for reading. The constructor checks the header against the file's size
// (never the CRC: verify() reads the whole file); a shard that does not check is a DataError
// naming the file.
class ShardFile {
 public:
  // kHeader: the header alone is read and checked (layout and counts; no example, label or
  // offset can be read), as a reader does to map a split's shards without holding their labels.
  // kRandom: for reading by id: the descriptor and the offsets (variable-size examples) are
  // kept, labels are read from the file when asked for, so an open shard of fixed-size examples
  // costs a descriptor. kWhole holds the labels too (what verify_after_data needs).
  enum class Open { kWhole, kHeader, kRandom };
  explicit ShardFile(std::string path, Open open = Open::kWhole);
  ~ShardFile();
  ShardFile(const ShardFile&) = delete;
  ShardFile& operator=(const ShardFile&) = delete;

  const std::string& path() const { return path_; }
  const ShardLayout& layout() const { return layout_; }
  uint64_t examples() const { return examples_; }
  uint64_t bytes() const { return file_bytes_; }
  uint32_t crc() const { return crc_; }

  // Example i's size and bytes (`out` is resized to it).
  uint64_t example_size(uint64_t i) const;
  void read(uint64_t i, std::vector<uint8_t>& out) const;
  // Fixed-size examples [first, first + count) into `out` (count x example_bytes), one read.
  void read_run(uint64_t first, uint64_t count, uint8_t* out) const;
  int32_t label(uint64_t i) const;                 // LabelKind::kClass
  void targets(uint64_t i, float* out) const;      // LabelKind::kTargets: target_width floats
  // The labels or targets of examples [first, first + count) as stored (label_bytes() each,
  // little-endian int32 or float32) into `out`, one read.
  void read_label_run(uint64_t first, uint64_t count, uint8_t* out) const;
  // Reads the file after the header and checks its CRC-32C; throws DataError naming the file.
  void verify() const;
  // The same check for a reader that has read the data section itself: `data_crc` is the
  // CRC-32C of the data it read (the offsets and labels it has are added here).
  void verify_after_data(uint32_t data_crc) const;

 private:
  void pread_all(void* out, size_t n, uint64_t offset) const;
  void readable() const;  // throws for a shard opened for its header only

  std::string path_;
  int fd_ = -1;
  ShardLayout layout_;
  uint64_t examples_ = 0, data_bytes_ = 0, file_bytes_ = 0;
  uint32_t crc_ = 0;
  std::vector<uint64_t> offsets_;  // variable-size examples
  std::vector<uint8_t> labels_;  // kWhole only
  uint64_t labels_at_ = 0;        // the labels section's offset in the file
  bool labels_held_ = false;
};

}  // namespace pstrain
