#include "server/backup_store.h"

#include <cstdio>
#include <cstring>
#include <algorithm>

namespace pstrain {
namespace {

std::string padded(uint64_t n) { return key_number(n, 16); }

std::string prefix(const std::string& job) { return "backup/" + job + "/"; }
std::string version_prefix(const std::string& job, uint64_t v) { return prefix(job) + padded(v) + "/"; }

}  // namespace

KvStatus BackupStore::write(const std::string& job, uint64_t version, const std::vector<ChunkSnapshot>& chunks) {
  // The blobs go in batches of at most kMaxBatchBytes (encoded batch by batch, not synced), then
  // the `complete` marker in a synced batch: the backup exists only from the marker on (as an
  // adopted one written in parts), and the synced marker makes the blobs before it durable too
  // (one write-ahead log, in order). So the encoded copy of a shard, and RocksDB's batch, are a
  // few MB at a time, not the shard. A backup written again at the same version loses its old
  // marker in the first batch: a crash halfway never leaves old and new blobs under a marker.
  unreported_.insert({job, version});  // until reported(): its replica is read after later writes
  const std::string base = version_prefix(job, version);
  std::vector<KvStore::Write> writes = {{base + "complete", std::nullopt}};
  size_t bytes = 0;
  for (const auto& c : chunks) {
    std::string blob = encode_snapshot(c);
    bytes += blob.size();
    writes.push_back({base + "chunk/" + padded(c.key), std::move(blob)});
    if (bytes >= kMaxBatchBytes) {
      if (const KvStatus status = kv_.write(writes, /*sync=*/false); !status.ok()) return status;
      writes.clear();
      bytes = 0;
    }
  }
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
  // The newest kKeep stay, and older ones that are pinned: the one being written, one whose
  // replica is still to be read, one the coordinator may roll back to.
  const auto pinned = restorable_.find(job);
  const auto is_restorable = [&](uint64_t v) {
    return pinned != restorable_.end() && std::binary_search(pinned->second.begin(), pinned->second.end(), v);
  };
  for (size_t i = 0; i + kKeep < existing.size(); ++i) {
    const uint64_t v = existing[i];
    if (v == version || unreported_.count({job, v}) != 0 || is_restorable(v)) continue;
    for (std::string& key : kv_.keys(version_prefix(job, v))) writes.push_back({std::move(key), std::nullopt});
  }
}

void BackupStore::reported(const std::string& job, uint64_t version) { unreported_.erase({job, version}); }

void BackupStore::set_restorable(const std::string& job, std::vector<uint64_t> versions) {
  std::sort(versions.begin(), versions.end());
  restorable_[job] = std::move(versions);
}

std::vector<uint64_t> BackupStore::restorable(const std::string& job) const {
  const auto at = restorable_.find(job);
  return at == restorable_.end() ? std::vector<uint64_t>{} : at->second;
}

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
  restorable_.erase(job);
  return kv_.erase_prefix(prefix(job), true);
}

}  // namespace pstrain
