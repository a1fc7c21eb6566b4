// BackupLedger: which replicas of the servers' backups the coordinator keeps, and which one a
// move of a lost server's shard uses (newest_replica). The first case replays the order of
// parts and acks the coordinator saw in rest_test's "over 64 MiB" run, where the move never
// started: a server sends the replicas of several backups at once, interleaved.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "coordinator/job/backup_ledger.h"

namespace pstrain {
namespace {

constexpr size_t kTotal = 75;  // chunks of the shard
constexpr size_t kPart = 16;   // chunks per part

// Replica part `n` (0-based) of server `index`'s replica of `version`; appends what was dropped.
void part(BackupLedger& ledger, uint64_t version, size_t index, size_t n, std::vector<uint64_t>& dropped) {
  const size_t first = n * kPart;
  const size_t count = std::min(kPart, kTotal - first);
  for (uint64_t v : ledger.add_replica_part(version, index, first, count, kTotal)) dropped.push_back(v);
}

constexpr size_t kParts = (kTotal + kPart - 1) / kPart;  // 5

void whole(BackupLedger& ledger, uint64_t version, size_t index, std::vector<uint64_t>& dropped) {
  for (size_t n = 0; n < kParts; ++n) part(ledger, version, index, n, dropped);
}

// A backup becomes complete (every one of `servers` acked), as JobRunner::on_backup_done does it.
void complete(BackupLedger& ledger, uint64_t version, size_t servers, std::vector<uint64_t>& dropped) {
  bool done = false;
  for (size_t i = 0; i < servers; ++i) done = ledger.on_ack(i, version, servers);
  REQUIRE(done);
  for (uint64_t v : ledger.drop_superseded_replicas()) dropped.push_back(v);
}

bool has(const std::vector<uint64_t>& versions, uint64_t v) {
  return std::find(versions.begin(), versions.end(), v) != versions.end();
}

using Replica = std::optional<std::pair<uint64_t, size_t>>;

}  // namespace

TEST_CASE("BackupLedger: replicas of newer backups arriving interleaved do not push out the whole replica of a complete one") {
  // The coordinator's log of the failed run: backups every 4 steps, each replica in 5 parts,
  // the replicas of 4, 8, 12, 16 and 20 in flight together; the server was killed after the
  // backup at 8 was complete.
  BackupLedger ledger;
  std::vector<uint64_t> dropped;
  part(ledger, 4, 0, 0, dropped);
  part(ledger, 4, 0, 1, dropped);
  part(ledger, 8, 0, 0, dropped);
  part(ledger, 4, 0, 2, dropped);
  part(ledger, 12, 0, 0, dropped);
  part(ledger, 8, 0, 1, dropped);
  part(ledger, 4, 0, 3, dropped);
  part(ledger, 12, 0, 1, dropped);
  part(ledger, 16, 0, 0, dropped);
  part(ledger, 8, 0, 2, dropped);
  part(ledger, 4, 0, 4, dropped);
  complete(ledger, 4, 1, dropped);
  CHECK(ledger.newest_replica(0) == Replica({4, kTotal}));
  part(ledger, 12, 0, 2, dropped);
  part(ledger, 16, 0, 1, dropped);
  part(ledger, 8, 0, 3, dropped);
  part(ledger, 12, 0, 3, dropped);
  part(ledger, 20, 0, 0, dropped);
  part(ledger, 16, 0, 2, dropped);
  CHECK(ledger.newest_replica(0) == Replica({4, kTotal}));  // 8 is not whole yet
  part(ledger, 8, 0, 4, dropped);
  CHECK_FALSE(has(dropped, 8));
  complete(ledger, 8, 1, dropped);
  // The server is lost here: its shard moves from the backup at 8, whose replica is whole.
  CHECK(ledger.newest_replica(0) == Replica({8, kTotal}));
  CHECK(has(dropped, 4));  // superseded by 8
  CHECK_FALSE(has(dropped, 8));
  for (uint64_t v : {12, 16, 20}) CHECK_FALSE(has(dropped, v));  // still arriving
}

TEST_CASE("BackupLedger: a complete backup whose replica is partial falls back to an older whole one, which is kept") {
  BackupLedger ledger;
  std::vector<uint64_t> dropped;
  whole(ledger, 4, 0, dropped);
  complete(ledger, 4, 1, dropped);
  // The replica of 8 is given up half-way (the server could not read it); backupDone still came.
  part(ledger, 8, 0, 0, dropped);
  part(ledger, 8, 0, 1, dropped);
  CHECK(dropped.empty());  // still arriving, as far as the coordinator knows
  complete(ledger, 8, 1, dropped);
  CHECK(ledger.newest_replica(0) == Replica({4, kTotal}));
  CHECK(has(dropped, 8));  // complete and partial: it can never be used
  CHECK_FALSE(has(dropped, 4));
  // The replica of 12 is given up too, and 16's and 20's are under way: the ledger's last two
  // complete backups (8, 12) have no whole replica, but 4 is still the one to move from, and kept.
  dropped.clear();
  part(ledger, 12, 0, 0, dropped);
  complete(ledger, 12, 1, dropped);
  part(ledger, 16, 0, 0, dropped);
  part(ledger, 20, 0, 0, dropped);
  CHECK(ledger.complete() == std::vector<uint64_t>{8, 12});
  CHECK(ledger.newest_replica(0) == Replica({4, kTotal}));
  CHECK(dropped == std::vector<uint64_t>{12});
  // 16 becomes whole, then complete: 4 is superseded; 16 is used; 20 is still arriving.
  dropped.clear();
  for (size_t n = 1; n < kParts; ++n) part(ledger, 16, 0, n, dropped);
  CHECK(ledger.newest_replica(0) == Replica({4, kTotal}));
  CHECK(dropped.empty());
  complete(ledger, 16, 1, dropped);
  CHECK(ledger.newest_replica(0) == Replica({16, kTotal}));
  CHECK(dropped == std::vector<uint64_t>{4});
  // A late part of a superseded replica is dropped at once (the caller does not store it).
  dropped.clear();
  part(ledger, 8, 0, 2, dropped);
  CHECK(has(dropped, 8));
  CHECK(ledger.newest_replica(0) == Replica({16, kTotal}));
}

TEST_CASE("BackupLedger: a replica is kept until every server it holds a part of has a newer whole one") {
  BackupLedger ledger;
  std::vector<uint64_t> dropped;
  whole(ledger, 4, 0, dropped);
  whole(ledger, 4, 1, dropped);
  complete(ledger, 4, 2, dropped);
  // At 8, server 0's replica is whole and acked; server 1's is still arriving.
  whole(ledger, 8, 0, dropped);
  part(ledger, 8, 1, 0, dropped);
  CHECK_FALSE(ledger.on_ack(0, 8, 2));
  CHECK(ledger.newest_replica(0) == Replica({4, kTotal}));  // 8 is not complete
  SUBCASE("server 1's replica of 8 arrives whole") {
    for (size_t n = 1; n < kParts; ++n) part(ledger, 8, 1, n, dropped);
    CHECK(ledger.on_ack(1, 8, 2));
    for (uint64_t v : ledger.drop_superseded_replicas()) dropped.push_back(v);
    CHECK(ledger.newest_replica(0) == Replica({8, kTotal}));
    CHECK(ledger.newest_replica(1) == Replica({8, kTotal}));
    CHECK(dropped == std::vector<uint64_t>{4});
  }
  SUBCASE("server 1 gives its replica of 8 up") {
    CHECK(ledger.on_ack(1, 8, 2));
    for (uint64_t v : ledger.drop_superseded_replicas()) dropped.push_back(v);
    CHECK(ledger.newest_replica(0) == Replica({8, kTotal}));
    CHECK(ledger.newest_replica(1) == Replica({4, kTotal}));
    CHECK(dropped.empty());  // 4: server 1's to move from; 8: server 0's
  }
}

TEST_CASE("BackupLedger: an incomplete backup's replica is never used - an unusable or undone one is forgotten") {
  BackupLedger ledger;
  std::vector<uint64_t> dropped;
  whole(ledger, 4, 0, dropped);
  whole(ledger, 4, 1, dropped);
  CHECK(ledger.newest_replica(0) == std::nullopt);  // only server 0 could have acked
  CHECK_FALSE(ledger.on_ack(0, 4, 2));
  CHECK(ledger.newest_replica(0) == std::nullopt);
  CHECK(ledger.on_ack(1, 4, 2));
  CHECK(ledger.newest_replica(0) == Replica({4, kTotal}));
  // A backup that turned out unusable is no source for a move.
  ledger.remove_complete(4);
  CHECK(ledger.newest_replica(0) == std::nullopt);
  ledger.add_complete(4);
  // A rollback to 4 forgets the replicas of later backups.
  whole(ledger, 8, 0, dropped);
  whole(ledger, 8, 1, dropped);
  complete(ledger, 8, 2, dropped);
  CHECK(ledger.newest_replica(0) == Replica({8, kTotal}));
  const std::vector<uint64_t> forgotten = ledger.forget_after(4);
  CHECK(has(forgotten, 8));
}

}  // namespace pstrain
