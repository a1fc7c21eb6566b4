// ChunkPushes and ServerChunks against a real parameter server in this process (a local
// capability, no sockets): a step's pushes of every chunk, big ones alone and small ones batched,
// bring back exactly the values the server holds after the update; the bytes counted are the
// gradient's; the next step computes on them.
#include <doctest/doctest.h>

#include <vector>

#include "common/data/job_spec.h"
#include "common/engine/chunk_plan.h"
#include "common/rpc/message_limits.h"
#include "server/parameter_server.h"
#include "tests/rpc_support.h"
#include "tests/test_support.h"
#include "worker/chunk_pushes.h"
#include "worker/server_chunks.h"

namespace pstrain {
namespace {

struct Fixture {
  kj::AsyncIoContext io = kj::setupAsyncIo();
  kj::WaitScope& ws = io.waitScope;
  JobSpec spec = testing::mlp_job(700, 20, 1);  // a 784 x 700 kernel in 3 big chunks; small ones
  ParamLayout layout = make_param_layout(spec.model);
  std::vector<ChunkInfo> chunks = plan_chunks(layout, 1);
  proto::ParameterServer::Client server{kj::heap<ParameterServerImpl>(nullptr)};
  kj::PromiseFulfillerPair<void> never = kj::newPromiseAndFulfiller<void>();
  kj::ForkedPromise<void> stop = never.promise.fork();

  Fixture() { testing::configure_job(server, ws, "job", job_spec_to_json(spec), chunks, 1); }
  std::vector<float> server_values(const ChunkInfo& c) {
    auto request = server.pullRequest();
    request.setJobId("job");
    request.setKey(c.key);
    auto reply = request.send().wait(ws);
    const auto view = rpc::tensor_view(reply.getValues(), c.size, "values");
    return {view.begin(), view.end()};
  }
};

TEST_CASE("chunk pushes: a step's pushes, big chunks alone and small ones batched, bring back the server's values") {
  Fixture f;
  size_t big = 0, small = 0;
  for (const ChunkInfo& c : f.chunks) (c.size * sizeof(float) >= rpc::kBatchedPushBytes ? big : small) += 1;
  REQUIRE(big >= 2);
  REQUIRE(small >= 2);

  ServerChunks servers("job", 0, rpc::WorkerPass{}, f.chunks, {"in-process"}, f.layout, f.stop);
  std::vector<proto::ParameterServer::Client> clients;
  clients.emplace_back(f.server);
  servers.use_servers(std::move(clients));
  servers.pull(f.ws, 0);
  const std::vector<float> initial(servers.values(), servers.values() + f.layout.total_size());

  ChunkPushes pushes(servers, nullptr);
  AlignedFloats gradient(f.layout.total_size(), 0.0f);
  for (size_t i = 0; i < gradient.size(); ++i) gradient[i] = 0.001f * static_cast<float>(i % 17) - 0.008f;
  for (uint64_t step = 0; step < 2; ++step) {
    CAPTURE(step);
    const GradientSlice slice{step, 0, 1, 4, gradient.data()};
    // Backward finished everything at once: each big chunk leaves alone, the small ones go
    // together in one pushBatch: at once in the first step (no previous step says waiting
    // pays), later now or at the step's end (by how much compute the previous step had left).
    const size_t sent = pushes.push_from(0, slice);
    if (step == 0) CHECK(sent == big + 1);
    CHECK((sent == big || sent == big + 1));
    auto replies = pushes.end_step(slice);
    CHECK(replies.size() == big + 1);
    kj::joinPromises(replies.releaseAsArray()).wait(f.ws);
    servers.swap_values();
    for (size_t k = 0; k < f.chunks.size(); ++k) {
      const ChunkInfo& c = f.chunks[k];
      const std::vector<float> held = f.server_values(c);
      const float* mine = servers.values() + servers.offsets()[k];
      CHECK(std::vector<float>(mine, mine + c.size) == held);
    }
  }
  // Whole float32 pushes: the gradient's bytes, twice; and the values moved.
  size_t floats = 0;
  for (const ChunkInfo& c : f.chunks) floats += c.size;
  CHECK(servers.counts().pushed_bytes == 2 * floats * sizeof(float));
  CHECK(servers.counts().pulled_bytes == 2 * floats * sizeof(float));
  CHECK(servers.counts().late_pushes == 0);
  CHECK(std::vector<float>(servers.values(), servers.values() + f.layout.total_size()) != initial);
}

}  // namespace
}  // namespace pstrain
