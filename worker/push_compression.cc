#include "worker/push_compression.h"

#include <kj/debug.h>

#include <cstring>

#include "common/engine/compression.h"
#include "common/rpc/rpc_util.h"

namespace pstrain {

PushCompression::PushCompression(const std::vector<ChunkInfo>& chunks, const std::vector<size_t>& offsets,
                                 const ParamLayout& layout)
    : chunks_(compression_chunks(chunks, offsets, layout)), total_size_(layout.dense_size()) {}

void PushCompression::configure(const CompressionSpec& compression, uint64_t seed) {
  spec_ = compression;
  residual_.clear();
  if (spec_.keeps_worker_state()) residual_.assign(total_size_, 0.0f);
  plan_compression(chunks_, spec_, seed);
}

size_t PushCompression::encode(size_t k, const float* gradient, bool own_slice, uint64_t step,
                               proto::ParameterServer::PushParams::Builder request) {
  const CompressionChunk& c = chunks_[k];
  if (spec_.kind == CompressionKind::kFp16 && !c.moving) {
    auto half = request.getGradient().initHalf(static_cast<unsigned>(c.size * 2));
    encode_half({gradient, c.size}, half.begin());
    return half.size();
  }
  if (spec_.kind == CompressionKind::kBf16 && !c.moving) {
    auto bf16 = request.getGradient().initBfloat16(static_cast<unsigned>(c.size * 2));
    encode_bfloat16({gradient, c.size}, bf16.begin());
    return bf16.size();
  }
  if (spec_.kind == CompressionKind::kTopk && own_slice && !c.moving) {
    const size_t bytes = encode_topk(k, gradient, request);
    return bytes + (state_due(step) ? attach_state(k, request) : 0);
  }
  if (spec_.kind == CompressionKind::kPowerSgd && own_slice && c.rank > 0) {
    const size_t bytes = encode_powersgd(k, gradient, request);
    return bytes + (state_due(step) ? attach_state(k, request) : 0);
  }
  rpc::reference_tensor(request.getGradient().initDense(), {gradient, c.size});
  return c.size * sizeof(float);
}

size_t PushCompression::encode_topk(size_t k, const float* gradient,
                                    proto::ParameterServer::PushParams::Builder request) {
  const CompressionChunk& c = chunks_[k];
  const size_t count = topk_count(c.size, spec_.fraction);
  topk_indices_.resize(count);
  topk_values_.resize(count);
  topk_with_feedback({gradient, c.size}, {residual_.data() + c.offset, c.size}, topk_indices_, topk_values_,
                     topk_scratch_);
  auto topk = request.getGradient().initTopk();
  auto indices = topk.initIndices(static_cast<unsigned>(count));
  for (unsigned i = 0; i < count; ++i) indices.set(i, topk_indices_[i]);
  auto values = topk.initValues(static_cast<unsigned>(count * sizeof(float)));
  std::memcpy(values.begin(), topk_values_.data(), count * sizeof(float));
  return count * (sizeof(uint32_t) + sizeof(float));
}

size_t PushCompression::encode_powersgd(size_t k, const float* gradient,
                                        proto::ParameterServer::PushParams::Builder request) {
  CompressionChunk& c = chunks_[k];
  const size_t rows = c.size / c.columns;
  factor_p_.resize(rows * c.rank);
  factor_q_.resize(c.columns * c.rank);
  powersgd_with_feedback({gradient, c.size}, {residual_.data() + c.offset, c.size}, rows, c.columns, c.rank, c.warm_q,
                         factor_p_, factor_q_, factor_scratch_);
  auto low_rank = request.getGradient().initLowRank();
  low_rank.setColumns(static_cast<uint32_t>(c.columns));
  low_rank.setRank(static_cast<uint32_t>(c.rank));
  auto p = low_rank.initP(static_cast<unsigned>(factor_p_.size() * sizeof(float)));
  std::memcpy(p.begin(), factor_p_.data(), p.size());
  auto q = low_rank.initQ(static_cast<unsigned>(factor_q_.size() * sizeof(float)));
  std::memcpy(q.begin(), factor_q_.data(), q.size());
  return p.size() + q.size();
}

void PushCompression::round_pulled(AlignedFloats& values) const {
  if (spec_.kind != CompressionKind::kFp16) return;
  for (float& v : values) v = half_to_float(float_to_half(v));
}

size_t PushCompression::state_bytes(size_t k, bool with_position) const {
  return (chunks_[k].size + chunks_[k].warm_q.size()) * sizeof(float) + (with_position ? sizeof(uint64_t) : 0);
}

void PushCompression::write_state(size_t k, kj::ArrayPtr<kj::byte> bytes, std::optional<uint64_t> position) const {
  const CompressionChunk& c = chunks_[k];
  const size_t n = c.size, q = c.warm_q.size();
  KJ_ASSERT(bytes.size() == state_bytes(k, position.has_value()));
  std::memcpy(bytes.begin(), residual_.data() + c.offset, n * sizeof(float));
  if (q > 0) std::memcpy(bytes.begin() + n * sizeof(float), c.warm_q.data(), q * sizeof(float));
  if (position) std::memcpy(bytes.begin() + (n + q) * sizeof(float), &*position, sizeof(uint64_t));
}

size_t PushCompression::attach_state(size_t k, proto::ParameterServer::PushParams::Builder request) const {
  auto state = request.initWorkerState(static_cast<unsigned>(state_bytes(k, false)));
  write_state(k, state);
  return state.size();
}

bool PushCompression::load_state(size_t k, capnp::Data::Reader state, const StateWanted& wanted) {
  CompressionChunk& c = chunks_[k];
  const size_t n = c.size, q = c.warm_q.size();
  KJ_REQUIRE(state.size() == state_bytes(k, wanted.position.has_value()), "pulled workerState does not fit the chunk",
             k, state.size());
  if (wanted.position) {
    uint64_t position = 0;
    std::memcpy(&position, state.begin() + (n + q) * sizeof(float), sizeof(uint64_t));
    if (position != *wanted.position) return false;  // put at another cut: not this run's
  }
  std::memcpy(residual_.data() + c.offset, state.begin(), n * sizeof(float));
  if (q > 0) std::memcpy(c.warm_q.data(), state.begin() + n * sizeof(float), q * sizeof(float));
  ++states_taken_;
  return true;
}

}  // namespace pstrain
