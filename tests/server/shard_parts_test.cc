// The parts a parameter shard is made of, one at a time: a chunk's step and its two timelines of
// values (shard_chunk.h), and backups forming chunk by chunk (shard_snapshots.h).
#include <doctest/doctest.h>

#include <vector>

#include "common/engine/optim/optimizer.h"
#include "server/shard_chunk.h"
#include "server/shard_snapshots.h"

using namespace pstrain;

namespace {

ShardChunk chunk_of(uint32_t key, std::vector<float> values, const optim::Optimizer& optimizer) {
  ShardChunk chunk;
  chunk.info = {key, 0, 0, values.size(), 0};
  chunk.values.assign(values.begin(), values.end());
  chunk.initial = chunk.values;
  chunk.previous.resize(values.size());
  chunk.scratch.resize(values.size());
  chunk.optimizer_state = optimizer.make_state(values.size());
  return chunk;
}

std::unique_ptr<optim::Optimizer> sgd(float lr) {
  OptimizerSpec spec;
  spec.type = OptimizerType::kSgd;
  spec.learning_rate = lr;
  return optim::make_optimizer(spec);
}

}  // namespace

TEST_CASE("shard chunk - a step is w - lr * g, keeps the values it replaced and answers the pulls it reached") {
  const auto optimizer = sgd(0.5f);
  ShardChunk chunk = chunk_of(0, {1.0f, 2.0f}, *optimizer);
  std::vector<uint64_t> answered;
  chunk.waiting_pulls.emplace_back(1, [&](uint64_t v) { answered.push_back(v); });
  chunk.waiting_pulls.emplace_back(2, [&](uint64_t v) { answered.push_back(v); });
  const std::vector<float> gradient{2.0f, -4.0f};
  chunk.step(*optimizer, gradient);
  ++chunk.version;
  chunk.release_pulls();
  CHECK(chunk.values[0] == 0.0f);
  CHECK(chunk.values[1] == 4.0f);
  CHECK(answered == std::vector<uint64_t>{1});
  CHECK(chunk.waiting_pulls.size() == 1);
  REQUIRE(chunk.values_at(0).has_value());
  CHECK((*chunk.values_at(0))[1] == 2.0f);  // the values before the step
  CHECK((*chunk.values_at(1))[1] == 4.0f);
  CHECK_FALSE(chunk.values_at(2).has_value());

  // A restore (or reset) starts a new timeline: the old values are gone.
  const ChunkSnapshot saved = chunk.snapshot();
  chunk.step(*optimizer, gradient);
  ++chunk.version;
  chunk.restore(saved);
  CHECK(chunk.version == 1);
  CHECK(chunk.values[1] == 4.0f);
  CHECK_FALSE(chunk.values_at(0).has_value());
  chunk.reset(*optimizer);
  CHECK(chunk.version == 0);
  CHECK(chunk.values[1] == 2.0f);
  CHECK(chunk.values_at(0).has_value());
}

TEST_CASE("shard chunk - state_of finds a worker's compression state or nothing") {
  const auto optimizer = sgd(0.1f);
  ShardChunk chunk = chunk_of(3, {0.0f}, *optimizer);
  chunk.worker_state[1] = {7.0f};
  REQUIRE(chunk.state_of(1) != nullptr);
  CHECK(chunk.state_of(1)->at(0) == 7.0f);
  CHECK(chunk.state_of(0) == nullptr);
  CHECK(chunk.snapshot().worker_state.at(1).at(0) == 7.0f);
}

TEST_CASE("shard snapshots - a backup is handed over once, when its last chunk reaches the point") {
  const auto optimizer = sgd(0.1f);
  ShardChunk a = chunk_of(0, {1.0f}, *optimizer), b = chunk_of(1, {2.0f}, *optimizer);
  std::vector<std::pair<uint64_t, size_t>> ready;
  ShardSnapshots snapshots;
  snapshots.offer(a, 2);  // not enabled: nothing
  snapshots.enable([](uint64_t v) { return v % 2 == 0 && v > 0; },
                   [&](uint64_t v, std::vector<ChunkSnapshot> chunks) { ready.emplace_back(v, chunks.size()); });
  a.version = 1;
  snapshots.offer(a, 2);  // not a backup point
  a.version = 2;
  snapshots.offer(a, 2);
  snapshots.offer(a, 2);  // the same chunk twice counts once
  CHECK(ready.empty());
  a.version = 4;  // a chunk may run ahead of another to the next point
  snapshots.offer(a, 2);
  b.version = 2;
  snapshots.offer(b, 2);
  REQUIRE(ready.size() == 1);
  CHECK(ready[0] == std::pair<uint64_t, size_t>{2, 2});
  b.version = 4;
  snapshots.offer(b, 2);
  REQUIRE(ready.size() == 2);
  CHECK(ready[1] == std::pair<uint64_t, size_t>{4, 2});
  b.version = 2;  // at or below a point already handed over: ignored
  snapshots.offer(b, 2);
  CHECK(ready.size() == 2);

  // After a rollback the same points form again, from nothing.
  snapshots.clear();
  a.version = 2;
  snapshots.offer(a, 2);
  CHECK(ready.size() == 2);
  snapshots.offer(b, 2);
  CHECK(ready.size() == 3);
}
