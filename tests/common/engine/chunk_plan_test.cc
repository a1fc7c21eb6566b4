#include <doctest/doctest.h>

#include <algorithm>
#include <tuple>

#include "common/engine/chunk_plan.h"
#include "tests/test_support.h"

using namespace pstrain;

TEST_CASE("chunks cover every tensor exactly and never span two") {
  const ParamLayout layout = make_param_layout(testing::mlp_job(700, 500, 1).model);
  const auto chunks = plan_chunks(layout, 2, 100000);
  std::vector<size_t> covered(layout.params().size(), 0);
  for (size_t k = 0; k < chunks.size(); ++k) {
    CHECK(chunks[k].key == k);
    const ParamInfo& p = layout.params()[chunks[k].param];
    REQUIRE(chunks[k].offset + chunks[k].size <= p.size);
    CHECK(chunks[k].size <= 100000);
    CHECK((p.offset + chunks[k].offset) % ParamLayout::kAlignment == 0);
    if (k > 0) CHECK(chunks[k].server >= chunks[k - 1].server);  // a server's keys are one run
  }
  // In tensor order: no gap, no overlap.
  auto by_position = chunks;
  std::sort(by_position.begin(), by_position.end(),
            [](const ChunkInfo& a, const ChunkInfo& b) { return std::tie(a.param, a.offset) < std::tie(b.param, b.offset); });
  for (const ChunkInfo& c : by_position) {
    CHECK(c.offset == covered[c.param]);
    covered[c.param] += c.size;
  }
  for (size_t p = 0; p < layout.params().size(); ++p) CHECK(covered[p] == layout.params()[p].size);
}

TEST_CASE("every large tensor is spread evenly over the servers") {
  // The first layer's gradient comes last in every step: each server must hold its share of it.
  const ParamLayout layout = make_param_layout(testing::mlp_job(700, 500, 1).model);
  for (uint32_t servers : {2u, 3u}) {
    const auto chunks = plan_chunks(layout, servers);
    for (size_t p = 0; p < layout.params().size(); ++p) {
      const size_t n = layout.params()[p].size;
      if (n < servers * kMinChunkFloats) continue;
      std::vector<size_t> held(servers, 0);
      for (const ChunkInfo& c : chunks) {
        if (c.param == p) held[c.server] += c.size;
      }
      INFO(layout.params()[p].name << " on " << servers << " servers");
      // (within a few kernel rows: kernels are cut between rows)
      for (size_t h : held) CHECK(static_cast<double>(h) == doctest::Approx(static_cast<double>(n) / servers).epsilon(0.05));
    }
  }
}

TEST_CASE("servers carry about equal bytes and the plan is deterministic") {
  const ParamLayout layout = make_param_layout(testing::mlp_job(700, 500, 1).model);
  for (uint32_t servers : {1u, 2u, 3u, 4u}) {
    const auto chunks = plan_chunks(layout, servers);
    CHECK(chunks.size() == plan_chunks(layout, servers).size());
    for (size_t k = 0; k < chunks.size(); ++k) CHECK(chunks[k].server == plan_chunks(layout, servers)[k].server);
    const auto loads = server_loads(chunks, servers);
    const size_t heaviest = *std::max_element(loads.begin(), loads.end());
    const size_t lightest = *std::min_element(loads.begin(), loads.end());
    INFO(servers << " servers: " << lightest << " to " << heaviest << " floats");
    CHECK(lightest > 0);
    // At most the tensors a server holds whole (each < kMinChunkFloats S floats: here the
    // 500 x 10 kernel and the biases, 6,210 floats) and a few kernel rows apart.
    size_t whole = 0;
    for (const ParamInfo& p : layout.params()) {
      if (p.size < servers * kMinChunkFloats) whole += p.size;
    }
    CHECK(heaviest - lightest <= whole + heaviest / 50);
    CHECK(chunks.size() >= 4 * servers);  // several transfers per server to pipeline
  }
}

TEST_CASE("a dense kernel is cut between rows, so its chunks can take factored gradients") {
  const ParamLayout layout = make_param_layout(testing::mlp_job(700, 500, 1).model);
  for (uint32_t servers : {1u, 2u, 3u}) {
    for (const ChunkInfo& c : plan_chunks(layout, servers)) {
      const ParamInfo& p = layout.params()[c.param];
      if (p.shape.size() != 2 || p.size < servers * kMinChunkFloats) continue;
      INFO(p.name << " on " << servers << " servers, chunk at " << c.offset);
      const auto columns = static_cast<size_t>(p.shape[1]);
      CHECK(c.offset % columns == 0);
      CHECK(c.size % columns == 0);
    }
  }
}

TEST_CASE("every server gets a chunk even when no tensor is worth striping") {
  // One 784 x 10 layer (7,840 + 10 floats) on up to 8 servers: the kernel is below kMinChunkFloats S.
  const ParamLayout layout = make_param_layout(testing::dense_stack(784, {10}));
  for (uint32_t servers = 1; servers <= 8; ++servers) {
    const auto chunks = plan_chunks(layout, servers);
    const auto loads = server_loads(chunks, servers);
    INFO(servers << " servers");
    for (size_t load : loads) CHECK(load > 0);
    size_t total = 0;
    for (const ChunkInfo& c : chunks) {
      CHECK((layout.params()[c.param].offset + c.offset) % ParamLayout::kAlignment == 0);
      total += c.size;
    }
    CHECK(total == layout.params()[0].size + layout.params()[1].size);
  }
}

TEST_CASE("row_servers: the server of each kernel row, or none when a chunk cuts a row") {
  const ParamLayout layout = make_param_layout(testing::mlp_job(700, 500, 1).model);
  const ParamInfo& kernel = layout.params()[0];
  const auto rows = static_cast<size_t>(kernel.shape[0]), columns = static_cast<size_t>(kernel.shape[1]);
  const auto chunks = plan_chunks(layout, 2);
  const std::vector<uint32_t> servers = row_servers(chunks, 0, rows, columns);
  REQUIRE(servers.size() == rows);
  size_t on_second = 0;
  for (const ChunkInfo& c : chunks) {
    if (c.param != 0) continue;
    for (size_t r = c.offset / columns; r < (c.offset + c.size) / columns; ++r) CHECK(servers[r] == c.server);
  }
  for (uint32_t s : servers) on_second += s == 1;
  CHECK(on_second > rows / 3);  // striped: both servers hold rows
  CHECK(on_second < 2 * rows / 3);
  // Cut inside a row: no row belongs to one server.
  std::vector<ChunkInfo> cut{{0, 0, 0, columns + 1, 0}, {1, 0, columns + 1, rows * columns - columns - 1, 1}};
  CHECK(row_servers(cut, 0, rows, columns).empty());
  // Not covering the whole kernel: likewise.
  CHECK(row_servers({{0, 0, 0, columns, 0}}, 0, rows, columns).empty());
}

TEST_CASE("a small model is not cut into pieces smaller than kMinChunkFloats: each push is worth a message") {
  // 64 -> 256 -> 256 -> 10 (85K floats) on 2 servers: only the 256 x 256 kernel (65,536 floats,
  // at least kMinChunkFloats per server) is striped; the 64 x 256 and 256 x 10 kernels and the
  // biases go whole. So 4 pieces + 5 whole tensors = 9 chunks (15 with a floor of 1,024 floats).
  const ParamLayout layout = make_param_layout(testing::dense_stack(64, {256, 256, 10}));
  const auto chunks = plan_chunks(layout, 2);
  CHECK(chunks.size() == 9);
  for (const ChunkInfo& c : chunks) {
    const ParamInfo& p = layout.params()[c.param];
    INFO(p.name << " at " << c.offset);
    if (p.size < 2 * kMinChunkFloats) {
      CHECK(c.size == p.size);  // whole
    } else {
      CHECK(c.size >= kMinChunkFloats);
    }
  }
  const auto loads = server_loads(chunks, 2);
  CHECK(loads[0] > 0);
  CHECK(loads[1] > 0);
  CHECK(plan_chunks(layout, 2, kDefaultMaxChunkFloats, 1024).size() == 15);
}
