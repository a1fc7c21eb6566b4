#include "common/data/store_reader.h"

#include <algorithm>
#include <cstring>

#include "common/base/error.h"

namespace pstrain {

StoreReader::StoreReader(std::string dir, std::vector<std::string> files, size_t max_open, std::vector<uint32_t> crcs)
    : dir_(std::move(dir)), files_(std::move(files)), crcs_(std::move(crcs)), max_open_(max_open) {
  if (!crcs_.empty() && crcs_.size() != files_.size()) {
    throw DataError(dir_ + ": " + std::to_string(crcs_.size()) + " CRCs for " + std::to_string(files_.size()) + " shards");
  }
  first_.push_back(0);
  for (size_t s = 0; s < files_.size(); ++s) {
    const ShardFile header(dir_ + "/" + files_[s], ShardFile::Open::kHeader);
    check_crc(header, s);
    if (s == 0) {
      layout_ = header.layout();
    } else if (!(header.layout() == layout_)) {
      throw DataError(header.path() + ": its examples or labels are not of the kind of " + files_[0] + "'s");
    }
    first_.push_back(first_.back() + header.examples());
  }
  if (max_open_ == 0) max_open_ = layout_.variable ? 8 : 64;
  open_.resize(files_.size());
  last_use_.assign(files_.size(), 0);
}

void StoreReader::check_crc(const ShardFile& file, size_t s) const {
  if (crcs_.empty() || file.crc() == crcs_[s]) return;
  throw DataError(file.path() + ": its CRC-32C is " + std::to_string(file.crc()) + ", not the " +
                  std::to_string(crcs_[s]) + " recorded for the split (the file was replaced)");
}

std::pair<size_t, uint64_t> StoreReader::locate(uint64_t id) const {
  if (id >= size()) throw DataError(dir_ + ": no example " + std::to_string(id) + " (the split has " + std::to_string(size()) + ")");
  // The last shard whose first id is <= id (empty shards share their first id with the next).
  const auto it = std::upper_bound(first_.begin(), first_.end() - 1, id);
  const auto s = static_cast<size_t>(it - first_.begin()) - 1;
  return {s, id - first_[s]};
}

const ShardFile& StoreReader::shard(size_t s) {
  last_use_[s] = ++clock_;
  if (open_[s]) return *open_[s];
  if (open_shards() >= max_open_) {
    // Closes the least recently used one.
    size_t victim = s;
    for (size_t i = 0; i < open_.size(); ++i) {
      if (open_[i] && (victim == s || last_use_[i] < last_use_[victim])) victim = i;
    }
    open_[victim].reset();
  }
  auto file = std::make_unique<ShardFile>(dir_ + "/" + files_[s], ShardFile::Open::kRandom);
  if (!(file->layout() == layout_)) throw DataError(file->path() + ": changed since the split was mapped");
  check_crc(*file, s);
  open_[s] = std::move(file);
  return *open_[s];
}

size_t StoreReader::open_shards() const {
  return static_cast<size_t>(std::count_if(open_.begin(), open_.end(), [](const auto& f) { return f != nullptr; }));
}

void StoreReader::read(uint64_t id, std::vector<uint8_t>& out) {
  const auto [s, i] = locate(id);
  shard(s).read(i, out);
}

int32_t StoreReader::label(uint64_t id) {
  const auto [s, i] = locate(id);
  return shard(s).label(i);
}

void StoreReader::targets(uint64_t id, float* out) {
  const auto [s, i] = locate(id);
  shard(s).targets(i, out);
}

void StoreReader::read_batch(const std::vector<uint64_t>& ids, std::vector<uint8_t>& bytes, std::vector<int32_t>& labels,
                             std::vector<float>& targets) {
  bytes.resize(ids.size() * layout_.example_bytes);
  labels.clear();
  targets.clear();
  uint8_t* label_out = nullptr;
  if (layout_.labels == LabelKind::kClass) {
    labels.resize(ids.size());
    label_out = reinterpret_cast<uint8_t*>(labels.data());
  } else if (layout_.labels == LabelKind::kTargets) {
    targets.resize(ids.size() * layout_.target_width);
    label_out = reinterpret_cast<uint8_t*>(targets.data());
  }
  read_runs(ids, bytes.data(), label_out);
}

void StoreReader::read_examples(std::span<const uint64_t> ids, uint8_t* out) { read_runs(ids, out, nullptr); }

void StoreReader::read_runs(std::span<const uint64_t> ids, uint8_t* out, uint8_t* label_out) {
  if (layout_.variable) throw DataError(dir_ + ": a batch of arrays needs fixed-size examples");
  const uint64_t example = layout_.example_bytes, label = layout_.label_bytes();
  for (size_t k = 0; k < ids.size();) {
    const auto [s, i] = locate(ids[k]);
    const ShardFile& file = shard(s);
    // The run of ids that follow one another within this shard.
    size_t run = 1;
    while (k + run < ids.size() && ids[k + run] == ids[k] + run && i + run < file.examples()) ++run;
    file.read_run(i, run, out + k * example);
    if (label_out != nullptr) file.read_label_run(i, run, label_out + k * label);
    k += run;
  }
}

}  // namespace pstrain
