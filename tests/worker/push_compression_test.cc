// PushCompression: what a worker's push carries under each compression, its error feedback, and
// its state on the way to a backup and back (worker/push_compression.h).
#include "worker/push_compression.h"

#include <capnp/message.h>
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "common/engine/compression.h"

namespace pstrain {
namespace {

using PushBuilder = proto::ParameterServer::PushParams::Builder;

// A kernel [8, 4] (chunk 0, whole), its bias [4] (chunk 1) and a moving mean [4] (chunk 2).
struct Fixture {
  ParamLayout layout;
  std::vector<ChunkInfo> chunks;
  std::vector<size_t> offsets;
  Fixture() {
    layout.add({.name = "layers.0.kernel", .shape = {8, 4}, .role = ParamRole::kKernel});
    layout.add({.name = "layers.0.bias", .shape = {4}, .role = ParamRole::kBias});
    layout.add({.name = "layers.1.moving_mean", .shape = {4}, .role = ParamRole::kMovingMean});
    for (uint32_t p = 0; p < 3; ++p) {
      chunks.push_back({.key = p, .param = p, .offset = 0, .size = layout.params()[p].size, .server = 0});
      offsets.push_back(layout.params()[p].offset);
    }
  }
  PushCompression make(CompressionKind kind, uint64_t seed = 7) const {
    PushCompression c(chunks, offsets, layout);
    CompressionSpec spec;
    spec.kind = kind;
    spec.fraction = 0.25f;
    spec.rank = 2;
    c.configure(spec, seed);
    return c;
  }
};

std::vector<float> ramp(size_t n, float scale) {
  std::vector<float> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = scale * static_cast<float>((i * 7) % 13) - 6.0f * scale;
  return g;
}

std::vector<float> state_of(const PushCompression& c, size_t k) {
  std::vector<kj::byte> bytes(c.state_bytes(k, false));
  c.write_state(k, kj::arrayPtr(bytes.data(), bytes.size()));
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

TEST_CASE("push compression: topk sends its count and keeps the rest, exactly (error feedback)") {
  Fixture f;
  PushCompression c = f.make(CompressionKind::kTopk);
  CHECK(c.keeps_state());
  const std::vector<float> g = ramp(32, 1.0f);  // small integers: every sum below is exact
  std::vector<float> sent(32, 0.0f);
  for (int step = 0; step < 2; ++step) {
    capnp::MallocMessageBuilder message;
    PushBuilder push = message.initRoot<proto::ParameterServer::PushParams>();
    const size_t bytes = c.encode(0, g.data(), /*own_slice=*/true, step, push);
    REQUIRE(push.getGradient().isTopk());
    auto topk = push.getGradient().getTopk();
    CHECK(topk.getIndices().size() == topk_count(32, 0.25f));
    CHECK(bytes == topk.getIndices().size() * 8);
    CHECK(!push.hasWorkerState());  // no backup points set
    std::vector<float> values(topk.getIndices().size());
    std::memcpy(values.data(), topk.getValues().begin(), values.size() * sizeof(float));
    for (unsigned i = 0; i < values.size(); ++i) sent[topk.getIndices()[i]] += values[i];
  }
  const std::vector<float> residual = state_of(c, 0);
  REQUIRE(residual.size() == 32);
  for (size_t i = 0; i < 32; ++i) CHECK(sent[i] + residual[i] == 2.0f * g[i]);
}

TEST_CASE("push compression: a takeover's push and a moving statistic go float32, whole") {
  Fixture f;
  PushCompression topk = f.make(CompressionKind::kTopk);
  const std::vector<float> g = ramp(32, 0.5f);
  capnp::MallocMessageBuilder message;
  PushBuilder push = message.initRoot<proto::ParameterServer::PushParams>();
  CHECK(topk.encode(0, g.data(), /*own_slice=*/false, 0, push) == 32 * sizeof(float));
  CHECK(push.getGradient().isDense());
  for (float r : state_of(topk, 0)) CHECK(r == 0.0f);  // a lost worker's gradient leaves no residual here

  PushCompression half = f.make(CompressionKind::kFp16);
  CHECK(half.replies_half());
  capnp::MallocMessageBuilder m2;
  PushBuilder moving = m2.initRoot<proto::ParameterServer::PushParams>();
  CHECK(half.encode(2, g.data(), true, 0, moving) == 4 * sizeof(float));
  CHECK(moving.getGradient().isDense());
  capnp::MallocMessageBuilder m3;
  PushBuilder kernel = m3.initRoot<proto::ParameterServer::PushParams>();
  CHECK(half.encode(0, g.data(), true, 0, kernel) == 32 * 2);
  CHECK(kernel.getGradient().isHalf());
  AlignedFloats pulled(4, 0.1f);
  half.round_pulled(pulled);
  CHECK(pulled[0] == half_to_float(float_to_half(0.1f)));
  CHECK(pulled[0] != 0.1f);
}

TEST_CASE("push compression: bf16 pushes bfloat16 for its own slice and a takeover's, float32 for a moving statistic") {
  Fixture f;
  PushCompression bf16 = f.make(CompressionKind::kBf16);
  CHECK_FALSE(bf16.replies_half());
  CHECK_FALSE(bf16.keeps_state());
  const std::vector<float> g = ramp(32, 0.3f);
  for (const bool own : {true, false}) {
    capnp::MallocMessageBuilder message;
    PushBuilder push = message.initRoot<proto::ParameterServer::PushParams>();
    CHECK(bf16.encode(0, g.data(), own, 0, push) == 32 * 2);
    REQUIRE(push.getGradient().isBfloat16());
    std::vector<float> back(32);
    decode_bfloat16(push.getGradient().getBfloat16().begin(), back);
    for (size_t i = 0; i < 32; ++i) CHECK(back[i] == bfloat16_to_float(float_to_bfloat16(g[i])));
  }
  capnp::MallocMessageBuilder m2;
  PushBuilder moving = m2.initRoot<proto::ParameterServer::PushParams>();
  CHECK(bf16.encode(2, g.data(), true, 0, moving) == 4 * sizeof(float));
  CHECK(moving.getGradient().isDense());
  AlignedFloats pulled(4, 0.1f);
  bf16.round_pulled(pulled);
  CHECK(pulled[0] == 0.1f);  // values stay float32
}

TEST_CASE("push compression: the state rides the push before a backup point, and a cut's") {
  Fixture f;
  PushCompression c = f.make(CompressionKind::kTopk);
  c.set_backup_points([](uint64_t v) { return v % 4 == 0; });
  c.note_cut(7);
  const std::vector<float> g = ramp(32, 1.0f);
  for (uint64_t step = 0; step < 8; ++step) {
    capnp::MallocMessageBuilder message;
    PushBuilder push = message.initRoot<proto::ParameterServer::PushParams>();
    const size_t bytes = c.encode(0, g.data(), true, step, push);
    const bool due = (step + 1) % 4 == 0 || step + 1 == 7;
    CAPTURE(step);
    CHECK(push.hasWorkerState() == due);
    if (due) {
      CHECK(push.getWorkerState().size() == c.state_bytes(0, false));
      CHECK(bytes == topk_count(32, 0.25f) * 8 + c.state_bytes(0, false));
      // The state sent is the residual after this push.
      const std::vector<float> now = state_of(c, 0);
      CHECK(std::memcmp(push.getWorkerState().begin(), now.data(), now.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("push compression: powersgd's state (residual and warm-start Q) goes back and forth by position") {
  Fixture f;
  PushCompression a = f.make(CompressionKind::kPowerSgd, 11);
  PushCompression same_seed = f.make(CompressionKind::kPowerSgd, 11);
  PushCompression other_seed = f.make(CompressionKind::kPowerSgd, 12);
  // 8 x 4 at rank 2: 32 residual values and 2 x 4 of Q; the bias has no rows to factor.
  CHECK(a.state_bytes(0, false) == (32 + 8) * sizeof(float));
  CHECK(a.state_bytes(1, false) == 4 * sizeof(float));
  CHECK(state_of(a, 0) == state_of(same_seed, 0));
  CHECK(state_of(a, 0) != state_of(other_seed, 0));

  const std::vector<float> g = ramp(32, 0.25f);
  capnp::MallocMessageBuilder message;
  PushBuilder push = message.initRoot<proto::ParameterServer::PushParams>();
  a.encode(0, g.data(), true, 0, push);
  REQUIRE(push.getGradient().isLowRank());
  CHECK(push.getGradient().getLowRank().getRank() == 2);
  const std::vector<float> after = state_of(a, 0);
  CHECK(after != state_of(same_seed, 0));

  // Async: the state put at a cut carries its position; only that position's is taken back.
  std::vector<kj::byte> bytes(a.state_bytes(0, true));
  a.write_state(0, kj::arrayPtr(bytes.data(), bytes.size()), uint64_t{42});
  capnp::Data::Reader reader(bytes.data(), bytes.size());
  CHECK_FALSE(same_seed.load_state(0, reader, StateWanted{0, uint64_t{41}}));
  CHECK(same_seed.states_taken() == 0);
  CHECK(same_seed.load_state(0, reader, StateWanted{0, uint64_t{42}}));
  CHECK(same_seed.states_taken() == 1);
  CHECK(state_of(same_seed, 0) == after);
  // A state of another size is refused, loudly.
  capnp::Data::Reader short_reader(bytes.data(), bytes.size() - 4);
  CHECK_THROWS(same_seed.load_state(0, short_reader, StateWanted{0, uint64_t{42}}));
}

}  // namespace
}  // namespace pstrain
