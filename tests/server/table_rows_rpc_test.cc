// A sparse table's piece over the ParameterServer RPC layer in-process (a local capability, over
// a real store thread and RocksDB): pullRows, a push of compact rows whose reply carries the
// rows asked for, and the calls that must fail without changing anything.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/data/job_spec.h"
#include "common/engine/chunk_plan.h"
#include "common/engine/optim/optimizer.h"
#include "common/rpc/rpc_util.h"
#include "server/parameter_server.h"
#include "tests/rpc_support.h"
#include "tests/server/store_fixture.h"

using namespace pstrain;

namespace {

constexpr int64_t kRows = 101, kDim = 3;

// `sparse_updates`: optimizer.sparse_updates.
JobSpec table_spec(const std::string& sparse_updates) {
  return parse_job_spec(R"({"dataset": {"name": "clicks"},
    "model": {"input_shape": [2], "seed": 4, "layers": [
      {"type": "embedding", "input_dim": 101, "output_dim": 3, "sparse": true},
      {"type": "flatten"}, {"type": "dense", "units": 2}]},
    "optimizer": {"type": "adagrad", "learning_rate": 0.3, "sparse_updates": ")" +
                        sparse_updates + R"("},
    "training": {"mode": "sync", "global_batch_size": 8}})");
}

struct TableFixture : testing::StoreFixture {
  JobSpec spec;
  ParamLayout layout = make_param_layout(spec.model);
  std::vector<ChunkInfo> chunks = plan_chunks(layout, 2);  // this server is 0: the even rows
  proto::ParameterServer::Client server{kj::heap<ParameterServerImpl>(&store)};

  explicit TableFixture(const std::string& sparse_updates = "lazy") : spec(table_spec(sparse_updates)) {
    testing::configure_job(server, ws, "job", job_spec_to_json(spec), chunks, 1);
  }
  const ChunkInfo& piece() const {
    for (const ChunkInfo& c : chunks) {
      if (c.is_table_piece() && c.server == 0) return c;
    }
    FAIL("no piece");
    return chunks.front();
  }
  const ChunkInfo& dense() const {
    for (const ChunkInfo& c : chunks) {
      if (!c.is_table_piece() && c.server == 0) return c;
    }
    FAIL("no dense chunk");
    return chunks.front();
  }
  std::vector<float> pull_rows(const std::vector<uint32_t>& rows, uint64_t min_version = 0, bool exact = false) {
    auto request = server.pullRowsRequest();
    request.setJobId("job");
    request.setKey(piece().key);
    request.setMinVersion(min_version);
    request.setExact(exact);
    auto list = request.initRows(static_cast<unsigned>(rows.size()));
    for (unsigned i = 0; i < rows.size(); ++i) list.set(i, rows[i]);
    auto reply = request.send().wait(ws);
    std::vector<float> values(reply.getValues().size() / sizeof(float));
    if (!values.empty()) std::memcpy(values.data(), reply.getValues().begin(), reply.getValues().size());
    return values;
  }
  // Throws (kj::Exception) when the server refuses.
  capnp::Response<proto::ParameterServer::PushResults> push(uint32_t key, const std::vector<uint32_t>& rows,
                                                            const std::vector<float>& grads,
                                                            const std::vector<uint32_t>& reply_rows,
                                                            uint64_t step = 0) {
    auto request = server.pushRequest();
    request.setJobId("job");
    request.setKey(key);
    request.setStep(step);
    request.setSliceCount(1);
    request.setExamples(2);
    auto table = request.getGradient().initTableRows();
    auto list = table.initRows(static_cast<unsigned>(rows.size()));
    for (unsigned i = 0; i < rows.size(); ++i) list.set(i, rows[i]);
    if (!grads.empty()) {
      table.setValues(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(grads.data()), grads.size() * sizeof(float)));
    }
    auto reply = request.getReply().initTableRows(static_cast<unsigned>(reply_rows.size()));
    for (unsigned i = 0; i < reply_rows.size(); ++i) reply.set(i, reply_rows[i]);
    return request.send().wait(ws);
  }
  uint64_t version() {
    auto request = server.versionsRequest();
    request.setJobId("job");
    return request.send().wait(ws).getCurrentVersion();
  }
};

std::string failure(const std::function<void()>& call) {
  try {
    call();
  } catch (const kj::Exception& e) {
    return e.getDescription().cStr();
  }
  return "(accepted)";
}

// Rows `rows` of the table as the whole model's init makes them.
std::vector<float> initial_rows(const TableFixture& f, const std::vector<uint32_t>& rows) {
  std::vector<float> all(f.layout.total_size());
  glorot_uniform_init(f.layout, f.spec.model.seed, all.data());
  const ParamInfo& table = f.layout.params()[f.piece().param];
  std::vector<float> out;
  for (uint32_t r : rows) out.insert(out.end(), all.begin() + static_cast<long>(table.offset + r * kDim),
                                     all.begin() + static_cast<long>(table.offset + (r + 1) * kDim));
  return out;
}

}  // namespace

TEST_CASE("parameter server - a table piece answers pullRows and a push of compact rows with the rows asked for") {
  TableFixture f;
  CHECK(f.pull_rows({0, 4, 100}) == initial_rows(f, {0, 4, 100}));
  CHECK(f.pull_rows({}).empty());

  // A push of rows 4 and 98 (2 examples), replying with rows 0, 4 and 98.
  const std::vector<float> grads{1, -2, 0.5f, 0.25f, 3, -1};
  std::vector<float> expected = initial_rows(f, {0, 4, 98});
  {  // Adagrad on rows 4 and 98 (the reply's second and third), the gradient over 2 examples
    const auto optimizer = optim::make_optimizer(f.spec.optimizer);
    optim::OptimizerState state = optimizer->make_state(expected.size());
    std::vector<float> scaled = grads;
    for (float& g : scaled) g *= 0.5f;
    const std::vector<uint32_t> local{1, 2};
    optimizer->apply_rows(expected, kDim, local, scaled, state);
  }
  auto reply = f.push(f.piece().key, {4, 98}, grads, {0, 4, 98});
  CHECK(reply.getVersion() == 1);
  CHECK(reply.getApplied());
  REQUIRE(reply.getValues().isRows());
  std::vector<float> got(reply.getValues().getRows().size() / sizeof(float));
  std::memcpy(got.data(), reply.getValues().getRows().begin(), got.size() * sizeof(float));
  CHECK(got == expected);
  CHECK(f.pull_rows({0, 4, 98}, 1) == expected);
}

TEST_CASE("parameter server - an exact pullRows gives a piece's rows of the version before its last update") {
  for (const std::string sparse_updates : {"lazy", "dense"}) {
    CAPTURE(sparse_updates);
    TableFixture f(sparse_updates);
    const uint32_t key = f.piece().key;
    const std::vector<uint32_t> rows{0, 4, 98};
    const std::vector<float> v0 = f.pull_rows(rows);
    f.push(key, {4}, {1, -2, 0.5f}, {}, 0);
    const std::vector<float> v1 = f.pull_rows(rows, 1);
    REQUIRE(v1 != v0);
    CHECK(f.pull_rows(rows, 0, true) == v0);  // row 4 as it was, the others unchanged
    CHECK(f.pull_rows(rows, 1, true) == v1);
    f.push(key, {98}, {0.25f, 3, -1}, {}, 1);
    const std::vector<float> v2 = f.pull_rows(rows, 2);
    REQUIRE(v2 != v1);
    CHECK(f.pull_rows(rows, 0) == v2);        // not exact: the current rows
    CHECK(f.pull_rows(rows, 1, true) == v1);  // row 98 as it was, row 4 as step 0 left it
    CHECK(f.pull_rows(rows, 2, true) == v2);
    CHECK(failure([&] { f.pull_rows(rows, 0, true); }).find("no longer holds that version of the piece") !=
          std::string::npos);
    CHECK(f.pull_rows(rows, 2) == v2);  // the refused pull changed nothing
    f.push(key, {}, {}, {}, 2);  // a step with examples and none of this piece's rows
    CHECK(f.pull_rows(rows, 2, true) == v2);
    CHECK(f.pull_rows(rows, 3, true) == v2);
  }
}

TEST_CASE("parameter server - bad calls on a table piece fail naming what is wrong and change nothing") {
  TableFixture f;
  const uint32_t key = f.piece().key;
  const std::vector<float> two_rows(2 * kDim, 1.0f);
  CHECK(failure([&] { f.push(key, {4, 2}, two_rows, {}); }).find("gradient.tableRows.rows") != std::string::npos);
  CHECK(failure([&] { f.push(key, {4, 5}, two_rows, {}); }).find("row 5 is not in chunk") != std::string::npos);
  CHECK(failure([&] { f.push(key, {4, 6}, {1, 2}, {}); }).find("gradient.tableRows.values") != std::string::npos);
  CHECK(failure([&] { f.push(key, {4, 6}, two_rows, {102}); }).find("reply.tableRows") != std::string::npos);
  CHECK(failure([&] { f.push(f.dense().key, {4, 6}, two_rows, {}); }).find("for a sparse table's pieces") !=
        std::string::npos);
  CHECK(failure([&] {
          auto request = f.server.pushRequest();
          request.setJobId("job");
          request.setKey(key);
          request.setSliceCount(1);
          rpc::set_tensor(request.getGradient().initDense(), std::vector<float>(f.piece().size, 0.0f));
          request.send().wait(f.ws);
        }).find("takes gradient.tableRows") != std::string::npos);
  CHECK(failure([&] {
          auto request = f.server.pullRequest();
          request.setJobId("job");
          request.setKey(key);
          request.send().wait(f.ws);
        }).find("pulled by rows") != std::string::npos);
  CHECK(failure([&] {
          auto request = f.server.pullRowsRequest();
          request.setJobId("job");
          request.setKey(f.dense().key);
          request.send().wait(f.ws);
        }).find("pullRows is for a sparse table's pieces") != std::string::npos);
  CHECK(failure([&] { f.pull_rows({3}); }).find("row 3 is not in chunk") != std::string::npos);
  // Nothing moved.
  CHECK(f.version() == 0);
  CHECK(f.pull_rows({0, 4, 100}) == initial_rows(f, {0, 4, 100}));
}
