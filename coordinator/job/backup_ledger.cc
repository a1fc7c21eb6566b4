#include "coordinator/job/backup_ledger.h"

#include <algorithm>
#include <optional>

namespace pstrain {

bool BackupLedger::on_ack(size_t index, uint64_t version, size_t servers) {
  auto& acks = acks_[version];
  acks.insert(index);
  if (acks.size() < servers) return false;
  acks_.erase(acks_.begin(), acks_.upper_bound(version));
  add_complete(version);
  return true;
}

void BackupLedger::add_complete(uint64_t version) {
  if (complete_.empty() || complete_.back() < version) complete_.push_back(version);
  if (const auto at = replicas_.find(version); at != replicas_.end()) at->second.complete = true;
  while (complete_.size() > 2) complete_.erase(complete_.begin());
  for (auto& [wanted, fulfiller] : waiters_) {
    if (complete_.back() >= wanted) fulfiller->fulfill();
  }
  std::erase_if(waiters_, [](auto& w) { return !w.second->isWaiting(); });
}

void BackupLedger::remove_complete(uint64_t version) {
  complete_.erase(std::remove(complete_.begin(), complete_.end(), version), complete_.end());
  if (const auto at = replicas_.find(version); at != replicas_.end()) at->second.complete = false;
}

bool BackupLedger::is_complete(uint64_t version) const {
  return std::find(complete_.begin(), complete_.end(), version) != complete_.end();
}

std::optional<uint64_t> BackupLedger::latest() const {
  if (complete_.empty()) return std::nullopt;
  return complete_.back();
}

kj::Promise<void> BackupLedger::wait_for(uint64_t version) {
  if (!complete_.empty() && complete_.back() >= version) return kj::READY_NOW;
  auto paf = kj::newPromiseAndFulfiller<void>();
  waiters_.emplace_back(version, kj::mv(paf.fulfiller));
  return kj::mv(paf.promise);
}

std::vector<uint64_t> BackupLedger::add_replica_part(uint64_t version, size_t index, size_t first, size_t count,
                                                    size_t total) {
  auto [at, added] = replicas_.try_emplace(version);
  // Parts come before their server's backupDone, but a restarted coordinator's record can make
  // the backup complete first.
  if (added) at->second.complete = is_complete(version);
  ReplicaParts& parts = at->second.servers[index];
  // A part out of order (a server that started sending again) restarts the count.
  parts.received = first == parts.received && total == parts.total ? first + count : first == 0 ? count : 0;
  parts.total = total;
  return drop_superseded_replicas();
}

std::vector<uint64_t> BackupLedger::drop_superseded_replicas() {
  // Per server: the newest complete backup with its whole replica (ascending: the last wins).
  std::map<size_t, uint64_t> usable;
  for (const auto& [version, replica] : replicas_) {
    if (!replica.complete) continue;
    for (const auto& [index, parts] : replica.servers) {
      if (parts.whole()) usable[index] = version;
    }
  }
  std::vector<uint64_t> dropped;
  for (auto it = replicas_.begin(); it != replicas_.end();) {
    const uint64_t version = it->first;
    // A server's part of this version is still needed if it is that server's usable replica,
    // or newer and may become it (its backup not complete yet: still arriving). A complete
    // backup's partial replica never becomes whole: its server sent backupDone after the last
    // part, or after giving up.
    const bool complete = it->second.complete;
    const bool superseded = std::all_of(it->second.servers.begin(), it->second.servers.end(), [&](const auto& s) {
      const auto newer = usable.find(s.first);
      if (newer != usable.end() && newer->second > version) return true;
      return complete && !s.second.whole();
    });
    if (!superseded) {
      ++it;
      continue;
    }
    dropped.push_back(version);
    it = replicas_.erase(it);
  }
  return dropped;
}

std::optional<std::pair<uint64_t, size_t>> BackupLedger::newest_replica(size_t index) const {
  for (auto v = replicas_.rbegin(); v != replicas_.rend(); ++v) {
    if (!v->second.complete) continue;
    const auto of = v->second.servers.find(index);
    if (of == v->second.servers.end() || !of->second.whole()) continue;
    return std::make_pair(v->first, of->second.total);
  }
  return std::nullopt;
}

std::optional<size_t> BackupLedger::whole_replica(uint64_t version, size_t index) const {
  const auto at = replicas_.find(version);
  if (at == replicas_.end()) return std::nullopt;
  const auto of = at->second.servers.find(index);
  if (of == at->second.servers.end() || !of->second.whole()) return std::nullopt;
  return of->second.total;
}

bool BackupLedger::replicas_whole(uint64_t version, size_t servers) const {
  const auto at = replicas_.find(version);
  if (at == replicas_.end() || servers == 0) return false;
  for (size_t i = 0; i < servers; ++i) {
    const auto of = at->second.servers.find(i);
    if (of == at->second.servers.end() || !of->second.whole()) return false;
  }
  return true;
}

std::vector<uint64_t> BackupLedger::forget_after(uint64_t version) {
  acks_.erase(acks_.upper_bound(version), acks_.end());
  std::vector<uint64_t> dropped;
  for (auto it = replicas_.upper_bound(version); it != replicas_.end(); it = replicas_.erase(it)) dropped.push_back(it->first);
  return dropped;
}

}  // namespace pstrain
