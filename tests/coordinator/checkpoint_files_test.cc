// Big models on the coordinator: a checkpoint is streamed from the replicas on disk to the file's
// pieces, one chunk and one piece at a time (stream_checkpoint), byte for byte the file the whole
// state in memory makes; the ReplicaStore's chunk reads and pins (a pinned version's erase waits
// for the unpin); the JobStore's checkpoint written piece by piece reads back whole.
#include <doctest/doctest.h>
#include <kj/async-io.h>

#include <map>

#include "common/engine/chunk_plan.h"
#include "common/storage/chunk_snapshot.h"
#include "common/storage/kv_store.h"
#include "common/engine/model_spec.h"
#include "common/engine/safetensors.h"
#include "coordinator/store/checkpoint_files.h"
#include "coordinator/store/job_store.h"
#include "coordinator/store/replica_store.h"
#include "tests/test_support.h"

namespace pstrain {
namespace {

// A small MLP (784-24-10: 19,090 parameters) cut into many chunks over 3 servers.
ParamLayout small_layout() {
  ModelSpec m;
  m.input_shape = {784};
  LayerSpec hidden, out;
  hidden.units = 24;
  out.units = 10;
  m.layers = {hidden, out};
  return make_param_layout(m);
}

// Every chunk's encoded snapshot with two slots ("m", "v") and distinct values everywhere, and
// the whole state they add up to.
struct Backup {
  std::map<uint32_t, std::string> blobs;  // by key
  std::vector<float> params;
  optim::OptimizerState state;
};

Backup make_backup(const ParamLayout& layout, const std::vector<ChunkInfo>& chunks, int64_t iterations) {
  Backup b;
  b.params.assign(layout.total_size(), 0.0f);
  b.state.iterations = iterations;
  b.state.slots = {{"m", std::vector<float>(layout.total_size())}, {"v", std::vector<float>(layout.total_size())}};
  for (const ChunkInfo& c : chunks) {
    ChunkSnapshot s;
    s.key = c.key;
    s.version = 7;
    s.optimizer_state.iterations = iterations;
    s.optimizer_state.slots = {{"m", std::vector<float>(c.size)}, {"v", std::vector<float>(c.size)}};
    s.values.resize(c.size);
    const size_t at = layout.params()[c.param].offset + c.offset;
    for (size_t i = 0; i < c.size; ++i) {
      s.values[i] = b.params[at + i] = 0.001f * static_cast<float>(at + i);
      s.optimizer_state.slots[0].values[i] = b.state.slots[0].values[at + i] = -1.0f - static_cast<float>(at + i);
      s.optimizer_state.slots[1].values[i] = b.state.slots[1].values[at + i] = 2.0f + static_cast<float>(at + i);
    }
    b.blobs[c.key] = encode_snapshot(s);
  }
  return b;
}

TEST_CASE("stream_checkpoint: a file of many small pieces, one chunk read at a time, equals the whole file") {
  const ParamLayout layout = small_layout();
  const std::vector<ChunkInfo> chunks = plan_chunks(layout, 3, /*max_chunk_floats=*/1000);
  REQUIRE(chunks.size() > 20);
  const Backup backup = make_backup(layout, chunks, 42);
  const Metadata metadata = {{"format", "pstrain"}, {"step", "7"}};
  const std::string expected = encode_safetensors(layout, backup.params, metadata, &backup.state);

  // Each server's replica in key order, as the ReplicaStore holds it.
  std::map<uint32_t, std::vector<std::string>> replicas;
  for (const ChunkInfo& c : chunks) replicas[c.server].push_back(backup.blobs.at(c.key));
  std::map<size_t, std::string> pieces;
  size_t reads = 0, largest_piece = 0;
  CheckpointIo io;
  io.read_chunk = [&](const ChunkInfo& c, size_t index) -> std::optional<std::string> {
    ++reads;
    const auto& list = replicas.at(c.server);
    if (index >= list.size()) return std::nullopt;
    return list[index];
  };
  io.write_piece = [&](size_t index, std::string piece) {
    CHECK(pieces.count(index) == 0);
    largest_piece = std::max(largest_piece, piece.size());
    pieces[index] = std::move(piece);
  };
  const size_t kPiece = 1000;  // bytes: the 229 kB file in over 200 pieces
  const StreamedFile file = stream_checkpoint(layout, chunks, io, metadata, kPiece);
  CHECK(file.pieces == pieces.size());
  CHECK(file.pieces > 200);
  CHECK(largest_piece <= std::max(kPiece, pieces.at(0).size()));  // the header is a piece of its own
  CHECK(reads == 3 * chunks.size());                                // once per tensor it feeds
  std::string joined;
  for (size_t i = 0; i < file.pieces; ++i) joined += pieces.at(i);
  CHECK(static_cast<int64_t>(joined.size()) == file.bytes);
  CHECK(joined == expected);  // byte for byte

  // What reads it back: the parameters, both slots and the update count.
  const ModelState state = decode_model_state(layout, joined, {"m", "v"});
  CHECK(state.params == backup.params);
  REQUIRE(state.optimizer);
  CHECK(state.optimizer->iterations == 42);
  CHECK(state.optimizer->slots[1].values == backup.state.slots[1].values);

  pieces.clear();
  SUBCASE("a missing chunk fails, naming it") {
    replicas.at(1).pop_back();
    CHECK_THROWS_WITH_AS(stream_checkpoint(layout, chunks, io, metadata, kPiece),
                         doctest::Contains("missing from the backup"), Error);
  }
  SUBCASE("a chunk of another key at a chunk's place fails") {
    std::swap(replicas.at(0)[0], replicas.at(0)[1]);
    CHECK_THROWS_WITH_AS(stream_checkpoint(layout, chunks, io, metadata, kPiece), doctest::Contains("wrong key"), Error);
  }
}

TEST_CASE("ReplicaStore: chunks read one at a time - a pinned version's erase waits for the unpin") {
  testing::TempDir dir;
  std::string error;
  auto kv = KvStore::open(dir.path(), &error);
  REQUIRE_MESSAGE(kv != nullptr, error);
  auto io = kj::setupAsyncIo();
  {
    ReplicaStore replicas(*kv);
    replicas.put({"job-1", 4, 0}, 0, {"a", "b"}, 2).wait(io.waitScope);
    replicas.put({"job-1", 4, 1}, 0, {"c"}, 1).wait(io.waitScope);
    replicas.put({"job-1", 8, 0}, 0, {"d"}, 1).wait(io.waitScope);
    replicas.written().wait(io.waitScope);
    CHECK(replicas.read_chunk({"job-1", 4, 0}, 1) == std::optional<std::string>("b"));
    CHECK(replicas.read_chunk({"job-1", 4, 1}, 0) == std::optional<std::string>("c"));
    CHECK(!replicas.read_chunk({"job-1", 4, 1}, 1));

    replicas.pin("job-1", 4);
    replicas.pin("job-1", 4);
    replicas.erase("job-1", 4);
    replicas.erase_job("job-1");
    replicas.written().wait(io.waitScope);
    CHECK(replicas.read_chunk({"job-1", 4, 0}, 0) == std::optional<std::string>("a"));  // pinned: still there
    CHECK(!replicas.read_chunk({"job-1", 8, 0}, 0));                                    // not pinned: gone
    replicas.unpin("job-1", 4);
    replicas.written().wait(io.waitScope);
    CHECK(replicas.read_chunk({"job-1", 4, 1}, 0) == std::optional<std::string>("c"));  // one pin left
    replicas.unpin("job-1", 4);
    replicas.written().wait(io.waitScope);
    CHECK(!replicas.read_chunk({"job-1", 4, 0}, 0));
    CHECK(!replicas.read_chunk({"job-1", 4, 1}, 0));
  }
}

TEST_CASE("ReplicaStore: whole replicas survive a reopen, partial ones do not count, keep_only deletes other jobs'") {
  testing::TempDir dir;
  std::string error;
  auto kv = KvStore::open(dir.path(), &error);
  REQUIRE_MESSAGE(kv != nullptr, error);
  auto io = kj::setupAsyncIo();
  {
    ReplicaStore replicas(*kv);
    replicas.put({"job-1", 4, 0}, 0, {"a"}, 2).wait(io.waitScope);  // a part of two
    replicas.put({"job-1", 4, 0}, 1, {"b"}, 2).wait(io.waitScope);  // the last: whole
    replicas.put({"job-1", 4, 1}, 0, {"c"}, 1).wait(io.waitScope);
    replicas.put({"job-1", 8, 0}, 0, {"d"}, 2).wait(io.waitScope);  // partial
    replicas.put({"job-2", 6, 0}, 0, {"e"}, 1).wait(io.waitScope);
    replicas.written().wait(io.waitScope);
  }
  {
    ReplicaStore replicas(*kv);
    const auto whole = replicas.whole_replicas("job-1");
    REQUIRE(whole.size() == 2);
    CHECK((whole[0].version == 4 && whole[0].server == 0 && whole[0].chunks == 2));
    CHECK((whole[1].version == 4 && whole[1].server == 1 && whole[1].chunks == 1));
    CHECK(replicas.read({"job-1", 4, 0}, 0, 1 << 20).wait(io.waitScope) == std::vector<std::string>{"a", "b"});
    CHECK(replicas.whole_replicas("job-2").size() == 1);
    replicas.keep_only({"job-1"});
    replicas.written().wait(io.waitScope);
    CHECK(replicas.whole_replicas("job-2").empty());
    CHECK(!replicas.read_chunk({"job-2", 6, 0}, 0));
    replicas.erase("job-1", 8);  // the partial one's chunk goes too, as after a reopen it was counted
    replicas.written().wait(io.waitScope);
    CHECK(!replicas.read_chunk({"job-1", 8, 0}, 0));
  }
  ReplicaStore again(*kv);
  CHECK(again.whole_replicas("job-1").size() == 2);
  CHECK(again.whole_replicas("job-2").empty());  // and its marker with it
  again.erase_job("job-1");
  again.written().wait(io.waitScope);
  ReplicaStore last(*kv);
  CHECK(last.whole_replicas("job-1").empty());
}

TEST_CASE("JobStore: a checkpoint written piece by piece (header last) reads back whole, also after a reopen") {
  testing::TempDir dir;
  std::string error;
  auto kv = KvStore::open(dir.path(), &error);
  REQUIRE_MESSAGE(kv != nullptr, error);
  CheckpointInfo info;
  info.step = 12;
  info.bytes = 9;
  {
    JobStore store(*kv);
    JobRecord r;
    r.id = "job-1";
    store.add(r);
    store.write_checkpoint_piece("job-1", 12, 1, "def");
    store.write_checkpoint_piece("job-1", 12, 2, "ghi");
    store.write_checkpoint_piece("job-1", 12, 0, "abc");
    store.add_checkpoint("job-1", info, 3, 2);
    CHECK(store.checkpoint_file("job-1", 12) == std::optional<std::string>("abcdefghi"));
    store.flush();
  }
  JobStore reopened(*kv);
  reopened.load();
  CHECK(reopened.checkpoint_file("job-1", 12) == std::optional<std::string>("abcdefghi"));

  // Without a disk: the same, in memory.
  const std::unique_ptr<KvStore> in_memory = KvStore::in_memory();
  JobStore memory(*in_memory);
  JobRecord r;
  r.id = "job-2";
  memory.add(r);
  memory.write_checkpoint_piece("job-2", 12, 1, "def");
  memory.write_checkpoint_piece("job-2", 12, 0, "abc");
  info.bytes = 6;
  memory.add_checkpoint("job-2", info, 2, 2);
  CHECK(memory.checkpoint_file("job-2", 12) == std::optional<std::string>("abcdef"));
}

}  // namespace
}  // namespace pstrain
