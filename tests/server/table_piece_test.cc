// Sparse tables on the servers (server/table_piece.h, docs/DESIGN-NOTES.md "Sparse models"): the
// plan's row pieces, each server making its rows alone, and sync and async steps from compact
// row pushes against the standalone trainer's whole-table arithmetic, bit for bit; backups,
// rollbacks and bad pushes.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/base/rng.h"
#include "common/data/job_spec.h"
#include "server/parameter_shard.h"
#include "tests/table_steps.h"

using namespace pstrain;
using namespace pstrain::testing;

namespace {

constexpr int64_t kRows = 1001, kDim = 4;
constexpr uint32_t kServers = 3;

JobSpec table_job(const std::string& optimizer, const std::string& training) {
  return parse_job_spec(R"({"dataset": {"name": "clicks"},
    "model": {"input_shape": [2], "seed": 11, "layers": [
      {"type": "embedding", "input_dim": )" + std::to_string(kRows) + R"(, "output_dim": )" + std::to_string(kDim) +
                        R"(, "sparse": true},
      {"type": "flatten"}, {"type": "dense", "units": 3}]},
    "optimizer": )" + optimizer + R"(, "training": )" + training + "}");
}

struct Cluster {
  JobSpec spec;
  ParamLayout layout;
  std::vector<ChunkInfo> table;
  std::vector<ParameterShard> shards;

  Cluster(const std::string& optimizer, const std::string& training, uint32_t workers = 2)
      : spec(table_job(optimizer, training)), layout(make_param_layout(spec.model)), table(plan_chunks(layout, kServers)) {
    for (uint32_t s = 0; s < kServers; ++s) shards.emplace_back(shard_config_of(spec), table, s, workers);
  }
  size_t table_param() const { return layout.dense_count(); }
  const ChunkInfo& piece(uint32_t server) const {
    for (const ChunkInfo& c : table) {
      if (c.is_table_piece() && c.server == server) return c;
    }
    FAIL("no piece on server " << server);
    return table.front();
  }
  // The whole table as the pieces hold it now (slot -1), or the optimizer's slot `slot` of it.
  std::vector<float> gathered(int slot = -1) const {
    std::vector<float> whole(static_cast<size_t>(kRows * kDim));
    for (uint32_t s = 0; s < kServers; ++s) {
      const ShardChunk& chunk = shards[s].chunk(piece(s).key);
      const float* values =
          slot < 0 ? chunk.values.data() : chunk.optimizer_state.slots[static_cast<size_t>(slot)].values.data();
      for (size_t local = 0; local * kDim < chunk.size(); ++local) {
        std::copy_n(values + local * kDim, kDim, whole.data() + (s + local * kServers) * kDim);
      }
    }
    return whole;
  }
};

// The part of `slice` that falls in `piece`.
SliceRows rows_of(const SliceRows& slice, const ChunkInfo& piece) {
  SliceRows part;
  for (size_t i = 0; i < slice.rows.size(); ++i) {
    if (!in_piece(piece, slice.rows[i])) continue;
    part.rows.push_back(slice.rows[i]);
    part.grads.insert(part.grads.end(), slice.grads.begin() + static_cast<long>(i * kDim),
                      slice.grads.begin() + static_cast<long>((i + 1) * kDim));
  }
  return part;
}

PushRequest table_push(const ChunkInfo& piece, uint64_t step, uint32_t slice, uint32_t examples, const SliceRows& part) {
  PushRequest r;
  r.key = piece.key;
  r.step = step;
  r.slice = slice;
  r.slice_count = 3;
  r.worker = slice;
  r.examples = examples;
  r.base_version = step;
  r.rows = part.rows;
  r.gradient = part.grads;
  return r;
}

// Runs `steps` sync steps of 3 slices (with 2, the order of the sum would not show: a + b == b + a) on the cluster and the trainer's arithmetic side by side.
void check_sync_steps(const std::string& optimizer_json, bool lazy, int steps) {
  Cluster cluster(optimizer_json, R"({"mode": "sync", "global_batch_size": 96})", 3);
  const ParamInfo& info = cluster.layout.params()[cluster.table_param()];
  std::vector<float> all(cluster.layout.total_size());
  glorot_uniform_init(cluster.layout, cluster.spec.model.seed, all.data());
  std::vector<float> whole(all.begin() + static_cast<long>(info.offset), all.begin() + static_cast<long>(info.offset + info.size));
  REQUIRE(cluster.gathered() == whole);
  const auto optimizer = optim::make_optimizer(cluster.spec.optimizer);
  optim::OptimizerState state = optimizer->make_state(whole.size());
  Rng rng(5);
  for (int step = 0; step < steps; ++step) {
    // Step 2: slice 1 touches nothing (a batch of other ids); every step some pieces get nothing
    // from a slice.
    std::vector<SliceRows> slices{random_rows(rng, kRows, kDim, 300), random_rows(rng, kRows, kDim, step == 2 ? 0 : 200), random_rows(rng, kRows, kDim, 300)};
    trainer_step(*optimizer, lazy, slices, 96, kDim, whole, state);
    int replies = 0;
    for (uint32_t s = 0; s < kServers; ++s) {
      const ChunkInfo& piece = cluster.piece(s);
      std::vector<SliceRows> parts{rows_of(slices[0], piece), rows_of(slices[1], piece), rows_of(slices[2], piece)};
      // Out of order: the sum is in slice order whatever order the pushes come in.
      for (uint32_t slice : {2u, 0u, 1u}) {
        const PushRequest push = table_push(piece, static_cast<uint64_t>(step), slice, 32, parts[slice]);
        CHECK(table_push_error(cluster.shards[s].chunk(piece.key), push.rows, push.gradient.size()).empty());
        cluster.shards[s].push(push, [&](PushOutcome o) {
          CHECK(o.applied);
          CHECK(o.version == static_cast<uint64_t>(step + 1));
          ++replies;
        });
      }
    }
    CHECK(replies == 3 * static_cast<int>(kServers));
    CHECK(cluster.gathered() == whole);
    // The slots too (they carry the summed gradient almost as it is, where the values' rounding
    // could hide a different order of the sum).
    for (size_t slot = 0; slot < state.slots.size(); ++slot) {
      const auto& expected = state.slots[slot].values;
      CHECK(cluster.gathered(static_cast<int>(slot)) == std::vector<float>(expected.begin(), expected.end()));
    }
  }
}

}  // namespace

TEST_CASE("A sparse table is planned as one piece of rows per server, each made alone") {
  Cluster cluster(R"({"type": "sgd", "learning_rate": 0.1})", R"({"mode": "sync", "global_batch_size": 64})");
  size_t pieces = 0, table_floats = 0;
  for (const ChunkInfo& c : cluster.table) {
    if (!c.is_table_piece()) {
      CHECK(c.param < cluster.table_param());  // dense chunks cover the dense tensors only
      continue;
    }
    ++pieces;
    CHECK(c.param == cluster.table_param());
    CHECK(c.stride == kServers);
    CHECK(c.offset == c.server);  // a small table: one piece a server, its first row the server's
    CHECK(c.size == piece_rows(c, kRows) * kDim);
    table_floats += c.size;
  }
  CHECK(pieces == kServers);
  CHECK(table_floats == static_cast<size_t>(kRows * kDim));
  CHECK(piece_rows(cluster.piece(0), kRows) == 334);
  CHECK(piece_rows(cluster.piece(2), kRows) == 333);
  // Fewer rows than servers: the servers without a row get no piece.
  CHECK(piece_rows(ChunkInfo{0, 0, 4, 0, 4, 5}, 3) == 0);

  // A large table: k pieces a server, none over kMaxTablePieceFloats, row r on server r mod S.
  {
    const JobSpec big = parse_job_spec(R"({"dataset": {"name": "clicks"},
      "model": {"input_shape": [1], "layers": [
        {"type": "embedding", "input_dim": 600001, "output_dim": 8, "sparse": true},
        {"type": "flatten"}, {"type": "dense", "units": 1}]},
      "optimizer": {"type": "sgd", "learning_rate": 0.1}, "training": {"global_batch_size": 8}})");
    const ParamLayout layout = make_param_layout(big.model);
    const std::vector<ChunkInfo> plan = plan_chunks(layout, 2);
    std::vector<size_t> firsts;
    size_t floats = 0;
    for (const ChunkInfo& c : plan) {
      if (!c.is_table_piece()) continue;
      CHECK(c.stride == 6);  // 2.4M floats a server: 3 pieces each
      CHECK(c.server == c.offset % 2);
      CHECK(c.size <= kMaxTablePieceFloats);
      CHECK(fits_layout(c, layout));
      firsts.push_back(c.offset);
      floats += c.size;
    }
    std::sort(firsts.begin(), firsts.end());
    CHECK(firsts == std::vector<size_t>{0, 1, 2, 3, 4, 5});
    CHECK(floats == size_t{600001} * 8);
  }

  // Every server makes its rows as the whole model's init makes them, and the dense chunks too.
  std::vector<float> all(cluster.layout.total_size());
  glorot_uniform_init(cluster.layout, cluster.spec.model.seed, all.data());
  const ParamInfo& info = cluster.layout.params()[cluster.table_param()];
  CHECK(cluster.gathered() == std::vector<float>(all.begin() + static_cast<long>(info.offset), all.end()));
  for (const ChunkInfo& c : cluster.table) {
    if (c.is_table_piece()) continue;
    const ShardChunk& chunk = cluster.shards[c.server].chunk(c.key);
    const float* begin = all.data() + cluster.layout.params()[c.param].offset + c.offset;
    CHECK(std::equal(chunk.values.begin(), chunk.values.end(), begin));
  }
  // A lazy piece keeps no whole-piece copies beside its values and slots.
  const ShardChunk& piece = cluster.shards[0].chunk(cluster.piece(0).key);
  CHECK(piece.table_dim == static_cast<size_t>(kDim));
  CHECK(piece.scratch.empty());
  CHECK(piece.previous.empty());
  CHECK(piece.initial.empty());
}

TEST_CASE("Sync steps of compact row pushes equal the trainer's whole-table update bit for bit") {
  SUBCASE("Adam, lazy") { check_sync_steps(R"({"type": "adam", "learning_rate": 0.01})", true, 5); }
  SUBCASE("Adagrad, lazy") { check_sync_steps(R"({"type": "adagrad", "learning_rate": 0.2})", true, 5); }
  SUBCASE("SGD with momentum and weight decay, lazy") {
    check_sync_steps(R"({"type": "sgd", "learning_rate": 0.1, "momentum": 0.9, "weight_decay": 0.01})", true, 5);
  }
  SUBCASE("Adam, dense (Keras' semantics)") {
    check_sync_steps(R"({"type": "adam", "learning_rate": 0.01, "sparse_updates": "dense"})", false, 5);
  }
}

TEST_CASE("An async push applies its rows at once, and backups, restores and resets keep pieces whole") {
  Cluster cluster(R"({"type": "adam", "learning_rate": 0.01})",
                  R"({"mode": "async", "global_batch_size": 32, "async_lr": "constant"})", 1);
  const ChunkInfo& piece = cluster.piece(1);
  ParameterShard& shard = cluster.shards[1];
  const std::vector<float> initial(shard.chunk(piece.key).values.begin(), shard.chunk(piece.key).values.end());
  Rng rng(9);
  const SliceRows part = rows_of(random_rows(rng, kRows, kDim, 60), piece);
  REQUIRE(!part.rows.empty());

  // The reference: apply_rows on the piece's local rows with the gradient over 32 examples.
  std::vector<float> expected = initial;
  const auto optimizer = optim::make_optimizer(cluster.spec.optimizer);
  optim::OptimizerState state = optimizer->make_state(expected.size());
  std::vector<uint32_t> local;
  for (uint32_t r : part.rows) local.push_back(r / kServers);
  std::vector<float> scaled = part.grads;
  for (float& g : scaled) g *= 1.0f / 32.0f;
  optimizer->apply_rows(expected, kDim, local, scaled, state);

  PushRequest push = table_push(piece, 0, 0, 32, part);
  push.slice_count = 1;  // (async: not read)
  bool replied = false;
  shard.push(push, [&](PushOutcome o) {
    CHECK(o.version == 1);
    replied = true;
  });
  CHECK(replied);
  CHECK(std::equal(expected.begin(), expected.end(), shard.chunk(piece.key).values.begin()));

  // A snapshot, another push, then the snapshot back: the piece and its slots as they were.
  const std::vector<ChunkSnapshot> snaps = shard.snapshot_each();
  std::map<uint32_t, ChunkSnapshot> by_key;
  for (const ChunkSnapshot& s : snaps) by_key.emplace(s.key, s);
  push.step = 1;
  push.base_version = 1;
  shard.push(push, [](PushOutcome) {});
  CHECK(shard.chunk(piece.key).version == 2);
  CHECK(!std::equal(expected.begin(), expected.end(), shard.chunk(piece.key).values.begin()));
  shard.restore(by_key);
  CHECK(shard.chunk(piece.key).version == 1);
  CHECK(std::equal(expected.begin(), expected.end(), shard.chunk(piece.key).values.begin()));
  // A rollback to step 0 makes the piece's rows again.
  shard.reset();
  CHECK(shard.chunk(piece.key).version == 0);
  CHECK(std::equal(initial.begin(), initial.end(), shard.chunk(piece.key).values.begin()));
}

TEST_CASE("A push to a table piece names what is wrong with it") {
  Cluster cluster(R"({"type": "sgd", "learning_rate": 0.1})", R"({"mode": "sync", "global_batch_size": 64})");
  const ShardChunk& chunk = cluster.shards[2].chunk(cluster.piece(2).key);
  const std::vector<uint32_t> good{2, 5, 998}, other{2, 4}, down{5, 2}, beyond{1001 + 2};
  CHECK(table_push_error(chunk, good, 3 * kDim).empty());
  CHECK(table_push_error(chunk, good, 3 * kDim - 1).find("gradient values for 3 rows") != std::string::npos);
  CHECK(table_push_error(chunk, other, 2 * kDim).find("row 4 is not in chunk") != std::string::npos);
  CHECK(table_push_error(chunk, down, 2 * kDim).find("not ascending at 1") != std::string::npos);
  CHECK(table_push_error(chunk, beyond, kDim).find("row 1003 is not in chunk") != std::string::npos);
  const ChunkInfo& dense = cluster.table.front();
  CHECK(table_push_error(cluster.shards[dense.server].chunk(dense.key), good, 3 * kDim).find("not a sparse table") !=
        std::string::npos);
}
