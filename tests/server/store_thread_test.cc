// The store thread: RocksDB work runs off the event loop, one task at a time, in the order the
// tasks were queued.
#include <doctest/doctest.h>

#include <stdexcept>

#include "tests/server/store_fixture.h"

using namespace pstrain;

namespace {

std::vector<ChunkSnapshot> backup_of(uint64_t version, float value) {
  std::vector<ChunkSnapshot> chunks(2);
  for (uint32_t key = 0; key < chunks.size(); ++key) {
    chunks[key].key = key;
    chunks[key].version = version;
    chunks[key].values.assign(100, value + static_cast<float>(key));
  }
  return chunks;
}

}  // namespace

TEST_CASE("store thread - tasks run in the order queued: reads see earlier writes, deletions miss later ones") {
  testing::StoreFixture f;
  // Everything below is queued while the thread is busy, so only the queue's order decides.
  auto blocked = f.gate.blocked(f.store);
  f.store.write_backup("job", 5, backup_of(5, 1.5f));
  auto after_write = f.store.run([](BackupStore& b) { return b.versions("job"); });
  auto loaded = f.store.run([](BackupStore& b) {
    std::string error;
    const auto chunks = b.load("job", 5, &error);
    return chunks.has_value() && chunks->size() == 2 && chunks->at(1).values[99] == 2.5f;
  });
  auto erased = f.store.run([](BackupStore& b) { return b.erase_after("job", 0); });
  f.store.write_backup("job", 6, backup_of(6, 3.5f));
  auto at_end = f.store.run([](BackupStore& b) { return b.versions("job"); });

  // The loop is not held up by the busy thread: a timer fires, and nothing queued has run.
  f.io.provider->getTimer().afterDelay(20 * kj::MILLISECONDS).wait(f.ws);
  CHECK_FALSE(after_write.poll(f.ws));
  CHECK(f.written.empty());
  f.gate.open();
  CHECK(blocked.wait(f.ws));

  CHECK(after_write.wait(f.ws) == std::vector<uint64_t>{5});
  CHECK(loaded.wait(f.ws));
  CHECK(erased.wait(f.ws).ok());
  CHECK(at_end.wait(f.ws) == std::vector<uint64_t>{6});
  // Both writes were reported on the loop, in order.
  for (int i = 0; i < 5000 && f.written.size() < 2; ++i) f.io.provider->getTimer().afterDelay(1 * kj::MILLISECONDS).wait(f.ws);
  REQUIRE(f.written.size() == 2);
  CHECK(f.written[0].first == 5);
  CHECK(f.written[0].second.ok());
  CHECK(f.written[1].first == 6);
  CHECK(f.written[1].second.ok());
}

TEST_CASE("store thread - a task that throws fails its own promise only") {
  testing::StoreFixture f;
  auto bad = f.store.run([](BackupStore&) -> int { throw std::runtime_error("the disk is on fire"); });
  auto good = f.store.run([](BackupStore&) { return 7; });
  CHECK(testing::failure_of(kj::mv(bad), f.ws).find("the disk is on fire") != std::string::npos);
  CHECK(good.wait(f.ws) == 7);
}

TEST_CASE("backup store - a backup bigger than one write batch is written in several and reads back whole") {
  testing::StoreFixture f;
  // 3 chunks of 10 MB: 30 MB of blobs, two batches of kMaxBatchBytes (16 MiB) and the marker's.
  const size_t floats = 2'500'000;
  static_assert(3 * 2'500'000 * sizeof(float) > BackupStore::kMaxBatchBytes);
  auto chunks_of = [&](float base) {
    std::vector<ChunkSnapshot> chunks(3);
    for (uint32_t key = 0; key < 3; ++key) {
      chunks[key].key = key;
      chunks[key].version = 7;
      chunks[key].values.assign(floats, base + static_cast<float>(key));
      chunks[key].values[floats - 1] = -base;
      chunks[key].optimizer_state.slots = {{"m", std::vector<float>(floats, base * 2)}};
    }
    return chunks;
  };
  for (const float base : {1.0f, 5.0f}) {  // the second: written again at the same version
    auto done = f.store.run([&, base](BackupStore& b) { return b.write("job", 7, chunks_of(base)); });
    REQUIRE(done.wait(f.ws).ok());
    auto checked = f.store.run([&, base](BackupStore& b) {
      std::string error;
      // (Plain comparisons: this runs on the store thread.)
      const auto loaded = b.load("job", 7, &error);
      if (!loaded || loaded->size() != 3) return false;
      for (const auto& [key, c] : *loaded) {
        if (c.values.size() != floats || c.values[0] != base + static_cast<float>(key) || c.values[floats - 1] != -base ||
            c.optimizer_state.slots.size() != 1 || c.optimizer_state.slots[0].values[floats / 2] != base * 2) {
          return false;
        }
      }
      size_t total = 0;
      const auto part = b.read_part("job", 7, 0, SIZE_MAX, &total, &error);
      return total == 3 && part.has_value() && part->size() == 3 && b.versions("job") == std::vector<uint64_t>{7};
    });
    CHECK(checked.wait(f.ws));
  }
}

TEST_CASE("backup store - the backups the coordinator may roll back to stay however many newer ones are written") {
  testing::StoreFixture f;
  // A server whose peers stopped completing backups (one of them cut off from the coordinator)
  // writes on: the last complete backups (10 and 20) must survive the newest-kKeep pruning.
  auto versions_seen = f.store.run([](BackupStore& b) {
    std::vector<std::vector<uint64_t>> seen;
    const auto write = [&](uint64_t v) {
      if (!b.write("job", v, backup_of(v, 1.0f)).ok()) throw std::runtime_error("write failed");
      b.reported("job", v);
      seen.push_back(b.versions("job"));
    };
    write(10);
    write(20);
    b.set_restorable("job", {20, 10});
    for (uint64_t v = 30; v <= 70; v += 10) write(v);
    b.set_restorable("job", {20});  // 10 is no longer a complete backup the coordinator keeps
    write(80);
    b.set_restorable("job", {});
    write(90);
    b.set_restorable("job", {90});
    if (!b.erase_job("job").ok()) throw std::runtime_error("erase failed");
    write(100);  // a job of the same name again: nothing pinned from before
    write(110);
    write(120);
    write(130);
    std::string error;
    const bool loads = b.load("job", 110, &error).has_value();
    return std::make_pair(seen, loads);
  });
  const auto [seen, loads] = versions_seen.wait(f.ws);
  REQUIRE(seen.size() == 13);
  CHECK(seen[4] == std::vector<uint64_t>{10, 20, 30, 40, 50});
  CHECK(seen[6] == std::vector<uint64_t>{10, 20, 50, 60, 70});
  CHECK(seen[7] == std::vector<uint64_t>{20, 60, 70, 80});
  CHECK(seen[8] == std::vector<uint64_t>{70, 80, 90});
  CHECK(seen[12] == std::vector<uint64_t>{110, 120, 130});
  CHECK(loads);
}
