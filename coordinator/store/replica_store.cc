#include "coordinator/store/replica_store.h"

#include <algorithm>
#include <cstdio>
#include <memory>

#include "common/base/cross_thread.h"
#include "common/base/error.h"

namespace pstrain {
namespace {

std::string padded(uint64_t n) { return key_number(n, 16); }

std::string job_prefix(const std::string& job) { return "replica/" + job + "/"; }
std::string version_prefix(const std::string& job, uint64_t version) { return job_prefix(job) + padded(version) + "/"; }
std::string replica_prefix(const ReplicaId& id) { return version_prefix(id.job, id.version) + padded(id.server) + "/"; }

}  // namespace

ReplicaStore::ReplicaStore(KvStore& kv) : kv_(kv), writer_(kv) {
  // What an earlier run left: chunk counts per replica (so erases find every chunk) and the
  // whole ones. Keys only, and one small value per whole replica.
  const std::string root = "replica/";
  for (const std::string& key : kv_.keys(root)) {
    // replica/<job>/<version>/<server>/<chunk or "whole">
    const size_t last = key.rfind('/');
    const size_t server_at = key.rfind('/', last - 1);
    const size_t version_at = key.rfind('/', server_at - 1);
    if (last == std::string::npos || server_at == std::string::npos || version_at == std::string::npos ||
        version_at < root.size()) {
      continue;
    }
    const std::string prefix = key.substr(0, last + 1), tail = key.substr(last + 1);
    const std::string job = key.substr(root.size(), version_at - root.size());
    try {
      if (tail == "whole") {
        std::string value;
        if (!kv_.get(key, &value).ok()) continue;  // a damaged marker: not whole
        found_[job].push_back({std::stoull(key.substr(version_at + 1, server_at - version_at - 1)),
                               std::stoull(key.substr(server_at + 1, last - server_at - 1)), std::stoull(value)});
      } else {
        size_t& count = chunks_[prefix];
        count = std::max<size_t>(count, std::stoull(tail) + 1);
      }
    } catch (const std::exception&) {
      // Not a key this store writes: left alone.
    }
  }
  // Whole only if every chunk is there too (a replica cut short by a crash of the machine).
  for (auto& [job_id, replicas] : found_) {
    const std::string& job = job_id;  // (a structured binding cannot be captured before C++20's P1091 in clang 14)
    std::erase_if(replicas, [&](const StoredReplica& r) PS_REQUIRES(mutex_) {
      const auto it = chunks_.find(replica_prefix({job, r.version, r.server}));
      return it == chunks_.end() || it->second < r.chunks;
    });
    std::sort(replicas.begin(), replicas.end(), [](const StoredReplica& a, const StoredReplica& b) {
      return std::pair(a.version, a.server) < std::pair(b.version, b.server);
    });
  }
}

std::vector<StoredReplica> ReplicaStore::whole_replicas(const std::string& job) const {
  MutexLock lock(mutex_);
  const auto it = found_.find(job);
  return it == found_.end() ? std::vector<StoredReplica>{} : it->second;
}

void ReplicaStore::keep_only(const std::set<std::string>& jobs) {
  std::set<std::string> others;
  {
    MutexLock lock(mutex_);
    for (const auto& [prefix, count] : chunks_) {
      const size_t end = prefix.find('/', std::string("replica/").size());
      const std::string job = prefix.substr(std::string("replica/").size(), end - std::string("replica/").size());
      if (jobs.count(job) == 0) others.insert(job);
    }
    for (const std::string& job : others) found_.erase(job);
  }
  for (const std::string& job : others) erase_job(job);
}

kj::Promise<void> ReplicaStore::put(const ReplicaId& id, size_t first, std::vector<std::string> blobs, size_t total) {
  const std::string prefix = replica_prefix(id);
  std::vector<KvStore::Write> writes;
  writes.reserve(blobs.size() + 1);
  for (size_t i = 0; i < blobs.size(); ++i) writes.push_back({prefix + padded(first + i), std::move(blobs[i])});
  if (first + blobs.size() >= total) writes.push_back({prefix + "whole", std::to_string(total)});
  {
    MutexLock lock(mutex_);
    size_t& count = chunks_[prefix];
    count = std::max(count, first + blobs.size());
  }
  auto paf = make_cross_thread_paf<void>();
  writer_.enqueue(std::move(writes), /*sync=*/false, [fulfiller = paf.fulfiller] { fulfiller->fulfill(); });
  return kj::mv(paf.promise);
}

kj::Promise<std::vector<std::string>> ReplicaStore::read(const ReplicaId& id, size_t first, size_t max_bytes) {
  auto paf = make_cross_thread_paf<std::vector<std::string>>();
  // An empty write whose callback runs after every write queued before it: the read, on the
  // writer thread.
  writer_.enqueue({}, false, [this, prefix = replica_prefix(id), first, max_bytes, fulfiller = paf.fulfiller] {
    std::vector<std::string> blobs;
    size_t bytes = 0;
    for (size_t i = first;; ++i) {
      std::string blob;
      if (!kv_.get(prefix + padded(i), &blob).ok()) break;
      if (!blobs.empty() && bytes + blob.size() > max_bytes) break;
      bytes += blob.size();
      blobs.push_back(std::move(blob));
    }
    fulfiller->fulfill(std::move(blobs));
  });
  return kj::mv(paf.promise);
}

kj::Promise<void> ReplicaStore::written() {
  auto paf = make_cross_thread_paf<void>();
  writer_.enqueue({}, false, [fulfiller = paf.fulfiller] { fulfiller->fulfill(); });
  return kj::mv(paf.promise);
}

std::optional<std::string> ReplicaStore::read_chunk(const ReplicaId& id, size_t index) const {
  std::string blob;
  if (!kv_.get(replica_prefix(id) + padded(index), &blob).ok()) return std::nullopt;
  return blob;
}

void ReplicaStore::pin(const std::string& job, uint64_t version) {
  MutexLock lock(mutex_);
  ++pins_[version_prefix(job, version)];
}

void ReplicaStore::unpin(const std::string& job, uint64_t version) {
  const std::string prefix = version_prefix(job, version);
  {
    MutexLock lock(mutex_);
    const auto it = pins_.find(prefix);
    if (it == pins_.end()) return;
    if (--it->second > 0) return;
    pins_.erase(it);
    if (deferred_.erase(prefix) == 0) return;
  }
  erase_matching(prefix);
}

void ReplicaStore::erase(const std::string& job, uint64_t version) { erase_matching(version_prefix(job, version)); }

void ReplicaStore::erase_job(const std::string& job) { erase_matching(job_prefix(job)); }

void ReplicaStore::erase_matching(const std::string& prefix) {
  std::vector<KvStore::Write> deletes;
  {
    MutexLock lock(mutex_);
    for (auto it = chunks_.lower_bound(prefix); it != chunks_.end() && it->first.starts_with(prefix);) {
      // replica/<job>/<version>/<server>/: its version's prefix ends at the '/' after <version>.
      const size_t slash = it->first.find('/', it->first.find('/', std::string("replica/").size()) + 1);
      const std::string of_version = it->first.substr(0, slash + 1);
      if (pins_.count(of_version) != 0) {
        deferred_.insert(of_version);
        ++it;
        continue;
      }
      for (size_t i = 0; i < it->second; ++i) deletes.push_back({it->first + padded(i), std::nullopt});
      deletes.push_back({it->first + "whole", std::nullopt});
      it = chunks_.erase(it);
    }
  }
  if (!deletes.empty()) writer_.enqueue(std::move(deletes), false);
}

}  // namespace pstrain
