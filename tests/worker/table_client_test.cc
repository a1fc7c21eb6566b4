// A worker's table client (worker/table_client.h) against two in-process parameter servers: two
// workers' slices pull their batches' rows, push compact gradients to every piece and get the
// next batches' rows in the replies, step after step, equal bit for bit to the standalone
// trainer's whole-table update; a worker never asks for a row it does not use.
#include <doctest/doctest.h>

#include <kj/async-io.h>

#include <string>
#include <vector>

#include "common/data/job_spec.h"
#include "common/engine/chunk_plan.h"
#include "common/engine/nn/sparse_rows.h"
#include "common/rpc/rpc_util.h"
#include "server/parameter_server.h"
#include "tests/table_steps.h"
#include "worker/table_client.h"

using namespace pstrain;
using namespace pstrain::testing;

namespace {

constexpr int64_t kRows = 501, kDim = 4;

struct TwoServers {
  kj::AsyncIoContext io = kj::setupAsyncIo();
  kj::WaitScope& ws = io.waitScope;
  JobSpec spec = parse_job_spec(R"({"dataset": {"name": "clicks"},
    "model": {"input_shape": [2], "seed": 8, "layers": [
      {"type": "embedding", "input_dim": 501, "output_dim": 4, "sparse": true},
      {"type": "flatten"}, {"type": "dense", "units": 2}]},
    "optimizer": {"type": "adam", "learning_rate": 0.01},
    "training": {"mode": "sync", "global_batch_size": 40, "workers": 2}})");
  ParamLayout layout = make_param_layout(spec.model);
  std::vector<ChunkInfo> chunks = plan_chunks(layout, 2);
  std::vector<proto::ParameterServer::Client> servers;
  kj::PromiseFulfillerPair<void> never = kj::newPromiseAndFulfiller<void>();
  kj::ForkedPromise<void> stop = never.promise.fork();
  ServerConnections connections{{"s0", "s1"}, stop};

  TwoServers() {
    for (uint32_t s = 0; s < 2; ++s) {
      servers.push_back(kj::heap<ParameterServerImpl>(nullptr));
      auto request = servers[s].configureRequest();
      auto config = request.initConfig();
      config.setJobId("job");
      config.setSpecJson(job_spec_to_json(spec));
      rpc::set_chunks(config.initChunks(static_cast<unsigned>(chunks.size())), chunks);
      config.setServerIndex(s);
      config.setWorkers(2);
      request.send().wait(ws);
    }
    std::vector<proto::ParameterServer::Client> clients;
    for (auto& server : servers) clients.emplace_back(server);
    connections.use(std::move(clients));
  }
  TableClient client() { return TableClient(chunks, nn::sparse_tables(spec.model, layout), {"job", {}, 0}, connections); }
};

// Rows `rows` of `table` (kDim values each).
std::vector<float> rows_of(const std::vector<float>& table, const std::vector<uint32_t>& rows) {
  std::vector<float> out;
  for (uint32_t r : rows) out.insert(out.end(), table.begin() + r * kDim, table.begin() + (r + 1) * kDim);
  return out;
}

}  // namespace

TEST_CASE("table client - two workers' compact pushes and row replies equal the trainer's steps bit for bit") {
  TwoServers f;
  TableClient a = f.client(), b = f.client();
  REQUIRE(a.tables().size() == 1);

  std::vector<float> all(f.layout.total_size());
  glorot_uniform_init(f.layout, f.spec.model.seed, all.data());
  const ParamInfo& info = f.layout.params()[a.tables()[0].param];
  std::vector<float> table(all.begin() + static_cast<long>(info.offset), all.begin() + static_cast<long>(info.offset + info.size));
  const auto optimizer = optim::make_optimizer(f.spec.optimizer);
  optim::OptimizerState state = optimizer->make_state(table.size());

  Rng rng(21);
  // Slice 1 of step 1 touches one row only: the other piece gets its push without rows.
  const auto batch = [&](int step, int slice) { return random_rows(rng, kRows, kDim, step == 1 && slice == 1 ? 1 : 60); };
  std::vector<SliceRows> slices{batch(0, 0), batch(0, 1)};
  std::vector<float> values_a(slices[0].rows.size() * kDim), values_b(slices[1].rows.size() * kDim);
  kj::joinPromises(kj::arr(a.pull(0, slices[0].rows, 0, TableClient::At::kLeast, values_a.data()), b.pull(0, slices[1].rows, 0, TableClient::At::kLeast, values_b.data())))
      .wait(f.ws);
  CHECK(values_a == rows_of(table, slices[0].rows));
  CHECK(values_b == rows_of(table, slices[1].rows));

  for (int step = 0; step < 4; ++step) {
    std::vector<SliceRows> next{batch(step + 1, 0), batch(step + 1, 1)};
    trainer_step(*optimizer, true, slices, 40, kDim, table, state);
    std::vector<float> next_a(next[0].rows.size() * kDim), next_b(next[1].rows.size() * kDim);
    const GradientSlice slice_a{static_cast<uint64_t>(step), 0, 2, 20, nullptr};
    const GradientSlice slice_b{static_cast<uint64_t>(step), 1, 2, 20, nullptr};
    const TableClient::TablePush part_a{slices[0].rows, slices[0].grads, next[0].rows, next_a.data()};
    const TableClient::TablePush part_b{slices[1].rows, slices[1].grads, next[1].rows, next_b.data()};
    kj::joinPromises(kj::arr(a.push(slice_a, {&part_a, 1}), b.push(slice_b, {&part_b, 1}))).wait(f.ws);
    CHECK(next_a == rows_of(table, next[0].rows));
    CHECK(next_b == rows_of(table, next[1].rows));
    slices = std::move(next);
  }
  // Bytes: rows and gradients out, rows back; never a whole piece.
  CHECK(a.counts().pushed_bytes > 0);
  CHECK(a.counts().pulled_bytes < 6 * 60 * kDim * sizeof(float));
  CHECK(a.counts().late_pushes == 0);
}

TEST_CASE("table client - a chunk table without a table's pieces is refused") {
  TwoServers f;
  std::vector<ChunkInfo> dense_only;
  for (const ChunkInfo& c : f.chunks) {
    if (!c.is_table_piece()) dense_only.push_back(c);
  }
  CHECK_THROWS_AS(TableClient(dense_only, nn::sparse_tables(f.spec.model, f.layout), {"job", {}, 0}, f.connections),
                  kj::Exception);
}
