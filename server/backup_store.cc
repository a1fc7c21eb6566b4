#include "server/backup_store.h"

#include <cstdio>
#include <cstring>
#include <algorithm>

namespace pstrain {
namespace {

std::string padded(uint64_t n) { return key_number(n, 16); }

std::string prefix(const std::string& job) { return "backup/" + job + "/"; }
std::string version_prefix(const std::string& job, uint64_t v) { return prefix(job) + padded(v) + "/"; }

template <typename T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

template <typename T>
bool take(const std::string& in, size_t& at, T* value) {
  if (at + sizeof(T) > in.size()) return false;
  std::memcpy(value, in.data() + at, sizeof(T));
  at += sizeof(T);
  return true;
}

bool take_floats(const std::string& in, size_t& at, uint64_t n, float* out) {
  if (n > (in.size() - at) / sizeof(float)) return false;
  std::memcpy(out, in.data() + at, n * sizeof(float));
  at += n * sizeof(float);
  return true;
}

}  // namespace

// Layout: key u32, version u64, iterations i64, size u64, values, slot count u32, then per slot:
// name length u32, name, values (size floats).
std::string encode_snapshot(const ChunkSnapshot& c) {
  std::string out;
  put(out, c.key);
  put(out, c.version);
  put(out, c.optimizer_state.iterations);
  put(out, static_cast<uint64_t>(c.values.size()));
  out.append(reinterpret_cast<const char*>(c.values.data()), c.values.size() * sizeof(float));
  put(out, static_cast<uint32_t>(c.optimizer_state.slots.size()));
  for (const auto& slot : c.optimizer_state.slots) {
    put(out, static_cast<uint32_t>(slot.name.size()));
    out += slot.name;
    out.append(reinterpret_cast<const char*>(slot.values.data()), slot.values.size() * sizeof(float));
  }
  return out;
}

std::optional<ChunkSnapshot> decode_snapshot(const std::string& blob) {
  ChunkSnapshot c;
  size_t at = 0;
  uint64_t size = 0;
  uint32_t slots = 0;
  if (!take(blob, at, &c.key) || !take(blob, at, &c.version) || !take(blob, at, &c.optimizer_state.iterations) ||
      !take(blob, at, &size)) {
    return std::nullopt;
  }
  if (size > blob.size() / sizeof(float)) return std::nullopt;
  c.values.resize(size);
  if (!take_floats(blob, at, size, c.values.data()) || !take(blob, at, &slots) || slots > 8) return std::nullopt;
  for (uint32_t s = 0; s < slots; ++s) {
    uint32_t name_size = 0;
    if (!take(blob, at, &name_size) || name_size > 64 || at + name_size > blob.size()) return std::nullopt;
    optim::Slot slot{blob.substr(at, name_size), std::vector<float>(size)};
    at += name_size;
    if (!take_floats(blob, at, size, slot.values.data())) return std::nullopt;
    c.optimizer_state.slots.push_back(std::move(slot));
  }
  if (at != blob.size()) return std::nullopt;
  return c;
}

KvStatus BackupStore::write(const std::string& job, uint64_t version, const std::vector<ChunkSnapshot>& chunks) {
  std::vector<KvStore::Write> writes;
  const std::string base = version_prefix(job, version);
  for (const auto& c : chunks) writes.push_back({base + "chunk/" + padded(c.key), encode_snapshot(c)});
  unreported_.insert({job, version});  // until reported(): its replica is read after later writes
  complete_backup(job, version, chunks.size(), writes);
  return kv_.write(writes, /*sync=*/true);
}

void BackupStore::complete_backup(const std::string& job, uint64_t version, size_t chunks,
                                  std::vector<KvStore::Write>& writes) const {
  writes.push_back({version_prefix(job, version) + "complete", std::to_string(chunks)});
  // Drop the oldest backups beyond kKeep, in the same batch.
  std::vector<uint64_t> existing = versions(job);
  if (std::find(existing.begin(), existing.end(), version) == existing.end()) existing.push_back(version);
  std::sort(existing.begin(), existing.end());
  // Oldest first, but never the one being written nor one whose replica is still to be read.
  size_t kept = existing.size();
  for (uint64_t v : existing) {
    if (kept <= kKeep) break;
    if (v == version || unreported_.count({job, v}) != 0) continue;
    for (std::string& key : kv_.keys(version_prefix(job, v))) writes.push_back({std::move(key), std::nullopt});
    --kept;
  }
}

void BackupStore::reported(const std::string& job, uint64_t version) { unreported_.erase({job, version}); }

KvStatus BackupStore::write_part(const std::string& job, uint64_t version, const std::vector<uint32_t>& keys,
                                 const std::vector<std::string>& blobs, std::optional<size_t> complete) {
  std::vector<KvStore::Write> writes;
  const std::string base = version_prefix(job, version);
  for (size_t i = 0; i < blobs.size(); ++i) writes.push_back({base + "chunk/" + padded(keys[i]), blobs[i]});
  if (complete) complete_backup(job, version, *complete, writes);
  return kv_.write(writes, /*sync=*/complete.has_value());
}

std::optional<std::vector<std::string>> BackupStore::read_part(const std::string& job, uint64_t version, size_t first,
                                                               size_t max_bytes, size_t* total,
                                                               std::string* error) const {
  const std::string base = version_prefix(job, version);
  const std::string name = "backup " + std::to_string(version) + " of " + job;
  std::string complete;
  if (!kv_.get(base + "complete", &complete).ok()) {
    *error = name + " is not complete";
    return std::nullopt;
  }
  const std::vector<std::string> keys = kv_.keys(base + "chunk/");
  if (std::to_string(keys.size()) != complete) {
    *error = name + " has " + std::to_string(keys.size()) + " chunks, expected " + complete;
    return std::nullopt;
  }
  *total = keys.size();
  std::vector<std::string> blobs;
  size_t bytes = 0;
  for (size_t i = first; i < keys.size(); ++i) {
    std::string blob;
    if (!kv_.get(keys[i], &blob).ok()) {
      *error = name + ": " + keys[i] + " is unreadable or failed its checksum";
      return std::nullopt;
    }
    if (!blobs.empty() && bytes + blob.size() > max_bytes) break;
    bytes += blob.size();
    blobs.push_back(std::move(blob));
  }
  return blobs;
}

std::vector<uint64_t> BackupStore::versions(const std::string& job) const {
  std::vector<uint64_t> out;
  for (const std::string& key : kv_.keys(prefix(job))) {
    const std::string rest = key.substr(prefix(job).size());
    if (rest.size() > 17 && rest.substr(17) == "complete") out.push_back(std::stoull(rest.substr(0, 16)));
  }
  return out;
}

KvStatus BackupStore::erase_after(const std::string& job, uint64_t version) {
  KvStatus status;
  for (uint64_t v : versions(job)) {
    if (v <= version) continue;
    status = kv_.erase_prefix(version_prefix(job, v), true);
    if (!status.ok()) return status;
  }
  return status;
}

std::optional<std::map<uint32_t, ChunkSnapshot>> BackupStore::load(const std::string& job, uint64_t version,
                                                                    std::string* error, bool exact_versions) const {
  const std::string base = version_prefix(job, version);
  std::string complete;
  if (!kv_.get(base + "complete", &complete).ok()) {
    *error = "backup " + std::to_string(version) + " of " + job + " is not complete";
    return std::nullopt;
  }
  std::map<uint32_t, ChunkSnapshot> chunks;
  for (const auto& e : kv_.scan(base + "chunk/")) {
    if (e.corrupt) {
      *error = "backup " + std::to_string(version) + " of " + job + ": " + e.key + " failed its checksum";
      return std::nullopt;
    }
    auto snapshot = decode_snapshot(e.value);
    if (!snapshot || (exact_versions && snapshot->version != version)) {
      *error = "backup " + std::to_string(version) + " of " + job + ": " + e.key + " is malformed";
      return std::nullopt;
    }
    chunks[snapshot->key] = std::move(*snapshot);
  }
  if (std::to_string(chunks.size()) != complete) {
    *error = "backup " + std::to_string(version) + " of " + job + " has " + std::to_string(chunks.size()) +
             " chunks, expected " + complete;
    return std::nullopt;
  }
  return chunks;
}

KvStatus BackupStore::erase_job(const std::string& job) {
  std::erase_if(unreported_, [&](const auto& pinned) { return pinned.first == job; });
  return kv_.erase_prefix(prefix(job), true);
}

}  // namespace pstrain
