#include "coordinator/replica_store.h"

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
  if (const KvStatus status = kv_.erase_prefix("replica/", false); !status.ok()) {
    throw Error("could not delete the backup replicas of an earlier run from " + kv_.directory() + ": " +
                status.message);
  }
}

kj::Promise<void> ReplicaStore::put(const ReplicaId& id, size_t first, std::vector<std::string> blobs) {
  const std::string prefix = replica_prefix(id);
  std::vector<KvStore::Write> writes;
  writes.reserve(blobs.size());
  for (size_t i = 0; i < blobs.size(); ++i) writes.push_back({prefix + padded(first + i), std::move(blobs[i])});
  {
    std::lock_guard lock(mutex_);
    size_t& count = chunks_[prefix];
    count = std::max(count, first + writes.size());
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
  std::lock_guard lock(mutex_);
  ++pins_[version_prefix(job, version)];
}

void ReplicaStore::unpin(const std::string& job, uint64_t version) {
  const std::string prefix = version_prefix(job, version);
  {
    std::lock_guard lock(mutex_);
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
    std::lock_guard lock(mutex_);
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
      it = chunks_.erase(it);
    }
  }
  if (!deletes.empty()) writer_.enqueue(std::move(deletes), false);
}

}  // namespace pstrain
