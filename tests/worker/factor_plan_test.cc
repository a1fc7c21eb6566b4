// Which dense kernels a worker pushes as factors, grouped by server, and the input rows a group
// sends (worker/factor_plan.h).
#include <doctest/doctest.h>

#include <set>

#include "common/rpc/message_limits.h"
#include "tests/test_support.h"
#include "worker/factor_plan.h"

using namespace pstrain;

TEST_CASE("the large kernels of the MLP are factored at 64 examples per worker, not at 128") {
  const ParamLayout layout = make_param_layout(testing::mlp_job(700, 500, 1).model);
  const auto chunks = plan_chunks(layout, 2);
  const auto kernel = [&](const char* name) { return static_cast<size_t>(layout.find(name) - layout.params().data()); };

  const FactorPlan plan(layout, chunks, 64, true);
  // 784 x 700 and 700 x 500: 64 (in + 2 out) is under a third of in x out. 500 x 10 is not; biases never.
  CHECK(plan.factored_kernels()[kernel("layers.1.kernel")]);
  CHECK(plan.factored_kernels()[kernel("layers.2.kernel")]);
  CHECK_FALSE(plan.factored_kernels()[kernel("layers.3.kernel")]);
  CHECK_FALSE(plan.factored_kernels()[kernel("layers.1.bias")]);
  // One group per factored kernel and server, holding exactly that kernel's chunks on that server.
  REQUIRE(plan.groups().size() == 4);
  std::set<size_t> grouped;
  for (const FactorPlan::Group& g : plan.groups()) {
    CHECK(plan.factored_kernels()[g.param]);
    for (size_t k : g.chunks) {
      CHECK(chunks[k].param == g.param);
      CHECK(chunks[k].server == g.server);
      CHECK(plan.is_factored_chunk(k));
      grouped.insert(k);
    }
  }
  for (size_t k = 0; k < chunks.size(); ++k) {
    CHECK(plan.is_factored_chunk(k) == (grouped.count(k) == 1));
    CHECK(plan.is_factored_chunk(k) == plan.factored_kernels()[chunks[k].param]);
  }

  // With 128 examples the factors are no longer much smaller; when disabled, nothing is factored.
  CHECK(FactorPlan(layout, chunks, 128, true).groups().empty());
  CHECK(FactorPlan(layout, chunks, 64, false).groups().empty());
}

TEST_CASE("a group sends the input rows of its chunks that are nonzero in some example") {
  // One dense layer 64 -> 64 on 2 servers, in pieces of at least 1,024 floats (the service's
  // floor is larger): the kernel (4,096 floats) is cut into whole rows, 4 chunks.
  const ParamLayout layout = make_param_layout(testing::dense_stack(64, {64}));
  const auto chunks = plan_chunks(layout, 2, kDefaultMaxChunkFloats, 1024);
  const FactorPlan plan(layout, chunks, 2, true);
  REQUIRE(plan.groups().size() == 2);
  // Two examples, column-major (64 x 2): rows 1 and 6 nonzero in example 0, rows 6 and 40 in example 1.
  std::vector<float> inputs(128, 0.0f);
  inputs[1] = 2;
  inputs[6] = 3;
  inputs[64 + 6] = 4;
  inputs[64 + 40] = 5;
  std::set<uint32_t> all_rows;
  for (const FactorPlan::Group& g : plan.groups()) {
    std::vector<uint32_t> rows;
    AlignedFloats values;
    plan.gather_inputs(g, inputs.data(), 2, rows, values);
    REQUIRE(values.size() == rows.size() * 2);
    for (size_t i = 0; i < rows.size(); ++i) {
      // Each row lies in one of this group's chunks, and the values are that row's inputs.
      bool inside = false;
      for (size_t k : g.chunks) {
        inside = inside || (rows[i] * 64 >= chunks[k].offset && rows[i] * 64 < chunks[k].offset + chunks[k].size);
      }
      CHECK(inside);
      CHECK(values[i] == inputs[rows[i]]);
      CHECK(values[rows.size() + i] == inputs[64 + rows[i]]);
      CHECK(all_rows.insert(rows[i]).second);  // in one group only
    }
  }
  CHECK(all_rows == std::set<uint32_t>{1, 6, 40});
}

TEST_CASE("a kernel part over rpc::kMaxPartBytes on one server is pushed in several groups, each within it") {
  // 784 x 24000 on one server: 75 MB of values, which one pushFactors reply could not carry
  // (Cap'n Proto's 64 MiB message limit).
  JobSpec spec = testing::mlp_job(24000, 10, 1);
  const ParamLayout layout = make_param_layout(spec.model);
  const auto chunks = plan_chunks(layout, 1);
  const FactorPlan plan(layout, chunks, 64, true);
  const size_t kernel = static_cast<size_t>(layout.find("layers.1.kernel") - layout.params().data());
  REQUIRE(plan.factored_kernels()[kernel]);
  size_t groups = 0, floats = 0;
  std::set<size_t> grouped;
  for (const FactorPlan::Group& g : plan.groups()) {
    if (g.param != kernel) continue;
    ++groups;
    size_t group_floats = 0;
    for (size_t k : g.chunks) {
      group_floats += chunks[k].size;
      grouped.insert(k);
    }
    CHECK(group_floats * sizeof(float) <= rpc::kMaxPartBytes);
    floats += group_floats;
  }
  CHECK(groups >= 5);
  CHECK(floats == size_t{784} * 24000);  // every chunk of the kernel, once
  for (size_t k = 0; k < chunks.size(); ++k) CHECK((grouped.count(k) == 1) == (chunks[k].param == kernel));
}
