// The ParameterServer RPC layer in-process (a local capability, no sockets), over a real store
// thread and RocksDB: a restore's read happens off the event loop, the server answers other
// calls meanwhile, and a restore that the job outran while it read fails instead of applying.
#include <doctest/doctest.h>

#include <bit>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/engine/chunk_plan.h"
#include "common/engine/compression.h"
#include "common/engine/simd/bf16_product.h"
#include "common/rpc/message_limits.h"
#include "common/rpc/rpc_util.h"
#include "server/parameter_server.h"
#include "tests/rpc_support.h"
#include "tests/server/store_fixture.h"

using namespace pstrain;

namespace {

struct ServerFixture : testing::StoreFixture {
  JobSpec spec = testing::mlp_job(32, 16, 1);
  std::vector<ChunkInfo> chunks = plan_chunks(make_param_layout(spec.model), 1);
  proto::ParameterServer::Client server{kj::heap<ParameterServerImpl>(&store)};

  void configure() { testing::configure_job(server, ws, "job", job_spec_to_json(spec), chunks, 1); }
  // Sync step `step` of the only worker on every chunk, with a gradient of `g` everywhere.
  void train_step(uint64_t step, float g) {
    kj::Vector<kj::Promise<void>> pushes;
    for (const ChunkInfo& c : chunks) {
      auto request = server.pushRequest();
      request.setJobId("job");
      request.setKey(c.key);
      request.setStep(step);
      request.setSliceCount(1);
      request.setExamples(1);
      const std::vector<float> gradient(c.size, g);
      rpc::set_tensor(request.getGradient().initDense(), gradient);
      pushes.add(request.send().ignoreResult());
    }
    kj::joinPromises(pushes.releaseAsArray()).wait(ws);
  }
  std::vector<float> values(uint32_t key) {
    auto request = server.pullRequest();
    request.setJobId("job");
    request.setKey(key);
    auto reply = request.send().wait(ws);
    const auto view = rpc::tensor_view(reply.getValues(), chunks[key].size, "values");
    return {view.begin(), view.end()};
  }
  // (highest, lowest) version of the job's chunks.
  std::pair<uint64_t, uint64_t> versions() {
    auto request = server.versionsRequest();
    request.setJobId("job");
    auto reply = request.send().wait(ws);
    return {reply.getCurrentVersion(), reply.getLowestVersion()};
  }
  void backup_now(uint64_t version) {
    auto request = server.backupNowRequest();
    request.setJobId("job");
    request.setVersion(version);
    request.send().wait(ws);  // queued on the store thread, not yet written
  }
  kj::Promise<void> restore(uint64_t version, uint64_t generation, bool from_scratch = false) {
    auto request = server.restoreRequest();
    request.setJobId("job");
    request.setVersion(version);
    request.setGeneration(generation);
    request.setFromScratch(from_scratch);
    return request.send().ignoreResult();
  }
};

}  // namespace

TEST_CASE("parameter server - a restore reads its backup off the event loop while the server answers other calls") {
  ServerFixture f;
  f.configure();
  const std::vector<float> initial = f.values(0);
  f.train_step(0, 0.5f);
  const std::vector<float> at_1 = f.values(0);
  f.backup_now(1);
  f.train_step(1, 0.5f);
  CHECK(f.values(0) != at_1);
  CHECK(f.versions() == std::make_pair(uint64_t{2}, uint64_t{2}));
  {
    auto request = f.server.backupAtRequest();  // the old way of asking: still the same answer
    request.setJobId("job");
    request.setVersion(UINT64_MAX);
    auto reply = request.send().wait(f.ws);
    CHECK(reply.getCurrentVersion() == 2);
    CHECK(reply.getLowestVersion() == 2);
  }

  auto blocked = f.gate.blocked(f.store);
  auto restoring = f.restore(1, 1);
  auto listing = f.server.backupsRequest();
  listing.setJobId("job");
  auto listed = listing.send();
  // While the store thread is busy, the loop serves other calls, and the shard is untouched.
  CHECK(f.versions() == std::make_pair(uint64_t{2}, uint64_t{2}));
  CHECK(f.values(0) != at_1);
  CHECK_FALSE(restoring.poll(f.ws));
  CHECK_FALSE(listed.poll(f.ws));

  f.gate.open();
  CHECK(blocked.wait(f.ws));
  restoring.wait(f.ws);  // saw the backup queued before it
  CHECK(f.versions() == std::make_pair(uint64_t{1}, uint64_t{1}));
  CHECK(f.values(0) == at_1);
  CHECK(f.values(0) != initial);
  const auto list = listed.wait(f.ws).getVersions();
  REQUIRE(list.size() == 1);
  CHECK(list[0] == 1);
}

TEST_CASE("parameter server - a restore the job outran while its backup was read fails and changes nothing") {
  ServerFixture f;
  f.configure();
  const std::vector<float> initial = f.values(0);
  f.train_step(0, 0.5f);
  f.backup_now(1);
  f.train_step(1, 0.5f);
  const std::vector<float> at_2 = f.values(0);
  auto blocked = f.gate.blocked(f.store);
  auto restoring = f.restore(1, 1);

  SUBCASE("the job was dropped") {
    auto drop = f.server.dropJobRequest();
    drop.setJobId("job");
    drop.send().wait(f.ws);
    f.gate.open();
    CHECK(testing::failure_of(kj::mv(restoring), f.ws).find("the job was dropped or reconfigured") != std::string::npos);
  }
  SUBCASE("the job was configured afresh") {
    f.configure();
    f.gate.open();
    CHECK(testing::failure_of(kj::mv(restoring), f.ws).find("the job was dropped or reconfigured") != std::string::npos);
    CHECK(f.versions() == std::make_pair(uint64_t{0}, uint64_t{0}));
    CHECK(f.values(0) == initial);
  }
  SUBCASE("a newer restore came in") {
    auto from_scratch = f.restore(0, 1, /*from_scratch=*/true);
    f.gate.open();
    CHECK(testing::failure_of(kj::mv(restoring), f.ws).find("a newer restore") != std::string::npos);
    from_scratch.wait(f.ws);
    CHECK(f.versions() == std::make_pair(uint64_t{0}, uint64_t{0}));
    CHECK(f.values(0) == initial);
  }
  SUBCASE("a newer plan settled the job") {
    auto settle = f.server.settleRequest();
    settle.setJobId("job");
    settle.setVersion(2);
    settle.setGeneration(5);
    settle.send().wait(f.ws);
    f.gate.open();
    CHECK(testing::failure_of(kj::mv(restoring), f.ws).find("a newer plan") != std::string::npos);
    CHECK(f.versions() == std::make_pair(uint64_t{2}, uint64_t{2}));
    CHECK(f.values(0) == at_2);
  }
  CHECK(blocked.wait(f.ws));
}

// Regression (fuzz/param_server_fuzz.cc, out of memory): configure's worker count sized the
// shard's per-worker state before anything else was checked; 2^31 workers cost gigabytes. Now the
// call fails (as any bad call: that call only) and the server goes on serving.
TEST_CASE("parameter server - a configure with an absurd worker count fails and the server goes on") {
  ServerFixture f;
  CHECK_THROWS_AS(testing::configure_job(f.server, f.ws, "job", job_spec_to_json(f.spec), f.chunks, 1u << 31),
                  kj::Exception);
  f.configure();
  CHECK(f.values(0).size() == f.chunks[0].size);
}

namespace {

// Sync step 0 of the only worker on chunk 0; `fill` sets the gradient (and reply options).
template <typename Fill>
capnp::Response<proto::ParameterServer::PushResults> push_chunk0(ServerFixture& f, Fill fill) {
  auto request = f.server.pushRequest();
  request.setJobId("job");
  request.setKey(0);
  request.setStep(0);
  request.setSliceCount(1);
  request.setExamples(1);
  fill(request);
  return request.send().wait(f.ws);
}

}  // namespace

TEST_CASE("parameter server - fp16, bf16 and topk pushes update as the same float32 gradient pushed dense") {
  const size_t n = ServerFixture().chunks[0].size;
  // Chunk 0's values after one push on a fresh server (one at a time: one event loop per thread),
  // and the reply's values when it came in half precision.
  struct After {
    std::vector<float> values, replied;
    bool whole = false;  // the reply's values came whole, in float32
  };
  auto after = [&](auto fill) {
    ServerFixture f;
    f.configure();
    auto reply = push_chunk0(f, fill);
    After a{f.values(0), {}, reply.getValues().isWhole()};
    if (reply.getValues().isHalf()) {
      a.replied.resize(n);
      decode_half(reply.getValues().getHalf().begin(), a.replied);
    }
    if (reply.getValues().isBfloat16()) {
      REQUIRE(reply.getValues().getBfloat16().size() == 2 * n);
      a.replied.resize(n);
      decode_bfloat16(reply.getValues().getBfloat16().begin(), a.replied);
    }
    return a;
  };
  // Values a half holds exactly, so the dense push and the fp16 push carry the same gradient.
  std::vector<float> gradient(n);
  for (size_t i = 0; i < n; ++i) gradient[i] = half_to_float(float_to_half(0.001f * static_cast<float>(i % 97) - 0.05f));
  const After dense = after([&](auto& r) { rpc::set_tensor(r.getGradient().initDense(), gradient); });
  const After half = after([&](auto& r) {
    auto data = r.getGradient().initHalf(static_cast<unsigned>(n * 2));
    encode_half(gradient, data.begin());
    r.setReplyHalf(true);
  });
  CHECK(half.values == dense.values);  // stored float32, as the dense push left them
  REQUIRE(half.replied.size() == n);
  for (size_t i = 0; i < n; ++i) REQUIRE(half.replied[i] == half_to_float(float_to_half(dense.values[i])));

  // bf16: values a bfloat16 holds exactly (and some a half could not: 1e-30, 3e20), replies float32.
  std::vector<float> wide(n);
  for (size_t i = 0; i < n; ++i) {
    const float v = i % 5 == 0 ? 1e-30f : i % 7 == 0 ? 3e20f : 0.001f * static_cast<float>(i % 97) - 0.05f;
    wide[i] = bfloat16_to_float(float_to_bfloat16(v));
  }
  const After dense_wide = after([&](auto& r) { rpc::set_tensor(r.getGradient().initDense(), wide); });
  const After bf16 = after([&](auto& r) {
    auto data = r.getGradient().initBfloat16(static_cast<unsigned>(n * 2));
    encode_bfloat16(wide, data.begin());
  });
  CHECK(bf16.values == dense_wide.values);
  CHECK(bf16.whole);  // float32, not half
  CHECK(bf16.replied.empty());

  // replyBfloat16 (a mixed-precision worker's rounded kernels): the stored float32 values, rounded
  // as bf16_round rounds them (to nearest even, a denormal to zero), whatever the push's coding.
  const After rounded = after([&](auto& r) {
    rpc::set_tensor(r.getGradient().initDense(), gradient);
    r.setReplyBfloat16(true);
  });
  CHECK(rounded.values == dense.values);
  CHECK_FALSE(rounded.whole);
  REQUIRE(rounded.replied.size() == n);
  for (size_t i = 0; i < n; ++i) {
    REQUIRE(std::bit_cast<uint32_t>(rounded.replied[i]) == uint32_t{simd::bf16_round(dense.values[i])} << 16);
  }
  {  // and not with fp16 replies or with ranges: the call fails and changes nothing
    ServerFixture f;
    f.configure();
    const std::vector<float> before = f.values(0);
    auto both = f.server.pushRequest();
    both.setJobId("job");
    both.setSliceCount(1);
    both.setExamples(1);
    rpc::set_tensor(both.getGradient().initDense(), gradient);
    both.setReplyHalf(true);
    both.setReplyBfloat16(true);
    CHECK(testing::failure_of(both.send(), f.ws).find("exclude each other") != std::string::npos);
    auto ranges = f.server.pushRequest();
    ranges.setJobId("job");
    ranges.setSliceCount(1);
    ranges.setExamples(1);
    rpc::set_tensor(ranges.getGradient().initDense(), gradient);
    ranges.getReply().initRanges(0);
    ranges.setReplyBfloat16(true);
    CHECK(testing::failure_of(ranges.send(), f.ws).find("replyBfloat16 needs reply.whole") != std::string::npos);
    CHECK(f.values(0) == before);
  }

  // topk: entries 3 and n - 1 only; the dense push of the same sparse gradient gives the same values.
  std::vector<float> sparse(n, 0.0f);
  sparse[3] = 0.5f;
  sparse[n - 1] = -0.25f;
  const After dense_sparse = after([&](auto& r) { rpc::set_tensor(r.getGradient().initDense(), sparse); });
  const After topk = after([&](auto& r) {
    auto t = r.getGradient().initTopk();
    auto indices = t.initIndices(2);
    indices.set(0, 3);
    indices.set(1, static_cast<uint32_t>(n - 1));
    const float values[2] = {0.5f, -0.25f};
    auto data = t.initValues(sizeof values);
    std::memcpy(data.begin(), values, sizeof values);
  });
  CHECK(topk.values == dense_sparse.values);
  CHECK(topk.values != dense.values);

  // powersgd: rank 2 factors of the chunk as rows of 16; products exact in float32, so the dense
  // push of P Q^T (worked out here by hand) gives the same values.
  REQUIRE(n % 16 == 0);
  const size_t columns = 16, rows = n / columns, rank = 2;
  std::vector<float> p(rows * rank), q(columns * rank), product(n);
  for (size_t i = 0; i < rows; ++i) p[i * rank] = 0.5f * static_cast<float>(i % 4), p[i * rank + 1] = i % 2 ? 0.25f : -1.0f;
  // q is Q transposed: rank x columns.
  for (size_t c = 0; c < columns; ++c) q[c] = static_cast<float>(c % 3) - 1.0f, q[columns + c] = 0.125f * static_cast<float>(c);
  for (size_t i = 0; i < rows; ++i) {
    for (size_t c = 0; c < columns; ++c) product[i * columns + c] = p[i * rank] * q[c] + p[i * rank + 1] * q[columns + c];
  }
  const After dense_product = after([&](auto& r) { rpc::set_tensor(r.getGradient().initDense(), product); });
  const After low_rank = after([&](auto& r) {
    auto l = r.getGradient().initLowRank();
    l.setColumns(static_cast<uint32_t>(columns));
    l.setRank(static_cast<uint32_t>(rank));
    std::memcpy(l.initP(static_cast<unsigned>(p.size() * 4)).begin(), p.data(), p.size() * 4);
    std::memcpy(l.initQ(static_cast<unsigned>(q.size() * 4)).begin(), q.data(), q.size() * 4);
  });
  CHECK(low_rank.values == dense_product.values);
  CHECK(low_rank.values != dense.values);
}

TEST_CASE("parameter server - malformed compressed pushes fail naming the field, and the server goes on") {
  ServerFixture f;
  f.configure();
  const size_t n = f.chunks[0].size;
  auto fails_with = [&](auto fill, const std::string& field) {
    try {
      push_chunk0(f, fill);
      FAIL("accepted a push with a bad " << field);
    } catch (const kj::Exception& e) {
      CHECK_MESSAGE(std::string(e.getDescription().cStr()).find(field) != std::string::npos, e.getDescription().cStr());
    }
  };
  fails_with([&](auto& r) { r.getGradient().initHalf(static_cast<unsigned>(n * 2 - 2)); }, "gradient.half");
  fails_with([&](auto& r) { r.getGradient().initBfloat16(static_cast<unsigned>(n * 2 + 2)); }, "gradient.bfloat16");
  fails_with([&](auto& r) {
    auto t = r.getGradient().initTopk();
    auto indices = t.initIndices(2);
    indices.set(0, 5);
    indices.set(1, 5);  // not strictly ascending
    t.initValues(8);
  }, "gradient.topk.indices");
  fails_with([&](auto& r) {
    auto t = r.getGradient().initTopk();
    t.initIndices(1).set(0, static_cast<uint32_t>(n));  // outside the chunk
    t.initValues(4);
  }, "gradient.topk.indices");
  fails_with([&](auto& r) {
    auto t = r.getGradient().initTopk();
    t.initIndices(2);
    t.initValues(4);
  }, "gradient.topk.values");
  auto low_rank = [&](uint32_t columns, uint32_t rank, size_t p_floats, size_t q_floats) {
    return [=](auto& r) {
      auto l = r.getGradient().initLowRank();
      l.setColumns(columns);
      l.setRank(rank);
      l.initP(static_cast<unsigned>(p_floats * 4));
      l.initQ(static_cast<unsigned>(q_floats * 4));
    };
  };
  const size_t rows = n / 16;
  fails_with(low_rank(0, 1, rows, 16), "gradient.lowRank.columns");
  fails_with(low_rank(static_cast<uint32_t>(n + 1), 1, 1, n + 1), "gradient.lowRank.columns");
  fails_with(low_rank(16, 0, 0, 0), "gradient.lowRank.rank");
  fails_with(low_rank(16, 17, rows * 17, 16 * 17), "gradient.lowRank.rank");  // above min(rows, columns)
  fails_with(low_rank(16, 2, rows * 2 - 1, 32), "gradient.lowRank.p");
  fails_with(low_rank(16, 2, rows * 2, 31), "gradient.lowRank.q");
  CHECK(f.values(0).size() == n);
}

TEST_CASE("parameter server - a push's workerState comes back with a pull that asks for its slice at that version") {
  ServerFixture f;
  f.configure();
  const size_t n = f.chunks[0].size;
  const std::vector<float> gradient(n, 0.5f), state{1.0f, -2.0f, 3.5f};
  push_chunk0(f, [&](auto& r) {
    rpc::set_tensor(r.getGradient().initDense(), gradient);
    std::memcpy(r.initWorkerState(static_cast<unsigned>(state.size() * 4)).begin(), state.data(), state.size() * 4);
  });
  auto pull = [&](bool with_state, uint32_t of) {
    auto request = f.server.pullRequest();
    request.setJobId("job");
    request.setKey(0);
    request.setMinVersion(1);
    request.setWithState(with_state);
    request.setStateOf(of);
    return request.send().wait(f.ws);
  };
  const auto mine = pull(true, 0);
  CHECK(mine.getVersion() == 1);
  REQUIRE(mine.getWorkerState().size() == state.size() * 4);
  std::vector<float> back(state.size());
  std::memcpy(back.data(), mine.getWorkerState().begin(), state.size() * 4);
  CHECK(back == state);
  CHECK(pull(true, 1).getWorkerState().size() == 0);   // another slice's: none
  CHECK(pull(false, 0).getWorkerState().size() == 0);  // not asked for
  // Malformed: not float32, or more than twice the chunk.
  try {
    push_chunk0(f, [&](auto& r) {
      rpc::set_tensor(r.getGradient().initDense(), gradient);
      r.initWorkerState(6);
    });
    FAIL("accepted a workerState of 6 bytes");
  } catch (const kj::Exception& e) {
    CHECK(std::string(e.getDescription().cStr()).find("workerState") != std::string::npos);
  }
}

TEST_CASE("parameter server - async putState: kept with the chunk, in the backup backupNow takes, back after a restore, "
          "a late one of an ended plan dropped, and a bad call changes nothing") {
  ServerFixture f;
  f.spec.training.mode = TrainingMode::kAsync;
  f.configure();
  const size_t n = f.chunks[0].size;
  auto put = [&](std::vector<uint32_t> keys, std::vector<std::vector<float>> states, uint64_t generation = 0) {
    auto request = f.server.putStateRequest();
    request.setJobId("job");
    request.setWorker(0);
    request.setGeneration(generation);
    auto k = request.initKeys(static_cast<unsigned>(keys.size()));
    for (unsigned i = 0; i < keys.size(); ++i) k.set(i, keys[i]);
    auto s = request.initStates(static_cast<unsigned>(states.size()));
    for (unsigned i = 0; i < states.size(); ++i) {
      std::memcpy(s.init(i, static_cast<unsigned>(states[i].size() * 4)).begin(), states[i].data(), states[i].size() * 4);
    }
    return request.send().wait(f.ws);
  };
  auto state_of = [&](uint32_t worker) {
    auto request = f.server.pullRequest();
    request.setJobId("job");
    request.setKey(0);
    request.setWithState(true);
    request.setStateOf(worker);
    const auto reply = request.send().wait(f.ws);
    std::vector<float> out(reply.getWorkerState().size() / 4);
    if (!out.empty()) std::memcpy(out.data(), reply.getWorkerState().begin(), out.size() * 4);  // (none: no pointer)
    return out;
  };
  auto fails_with = [&](std::vector<uint32_t> keys, std::vector<std::vector<float>> states, const std::string& says) {
    try {
      put(std::move(keys), std::move(states));
      FAIL("a bad putState was accepted");
    } catch (const kj::Exception& e) {
      CHECK_MESSAGE(std::string(e.getDescription().cStr()).find(says) != std::string::npos, e.getDescription().cStr());
    }
  };
  const std::vector<float> first{1.0f, 2.0f, 3.0f}, second{-4.0f, 5.0f};
  put({0}, {first});
  CHECK(state_of(0) == first);
  CHECK(state_of(1).empty());  // another worker's: none
  f.backup_now(7);
  put({0}, {second});
  CHECK(state_of(0) == second);
  // Malformed: a state per key, float32, at most twice the chunk and a position; a key this
  // server holds. Each fails whole, before any state changes.
  fails_with({0, 0}, {first}, "one state per key");
  fails_with({0}, {std::vector<float>(2 * n + 3)}, "at most twice");
  fails_with({0, 999}, {first, first}, "999");
  CHECK(state_of(0) == second);
  // The backup at 7 holds the state put before it.
  f.restore(7, 1).wait(f.ws);
  CHECK(state_of(0) == first);
  // A late putState of the plan the restore ended (generation 0, below the restore's 1) is
  // dropped: the restored state stays for the session resuming from it. The new plan's is kept.
  put({0}, {second}, 0);
  CHECK(state_of(0) == first);
  put({0}, {second}, 1);
  CHECK(state_of(0) == second);
}

TEST_CASE("parameter server - putState is refused for a sync job (sync states ride on pushes)") {
  ServerFixture f;
  f.configure();
  auto request = f.server.putStateRequest();
  request.setJobId("job");
  request.initKeys(1).set(0, 0);
  request.initStates(1).init(0, 4);
  try {
    request.send().wait(f.ws);
    FAIL("putState accepted on a sync job");
  } catch (const kj::Exception& e) {
    CHECK(std::string(e.getDescription().cStr()).find("async") != std::string::npos);
  }
}

namespace {

// Fills `p` as slice `slice` of 2's push of step 0 on chunk `c`, with a gradient of `g` (plus
// the value's index, so that entries differ) everywhere.
void fill_step0_push(proto::ParameterServer::PushParams::Builder p, const ChunkInfo& c, uint32_t slice, float g) {
  p.setJobId("job");
  p.setKey(c.key);
  p.setStep(0);
  p.setSlice(slice);
  p.setSliceCount(2);
  p.setWorker(slice);
  p.setExamples(3);
  std::vector<float> gradient(c.size);
  for (size_t i = 0; i < c.size; ++i) gradient[i] = g + 0.001f * static_cast<float>(i % 13);
  rpc::set_tensor(p.getGradient().initDense(), gradient);
}

}  // namespace

TEST_CASE("parameter server - a pushBatch applies each entry as its own push would, and replies with each one's "
          "values") {
  // Two workers of a sync step. Run 1: both push every chunk alone. Run 2: worker 0 sends all its
  // pushes in one pushBatch, worker 1 alone; the batch completes only once worker 1 has pushed.
  auto run = [](bool batch) {
    ServerFixture f;
    testing::configure_job(f.server, f.ws, "job", job_spec_to_json(f.spec), f.chunks, 2);
    REQUIRE(f.chunks.size() >= 2);
    kj::Vector<kj::Promise<void>> calls;
    std::vector<std::vector<float>> replied(f.chunks.size());
    std::vector<uint64_t> versions(f.chunks.size(), 0);
    if (batch) {
      auto request = f.server.pushBatchRequest();
      auto entries = request.initPushes(static_cast<unsigned>(f.chunks.size()));
      for (unsigned i = 0; i < f.chunks.size(); ++i) fill_step0_push(entries[i], f.chunks[i], 0, 0.25f);
      auto promise = request.send();
      // Worker 1 has not pushed: nothing can be applied yet.
      CHECK_FALSE(promise.poll(f.ws));
      calls.add(promise.then([&](capnp::Response<proto::ParameterServer::PushBatchResults>&& r) {
        const auto results = r.getResults();
        REQUIRE(results.size() == f.chunks.size());
        for (unsigned i = 0; i < results.size(); ++i) {
          CHECK(results[i].getApplied());
          versions[i] = results[i].getVersion();
          const auto v = rpc::tensor_view(results[i].getValues().getWhole(), f.chunks[i].size, "values");
          replied[i].assign(v.begin(), v.end());
        }
      }));
    } else {
      for (const ChunkInfo& c : f.chunks) {
        auto request = f.server.pushRequest();
        fill_step0_push(request, c, 0, 0.25f);
        calls.add(request.send().ignoreResult());
      }
    }
    for (const ChunkInfo& c : f.chunks) {
      auto request = f.server.pushRequest();
      fill_step0_push(request, c, 1, -0.5f);
      calls.add(request.send().ignoreResult());
    }
    kj::joinPromises(calls.releaseAsArray()).wait(f.ws);
    std::vector<std::vector<float>> values;
    for (const ChunkInfo& c : f.chunks) values.push_back(f.values(c.key));
    if (batch) {
      CHECK(replied == values);
      for (uint64_t v : versions) CHECK(v == 1);
    }
    return values;
  };
  const auto alone = run(false), batched = run(true);
  CHECK(batched == alone);
}

TEST_CASE("parameter server - a malformed pushBatch fails whole, naming what is wrong, and changes nothing") {
  ServerFixture f;
  f.configure();
  const std::vector<float> before = f.values(0);
  auto fails_with = [&](auto fill, const std::string& what) {
    auto request = f.server.pushBatchRequest();
    fill(request);
    try {
      request.send().wait(f.ws);
      FAIL("accepted a batch with " << what);
    } catch (const kj::Exception& e) {
      CHECK_MESSAGE(std::string(e.getDescription().cStr()).find(what) != std::string::npos, e.getDescription().cStr());
    }
  };
  // Entry 0 is a good push of chunk 0 (slice 0 of 1: it would apply at once); entry 1 is bad.
  auto good_then = [&](auto spoil) {
    return [&, spoil](auto& request) {
      auto entries = request.initPushes(2);
      for (unsigned i = 0; i < 2; ++i) {
        fill_step0_push(entries[i], f.chunks[i], 0, 0.5f);
        entries[i].setSliceCount(1);
      }
      spoil(entries[1]);
    };
  };
  fails_with(good_then([](auto e) { e.setKey(999); }), "unknown parameter key");
  fails_with(good_then([](auto e) { e.setJobId("other"); }), "unknown job");
  fails_with(good_then([](auto e) { e.getGradient().initDense(); }), "gradient.dense");
  fails_with(good_then([](auto e) { e.setSliceCount(0); }), "slice must be below sliceCount");
  fails_with([&](auto& request) { request.initPushes(static_cast<unsigned>(rpc::kMaxBatchedPushes + 1)); },
             "too many");
  CHECK(f.values(0) == before);
  CHECK(f.versions() == std::pair<uint64_t, uint64_t>{0, 0});
  // The server goes on: the same batch without the bad entry applies.
  auto request = f.server.pushBatchRequest();
  auto entries = request.initPushes(1);
  fill_step0_push(entries[0], f.chunks[0], 0, 0.5f);
  entries[0].setSliceCount(1);
  auto reply = request.send().wait(f.ws);
  CHECK(reply.getResults()[0].getVersion() == 1);
  CHECK(f.values(0) != before);
}
