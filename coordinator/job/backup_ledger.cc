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
  while (complete_.size() > 2) complete_.erase(complete_.begin());
  for (auto& [wanted, fulfiller] : waiters_) {
    if (complete_.back() >= wanted) fulfiller->fulfill();
  }
  std::erase_if(waiters_, [](auto& w) { return !w.second->isWaiting(); });
}

void BackupLedger::remove_complete(uint64_t version) {
  complete_.erase(std::remove(complete_.begin(), complete_.end(), version), complete_.end());
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
  ReplicaParts& parts = replicas_[version][index];
  // A part out of order (a server that started sending again) restarts the count.
  parts.received = first == parts.received && total == parts.total ? first + count : first == 0 ? count : 0;
  parts.total = total;
  std::vector<uint64_t> dropped;
  while (replicas_.size() > 3) {
    dropped.push_back(replicas_.begin()->first);
    replicas_.erase(replicas_.begin());
  }
  return dropped;
}

std::optional<std::pair<uint64_t, size_t>> BackupLedger::newest_replica(size_t index) const {
  for (auto v = complete_.rbegin(); v != complete_.rend(); ++v) {
    const auto at = replicas_.find(*v);
    if (at == replicas_.end()) continue;
    const auto of = at->second.find(index);
    if (of == at->second.end() || of->second.total == 0 || of->second.received != of->second.total) continue;
    return std::make_pair(*v, of->second.total);
  }
  return std::nullopt;
}

bool BackupLedger::replicas_whole(uint64_t version, size_t servers) const {
  const auto at = replicas_.find(version);
  if (at == replicas_.end() || servers == 0) return false;
  for (size_t i = 0; i < servers; ++i) {
    const auto of = at->second.find(i);
    if (of == at->second.end() || of->second.total == 0 || of->second.received != of->second.total) return false;
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
