// One split of the dataset store (shard_file.h) read by example id, as a worker reads the examples
// of its slices: ids are global (shard s's examples follow shard s - 1's), shards are mapped from
// their headers at construction and opened on demand (ShardFile::Open::kRandom: labels are read
// from the file as asked for), at most `max_open` at a time, so memory does not grow with the
// split. An open shard of fixed-size examples holds a descriptor, so by default 64 stay open; one
// of variable-size examples holds its offsets (8 bytes an example, at most 8 MiB with the
// writer's default bounds), so by default 8. A batch's consecutive ids within a shard are read in
// one pread, their labels in another.
//
// Thread rules: single-owner (opening and evicting shards mutates it); one per reading thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/data/shard_file.h"

namespace pstrain {

class StoreReader {
 public:
  // The shards `files` of directory `dir`, in the split's order. Throws DataError (naming the
  // file) for a missing or invalid shard, or shards of different layouts. With `crcs` (one per
  // file, as recorded when the split was loaded), a shard whose header holds another CRC-32C is
  // an error too, here and whenever it is opened again: a replaced file is never read as the old.
  // `max_open` 0: the default above.
  StoreReader(std::string dir, std::vector<std::string> files, size_t max_open = 0, std::vector<uint32_t> crcs = {});

  uint64_t size() const { return first_.back(); }
  const ShardLayout& layout() const { return layout_; }
  // The shard holding example `id` and its index there.
  std::pair<size_t, uint64_t> locate(uint64_t id) const;

  // Example `id`'s bytes (`out` resized to them) and its label or targets.
  void read(uint64_t id, std::vector<uint8_t>& out);
  int32_t label(uint64_t id);
  void targets(uint64_t id, float* out);

  // A batch of fixed-size examples, in the order of `ids`: `bytes` gets ids.size() x
  // example_bytes, `labels` the class labels (LabelKind::kClass) or `targets` target_width
  // values each (kTargets); the other is cleared.
  void read_batch(const std::vector<uint64_t>& ids, std::vector<uint8_t>& bytes, std::vector<int32_t>& labels,
                  std::vector<float>& targets);
  // Fixed-size examples `ids`, one after another into `out` (ids.size() x example_bytes), their
  // labels not read; a run of consecutive ids within a shard in one pread.
  void read_examples(std::span<const uint64_t> ids, uint8_t* out);

  size_t open_shards() const;  // (tests: the bound holds)

 private:
  const ShardFile& shard(size_t s);
  // Fixed-size examples `ids` into `out`, and their labels or targets as stored into `label_out`
  // unless null: a run of consecutive ids within a shard in one read each.
  void read_runs(std::span<const uint64_t> ids, uint8_t* out, uint8_t* label_out);
  void check_crc(const ShardFile& file, size_t s) const;

  std::string dir_;
  std::vector<std::string> files_;
  std::vector<uint32_t> crcs_;   // expected, by shard (empty: not checked)
  std::vector<uint64_t> first_;  // first id of each shard, then the split's size
  ShardLayout layout_;
  size_t max_open_;
  std::vector<std::unique_ptr<ShardFile>> open_;  // by shard; null when closed
  std::vector<uint64_t> last_use_;                // by shard (0: never)
  uint64_t clock_ = 0;
};

}  // namespace pstrain
