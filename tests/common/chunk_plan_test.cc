#include <doctest/doctest.h>

#include <algorithm>

#include "common/chunk_plan.h"
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
    CHECK(chunks[k].offset == covered[chunks[k].param]);  // in order, no gap, no overlap
    if (k > 0) CHECK(chunks[k].server >= chunks[k - 1].server);
    covered[chunks[k].param] += chunks[k].size;
  }
  for (size_t p = 0; p < layout.params().size(); ++p) CHECK(covered[p] == layout.params()[p].size);
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
    CHECK(heaviest - lightest <= 2 * ParamLayout::kAlignment);
    CHECK(chunks.size() >= 4 * servers);  // several transfers per server to pipeline
  }
}
