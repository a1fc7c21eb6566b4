// The distributed system end to end: real coordinator, server and worker processes on loopback
// (the sync runs checked against the standalone trainer are in cluster_equivalence_test.cc).
#include <doctest/doctest.h>
#include <kj/async-io.h>

#include <bit>
#include <csignal>
#include <cmath>
#include <functional>
#include <regex>
#include <set>

#include "common/engine/chunk_plan.h"
#include "common/engine/compression.h"
#include "common/engine/model_spec.h"
#include "common/data/job_spec.h"
#include "common/engine/nn/onednn_conv.h"
#include "common/engine/simd/bf16_product.h"
#include "common/rpc/rpc_util.h"
#include "tests/integration/cluster.h"
#include "tests/rpc_support.h"
#include "tests/test_support.h"
#include "worker/local_trainer.h"

using namespace pstrain;
using namespace std::chrono_literals;

namespace {

using testing::failure_of;
using testing::mlp_cluster_spec;

}  // namespace

TEST_CASE("the MLP in sync mode reaches 0.92 after 3 epochs") {
  testing::TempDir dir;
  testing::Cluster cluster(
      {.job_file = testing::write_spec(dir.path(), "job.json", mlp_cluster_spec(TrainingMode::kSync, 128, 3, 2, 2))});
  REQUIRE(cluster.wait_job(180s) == 0);
  MESSAGE("test accuracy " << cluster.final_accuracy());
  CHECK(cluster.final_accuracy() >= 0.92);
}

TEST_CASE("sync with a backup worker: late pushes are dropped and both workers train on, forwarded") {
  // backup_workers 1 of 2: each step applies with the first push of each chunk; the late worker's
  // push is dropped (applied = false) and its reply still carries the partial product of its
  // next batch on the step's values.
  testing::TempDir dir;
  JobSpec spec = parse_job_spec(mlp_cluster_spec(TrainingMode::kSync, 128, 2, 2, 2));
  spec.training.backup_workers = 1;
  testing::Cluster cluster({.job_file = testing::write_spec(dir.path(), "job.json", job_spec_to_json(spec))});
  REQUIRE(cluster.wait_job(180s) == 0);
  // Each step learns from about half its batch (the first push of each chunk): 2 epochs reach
  // 0.90-0.92; the bound only says it trains.
  MESSAGE("test accuracy " << cluster.final_accuracy());
  CHECK(cluster.final_accuracy() >= 0.85);
  int dropped = 0;
  for (testing::Process* w : cluster.workers()) {
    std::smatch m;
    const std::string log = w->log_text();
    REQUIRE(std::regex_search(log, m, std::regex("finished [0-9]+ steps \\(([0-9]+) in this session")));
    CHECK(std::stoi(m[1]) >= 20);
    if (std::regex_search(log, m, std::regex("([0-9]+) of its pushes came late and were dropped"))) {
      dropped += std::stoi(m[1]);
    }
  }
  MESSAGE(dropped << " pushes dropped");
  CHECK(dropped > 0);
}

TEST_CASE("the MLP in async mode reaches 0.90 after 3 epochs") {
  testing::TempDir dir;
  testing::Cluster cluster(
      {.job_file = testing::write_spec(dir.path(), "job.json", mlp_cluster_spec(TrainingMode::kAsync, 128, 3, 2, 2))});
  REQUIRE(cluster.wait_job(180s) == 0);
  MESSAGE("test accuracy " << cluster.final_accuracy());
  INFO(cluster.group().dump_logs(40));
  CHECK(cluster.final_accuracy() >= 0.90);
}

TEST_CASE("bad pushes and recovery calls fail with a clear error and the server keeps serving the job") {
  testing::TempDir dir;
  const std::string json = mlp_cluster_spec(TrainingMode::kSync, 128, 3, 1, 2);
  testing::Cluster cluster({.job_file = testing::write_spec(dir.path(), "job.json", json)});
  cluster.coordinator().wait_for_line("servers configured", 30s);

  // A client of our own talks to the server that is training job-1. It sets up a second job,
  // "probe", the way the coordinator would, so the bad calls below do not depend on how far
  // job-1 has got.
  auto io = kj::setupAsyncIo();
  auto& ws = io.waitScope;
  auto connection = rpc::connect(*io.provider, {"127.0.0.1", static_cast<uint32_t>(cluster.server_ports()[0])}, {})
                        .wait(ws);
  auto server = connection->bootstrap().castAs<proto::ParameterServer>();
  const JobSpec spec = parse_job_spec(json);
  const auto chunks = plan_chunks(make_param_layout(spec.model), 1);
  testing::configure_job(server, ws, "probe", json, chunks, 2);
  auto push = [&](const char* job, uint32_t key, size_t floats, uint32_t slice) {
    auto request = server.pushRequest();
    request.setJobId(job);
    request.setKey(key);
    request.setStep(0);
    request.setSlice(slice);
    request.setSliceCount(2);
    request.setExamples(1);
    std::vector<float> zeros(floats, 0.0f);
    rpc::set_tensor(request.getGradient().initDense(), zeros);
    return request.send();
  };
  CHECK(failure_of(push("probe", 9999, 16, 0), ws).find("unknown parameter key") != std::string::npos);
  CHECK(failure_of(push("probe", 0, 3, 0), ws).find("wrong tensor size") != std::string::npos);
  CHECK(failure_of(push("no-such-job", 0, 16, 0), ws).find("unknown job") != std::string::npos);
  CHECK(failure_of(push("probe", 0, chunks[0].size, 7), ws).find("slice must be below sliceCount") != std::string::npos);
  {
    auto request = server.pushRequest();  // a tensor whose shape disagrees with its data
    request.setJobId("probe");
    request.setSliceCount(1);
    auto tensor = request.getGradient().initDense();
    tensor.initShape(1).set(0, 5);
    tensor.initData(8);
    CHECK(failure_of(request.send(), ws).find("tensor shape does not match its data") != std::string::npos);
  }
  // Row-sparse pushes: ranges out of order, outside the chunk, or not matching their parts.
  auto sparse_push = [&](std::vector<ChunkRange> ranges, std::vector<size_t> part_floats) {
    auto request = server.pushRequest();
    request.setJobId("probe");
    request.setSliceCount(2);
    request.setExamples(1);
    auto sparse = request.getGradient().initSparse();
    auto list = sparse.initRanges(static_cast<unsigned>(ranges.size()));
    for (unsigned i = 0; i < ranges.size(); ++i) {
      list[i].setOffset(ranges[i].offset);
      list[i].setSize(ranges[i].size);
    }
    auto parts = sparse.initParts(static_cast<unsigned>(part_floats.size()));
    for (unsigned i = 0; i < part_floats.size(); ++i) parts.init(i, part_floats[i] * sizeof(float));
    return request.send();
  };
  const std::string unsorted = failure_of(sparse_push({{8, 4}, {0, 4}}, {4, 4}), ws);
  CHECK(unsorted.find("ranges must be sorted and disjoint") != std::string::npos);
  CHECK(unsorted.find("gradient.sparse.ranges") != std::string::npos);  // the field, named
  CHECK(failure_of(sparse_push({{chunks[0].size - 2, 4}}, {4}), ws).find("range outside the chunk") != std::string::npos);
  CHECK(failure_of(sparse_push({{0, 4}}, {4, 4}), ws).find("gradient.sparse.parts must match gradient.sparse.ranges") != std::string::npos);
  CHECK(failure_of(sparse_push({{0, 4}}, {3}), ws).find("data size does not match") != std::string::npos);
  CHECK(failure_of(sparse_push(std::vector<ChunkRange>(300, ChunkRange{0, 1}), {}), ws).find("too many ranges") != std::string::npos);
  {
    auto request = server.pushRequest();  // a whole gradient, asking for values outside the chunk
    request.setJobId("probe");
    request.setSliceCount(2);
    request.setExamples(1);
    rpc::set_tensor(request.getGradient().initDense(), std::vector<float>(chunks[0].size, 0.0f));
    auto range = request.getReply().initRanges(1)[0];
    range.setOffset(chunks[0].size);
    range.setSize(1);
    const std::string error = failure_of(request.send(), ws);
    CHECK(error.find("range outside the chunk") != std::string::npos);
    CHECK(error.find("reply.ranges") != std::string::npos);
  }
  // Factored pushes: keys that are not whole kernel rows or span two kernels, factors whose sizes
  // do not match, rows out of order or outside the keys' chunks.
  const auto layout = make_param_layout(spec.model);
  std::vector<uint32_t> first_kernel, second_kernel, biases;
  for (const ChunkInfo& c : chunks) {
    (c.param == 0 ? first_kernel : c.param == 2 ? second_kernel : biases).push_back(c.key);
  }
  REQUIRE(first_kernel.size() >= 2);
  const size_t units = static_cast<size_t>(layout.params()[0].shape[1]);
  const uint32_t row_of_second_chunk = static_cast<uint32_t>(chunks[first_kernel[1]].offset / units);
  auto factor_push = [&](std::vector<uint32_t> keys, uint32_t slice, std::vector<uint32_t> rows,
                         size_t delta_floats, size_t input_floats, size_t versions, bool bf16 = false,
                         uint64_t step = 0, bool ranges = false) {
    auto request = server.pushFactorsRequest();
    request.setBf16(bf16);  // mixed precision: product_bf16, and the values back in bfloat16
    request.setReplyBfloat16(bf16);
    request.setStep(step);
    if (ranges) {  // the first key whole, the others none of their values
      auto wanted = request.initReplyRanges(static_cast<unsigned>(keys.size()));
      wanted[0].setWhole();
      for (unsigned i = 1; i < keys.size(); ++i) wanted[i].initRanges(0);
    }
    request.setJobId("probe");
    auto key_list = request.initKeys(static_cast<unsigned>(keys.size()));
    for (unsigned i = 0; i < keys.size(); ++i) key_list.set(i, keys[i]);
    auto base = request.initBaseVersions(static_cast<unsigned>(versions));
    for (unsigned i = 0; i < versions; ++i) base.set(i, step);
    request.setSlice(slice);
    request.setSliceCount(2);
    request.setExamples(2);
    auto row_list = request.initRows(static_cast<unsigned>(rows.size()));
    for (unsigned i = 0; i < rows.size(); ++i) row_list.set(i, rows[i]);
    const std::vector<float> delta(delta_floats, 0.5f), inputs(input_floats, 1.0f);
    request.setDelta(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(delta.data()), delta.size() * sizeof(float)));
    request.setInputs(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(inputs.data()), inputs.size() * sizeof(float)));
    return request.send();
  };
  const auto error_of = [&](auto promise) { return failure_of(kj::mv(promise), ws); };
  CHECK(error_of(factor_push({biases[0]}, 0, {}, 2 * units, 0, 1)).find("does not hold whole rows") != std::string::npos);
  CHECK(error_of(factor_push({first_kernel[0], second_kernel[0]}, 0, {}, 2 * units, 0, 2)).find("chunks of one kernel") !=
        std::string::npos);
  CHECK(error_of(factor_push({first_kernel[0]}, 0, {0}, 2 * units - 1, 2, 1)).find("data size does not match") !=
        std::string::npos);
  CHECK(error_of(factor_push({first_kernel[0]}, 0, {0}, 2 * units, 3, 1)).find("data size does not match") !=
        std::string::npos);
  CHECK(error_of(factor_push({first_kernel[0]}, 0, {5, 2}, 2 * units, 4, 1)).find("ascending") != std::string::npos);
  CHECK(error_of(factor_push({first_kernel[0]}, 0, {row_of_second_chunk}, 2 * units, 2, 1)).find("none of the keys") !=
        std::string::npos);
  CHECK(error_of(factor_push({first_kernel[0]}, 0, {0}, 2 * units, 2, 3)).find("baseVersions") != std::string::npos);
  {
    // Two kernels with the same column count (784 x 256 and 256 x 256) are still two kernels.
    JobSpec same_columns = testing::mlp_job(256, 256, 1);
    const auto chunks2 = plan_chunks(make_param_layout(same_columns.model), 1);
    testing::configure_job(server, ws, "probe2", job_spec_to_json(same_columns), chunks2, 2);
    uint32_t in_first = UINT32_MAX, in_second = UINT32_MAX;
    for (const ChunkInfo& c : chunks2) {
      if (c.param == 0 && in_first == UINT32_MAX) in_first = c.key;
      if (c.param == 2 && in_second == UINT32_MAX) in_second = c.key;
    }
    REQUIRE(in_first != UINT32_MAX);
    REQUIRE(in_second != UINT32_MAX);
    auto push2 = server.pushFactorsRequest();
    push2.setJobId("probe2");
    auto keys = push2.initKeys(2);
    keys.set(0, in_first);
    keys.set(1, in_second);
    push2.initBaseVersions(2);
    push2.setSliceCount(1);  // (accepted by mistake, it would apply at once, not wait)
    CHECK(error_of(push2.send()).find("chunks of one kernel") != std::string::npos);
  }
  {
    // Two slices of good factors complete step 0 of two chunks (not chunk 0: the dense pushes
    // below use it).
    REQUIRE(first_kernel.size() >= 3);
    const std::vector<uint32_t> keys{first_kernel[1], first_kernel[2]};
    const std::vector<uint32_t> rows{row_of_second_chunk, static_cast<uint32_t>(chunks[first_kernel[2]].offset / units)};
    auto a = factor_push(keys, 0, rows, 2 * units, 4, 2);
    auto b = factor_push(keys, 1, rows, 2 * units, 4, 2);
    auto reply = b.wait(ws);
    CHECK(reply.getApplied());
    CHECK_FALSE(reply.getProductBf16());
    REQUIRE(reply.getVersions().size() == 2);
    CHECK(reply.getVersions()[0] == 1);
    CHECK(reply.getVersions()[1] == 1);
    REQUIRE(reply.getReply().isValues());
    REQUIRE(reply.getReply().getValues().size() == 2);  // each key whole
    CHECK(reply.getReply().getValues()[0].size() == chunks[first_kernel[1]].size * sizeof(float));
    CHECK(a.wait(ws).getApplied());
  }
  // Forward on the servers: the next batch's rows and inputs, checked like rows and inputs; a
  // reply carries either values or the partial product.
  auto forward_push = [&](uint32_t slice, uint64_t step, uint32_t next_examples, std::vector<uint32_t> next_rows,
                          size_t next_floats, bool reply_ranges) {
    const std::vector<uint32_t> keys{first_kernel[1], first_kernel[2]};
    auto request = server.pushFactorsRequest();
    request.setJobId("probe");
    auto key_list = request.initKeys(2);
    key_list.set(0, keys[0]);
    key_list.set(1, keys[1]);
    auto versions = request.initBaseVersions(2);
    versions.set(0, step);
    versions.set(1, step);
    request.setStep(step);
    request.setSlice(slice);
    request.setSliceCount(2);
    request.setExamples(0);
    if (reply_ranges) request.initReplyRanges(2)[0].setWhole();
    auto forward = request.getNext().initForward();
    forward.setExamples(next_examples);
    auto rows = forward.initRows(static_cast<unsigned>(next_rows.size()));
    for (unsigned i = 0; i < next_rows.size(); ++i) rows.set(i, next_rows[i]);
    const std::vector<float> inputs(next_floats, 1.0f);
    forward.setInputs(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(inputs.data()), inputs.size() * sizeof(float)));
    return request.send();
  };
  const uint32_t second_row = row_of_second_chunk + 1;
  CHECK(error_of(forward_push(0, 1, 2, {second_row, row_of_second_chunk}, 4, false)).find("ascending") !=
        std::string::npos);
  CHECK(error_of(forward_push(0, 1, 2, {0}, 2, false)).find("none of the keys") != std::string::npos);
  CHECK(error_of(forward_push(0, 1, 2, {row_of_second_chunk}, 3, false)).find("data size does not match") !=
        std::string::npos);
  CHECK(error_of(forward_push(0, 1, 2, {row_of_second_chunk}, 2, true)).find("exclude each other") !=
        std::string::npos);
  CHECK(error_of(forward_push(0, 1, 0, {row_of_second_chunk}, 2, false)).find("needs next.forward.examples > 0") !=
        std::string::npos);
  CHECK(error_of(forward_push(0, 1, 129, {}, 0, false)).find("larger than the job's global batch") != std::string::npos);
  {
    // Step 1 of the same two chunks, both slices asking for the partial product of two rows
    // (inputs all 1: each example's partial is the sum of the two rows' updated values).
    auto a = forward_push(0, 1, 2, {row_of_second_chunk, second_row}, 4, false);
    auto b = forward_push(1, 1, 2, {row_of_second_chunk, second_row}, 4, false);
    auto reply = b.wait(ws);
    REQUIRE(reply.getReply().isPartial());
    REQUIRE(reply.getReply().getPartial().size() == 2 * units * sizeof(float));
    auto pull = server.pullRequest();
    pull.setJobId("probe");
    pull.setKey(first_kernel[1]);
    pull.setMinVersion(2);
    auto pulled = pull.send().wait(ws);
    CHECK(pulled.getVersion() == 2);
    const auto values = rpc::tensor_view(pulled.getValues(), chunks[first_kernel[1]].size, "values");
    const auto partial = rpc::part_view(reply.getReply().getPartial(), 2 * units, "partial");
    size_t mismatches = 0;
    for (size_t example = 0; example < 2; ++example) {
      for (size_t c = 0; c < units; ++c) {
        mismatches += partial[example * units + c] != values[c] + values[units + c];
      }
    }
    CHECK(mismatches == 0);
    CHECK(a.wait(ws).getReply().getPartial().size() == 2 * units * sizeof(float));
  }
  {
    // Step 2 in bfloat16 (a mixed-precision layer): replyBfloat16 with ranges fails; then the
    // server says it multiplied with product_bf16, and the values come back rounded, 2 bytes
    // each, a part per key.
    const std::vector<uint32_t> keys{first_kernel[1], first_kernel[2]};
    const std::vector<uint32_t> rows{row_of_second_chunk, static_cast<uint32_t>(chunks[first_kernel[2]].offset / units)};
    CHECK(error_of(factor_push(keys, 0, rows, 2 * units, 4, 2, true, 2, true)).find("replyBfloat16 needs every key's values whole") !=
          std::string::npos);
    auto c = factor_push(keys, 0, rows, 2 * units, 4, 2, true, 2);
    auto d = factor_push(keys, 1, rows, 2 * units, 4, 2, true, 2);
    auto rounded = d.wait(ws);
    CHECK(rounded.getProductBf16());
    REQUIRE(rounded.getReply().isBfloat16());
    REQUIRE(rounded.getReply().getBfloat16().size() == 2);
    CHECK(rounded.getReply().getBfloat16()[1].size() == chunks[first_kernel[2]].size * 2);
    CHECK(c.wait(ws).getProductBf16());
    auto pull = server.pullRequest();
    pull.setJobId("probe");
    pull.setKey(first_kernel[1]);
    pull.setMinVersion(3);
    auto pulled = pull.send().wait(ws);
    const auto values = rpc::tensor_view(pulled.getValues(), chunks[first_kernel[1]].size, "values");
    std::vector<float> decoded(values.size());
    decode_bfloat16(rounded.getReply().getBfloat16()[0].begin(), decoded);
    size_t wrong = 0;
    for (size_t i = 0; i < values.size(); ++i) {
      wrong += std::bit_cast<uint32_t>(decoded[i]) != uint32_t{simd::bf16_round(values[i])} << 16;
    }
    CHECK(wrong == 0);
  }
  {
    auto request = server.pullRequest();  // a version the shard never had
    request.setJobId("probe");
    request.setKey(0);
    request.setExact(true);
    request.setMinVersion(0);
    auto ok = request.send().wait(ws);  // version 0 is the current one: fine
    CHECK(ok.getVersion() == 0);
  }
  // Recovery calls with bad arguments fail the same way and change nothing.
  {
    auto request = server.adoptBackupRequest();  // blobs that are not chunk snapshots
    request.setJobId("probe");
    request.setVersion(10);
    auto list = request.initChunks(1);
    const kj::byte garbage[] = {1, 2, 3};
    list.set(0, capnp::Data::Reader(garbage, sizeof garbage));
    CHECK(failure_of(request.send(), ws).find("does not decode") != std::string::npos);
  }
  {
    auto request = server.adoptBackupRequest();  // no chunks at all
    request.setJobId("probe");
    request.setVersion(10);
    CHECK(failure_of(request.send(), ws).find("does not cover this server's chunks") != std::string::npos);
  }
  {
    auto request = server.restoreRequest();  // a backup that does not exist
    request.setJobId("probe");
    request.setVersion(12345);
    CHECK(failure_of(request.send(), ws).find("not complete") != std::string::npos);
  }
  {
    auto request = server.settleRequest();  // a job this server does not hold
    request.setJobId("no-such-job");
    request.setVersion(0);
    CHECK(failure_of(request.send(), ws).find("unknown job") != std::string::npos);
  }
  // Good calls still work on the probe job: two slices complete step 0.
  auto first = push("probe", 0, chunks[0].size, 0);
  auto second = push("probe", 0, chunks[0].size, 1);
  CHECK(second.wait(ws).getVersion() == 1);
  CHECK(first.wait(ws).getApplied());

  // And job-1, served by the same server all along, trains to the end.
  REQUIRE(cluster.wait_job(180s) == 0);
  CHECK(cluster.final_accuracy() >= 0.92);
  CHECK(cluster.servers()[0]->running());
}

TEST_CASE("every process exits cleanly on SIGTERM and SIGINT") {
  testing::Cluster cluster({.servers = 1, .workers = 1});
  cluster.workers()[0]->wait_for_line("PSTRAIN_READY", 20s);
  CHECK(cluster.workers()[0]->terminate(5s).code == 0);
  CHECK(cluster.servers()[0]->terminate(5s).code == 0);
  cluster.coordinator().signal(SIGINT);
  CHECK(cluster.coordinator().wait_exit(5s) == std::optional<int>(0));
}

TEST_CASE("a job whose loss becomes NaN or infinite ends FAILED with that reason") {
  testing::TempDir dir;
  JobSpec spec = parse_job_spec(mlp_cluster_spec(TrainingMode::kSync, 128, 2, 1, 1));
  spec.optimizer = OptimizerSpec{};
  spec.optimizer.type = OptimizerType::kSgd;
  spec.optimizer.learning_rate = 1000.0f;  // diverges within a few steps
  testing::Cluster cluster({.job_file = testing::write_spec(dir.path(), "job.json", job_spec_to_json(spec)),
                            .servers = 1,
                            .workers = 1});
  CHECK(cluster.wait_job(120s) == 1);
  const std::string log = cluster.coordinator().log_text();
  CHECK(log.find("FAILED") != std::string::npos);
  CHECK(log.find("loss became") != std::string::npos);
}

TEST_CASE("getAssignment refuses a node id that another process registered (a restarted coordinator renumbers nodes)") {
  testing::Cluster cluster({.servers = 1, .workers = 0});
  auto io = kj::setupAsyncIo();
  auto& ws = io.waitScope;
  auto connection =
      rpc::connect(*io.provider, {"127.0.0.1", static_cast<uint32_t>(cluster.coordinator_port())}, {}).wait(ws);
  auto coordinator = connection->bootstrap().castAs<proto::Coordinator>();
  auto register_worker = [&](const char* name, uint64_t incarnation) {
    auto request = coordinator.registerRequest();
    request.setRole(proto::Role::WORKER);
    request.setName(name);
    request.setIncarnation(incarnation);
    return request.send().wait(ws).getNodeId();
  };
  const uint32_t a = register_worker("probe-a", 1111), b = register_worker("probe-b", 2222);
  REQUIRE(a != b);
  auto ask = [&](uint32_t node, uint64_t incarnation) {
    auto request = coordinator.getAssignmentRequest();
    request.setNodeId(node);
    request.setIncarnation(incarnation);
    request.setWaitMs(0);
    return request.send();
  };
  // probe-b asking under probe-a's id (its id before the restart, say): refused, nothing given.
  CHECK(failure_of(ask(a, 2222), ws).find("another process's") != std::string::npos);
  // Each under its own id, and a caller that does not say (an older worker): answered.
  CHECK_FALSE(ask(a, 1111).wait(ws).getHas());
  CHECK_FALSE(ask(b, 2222).wait(ws).getHas());
  CHECK_FALSE(ask(b, 0).wait(ws).getHas());
}
