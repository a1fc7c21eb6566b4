#include "worker/server_chunks.h"

#include <cstring>
#include <optional>

#include "common/engine/compression.h"
#include "common/engine/nn/moving_statistics.h"
#include "common/rpc/message_limits.h"
#include "common/base/rng.h"
#include "worker/stoppable_wait.h"

namespace pstrain {

ServerChunks::ServerChunks(std::string job_id, uint64_t generation, rpc::WorkerPass pass, std::vector<ChunkInfo> chunks,
                           std::vector<std::string> server_addresses, const ParamLayout& layout,
                           kj::ForkedPromise<void>& stop)
    : job_id_(std::move(job_id)),
      pass_(std::move(pass)),
      generation_(generation),
      chunks_(std::move(chunks)),
      addresses_(std::move(server_addresses)),
      stop_(stop) {
  for (const ChunkInfo& c : chunks_) {
    KJ_REQUIRE(c.param < layout.params().size() && c.offset + c.size <= layout.params()[c.param].size &&
                   c.server < addresses_.size(),
               "assignment has a chunk that does not fit the model", c.key);
    offsets_.push_back(layout.params()[c.param].offset + c.offset);
    const ParamInfo& param = layout.params()[c.param];
    const size_t columns = param.shape.size() >= 2 ? static_cast<size_t>(param.shape.back()) : 0;
    const bool whole_rows = columns > 0 && c.offset % columns == 0 && c.size % columns == 0;
    columns_.push_back(whole_rows && param.role == ParamRole::kKernel ? columns : 0);
    moving_.push_back(nn::is_moving_statistic(param.role));
  }
  versions_.assign(chunks_.size(), 0);
  values_.resize(layout.total_size());
  next_values_.resize(layout.total_size());
}

void ServerChunks::set_compression(const CompressionSpec& compression, uint64_t seed) {
  compression_ = compression;
  residual_.clear();
  ranks_.assign(chunks_.size(), 0);
  warm_q_.assign(chunks_.size(), {});
  if (compression_.keeps_worker_state()) residual_.assign(values_.size(), 0.0f);
  if (compression_.kind != CompressionKind::kPowerSgd) return;
  for (size_t k = 0; k < chunks_.size(); ++k) {
    if (columns_[k] == 0) continue;
    ranks_[k] = powersgd_rank(chunks_[k].size / columns_[k], columns_[k], compression_.rank);
    if (ranks_[k] == 0) continue;
    warm_q_[k].resize(columns_[k] * ranks_[k]);
    // The chunk's identity that outlives a re-plan with the same tensors: its tensor and start.
    powersgd_initial_q(mix_seed(mix_seed(seed, chunks_[k].param), chunks_[k].offset), warm_q_[k]);
  }
}

void ServerChunks::connect(kj::WaitScope& wait_scope, kj::AsyncIoProvider& io, const rpc::ClusterCredential& credential) {
  for (const std::string& address : addresses_) {
    auto connection = wait_unless_stopped(
        rpc::connect(io, rpc::parse_host_port(address, 7100, "server address"), credential), stop_, wait_scope);
    servers_.push_back(connection->bootstrap().castAs<proto::ParameterServer>());
    connections_.push_back(kj::mv(connection));
  }
}

void ServerChunks::pull(kj::WaitScope& wait_scope, uint64_t min_version, std::optional<StateWanted> state) {
  pull_into(wait_scope, min_version, /*exact=*/false, values_, versions_, has_compression_state() ? state : std::nullopt);
}

size_t ServerChunks::state_bytes(size_t k, bool with_position) const {
  return (chunks_[k].size + warm_q_[k].size()) * sizeof(float) + (with_position ? sizeof(uint64_t) : 0);
}

void ServerChunks::write_state(size_t k, kj::ArrayPtr<kj::byte> bytes, std::optional<uint64_t> position) const {
  const size_t n = chunks_[k].size, q = warm_q_[k].size();
  KJ_ASSERT(bytes.size() == state_bytes(k, position.has_value()));
  std::memcpy(bytes.begin(), residual_.data() + offsets_[k], n * sizeof(float));
  if (q > 0) std::memcpy(bytes.begin() + n * sizeof(float), warm_q_[k].data(), q * sizeof(float));
  if (position) std::memcpy(bytes.begin() + (n + q) * sizeof(float), &*position, sizeof(uint64_t));
}

template <typename Request>
void ServerChunks::attach_state(size_t k, Request& request) {
  auto state = request.initWorkerState(static_cast<unsigned>(state_bytes(k, false)));
  write_state(k, state);
  pushed_bytes_ += state.size();
}

void ServerChunks::put_state(kj::WaitScope& wait_scope, uint32_t worker, uint64_t position) {
  std::vector<std::vector<size_t>> by_server(servers_.size());
  for (size_t k = 0; k < chunks_.size(); ++k) by_server[chunks_[k].server].push_back(k);
  kj::Vector<kj::Promise<void>> replies;
  for (size_t server = 0; server < servers_.size(); ++server) {
    if (by_server[server].empty()) continue;
    auto request = servers_[server].putStateRequest();
    request.setJobId(job_id_);
    request.setWorker(worker);
    pass_.set_on(request);
    auto keys = request.initKeys(static_cast<unsigned>(by_server[server].size()));
    auto states = request.initStates(static_cast<unsigned>(by_server[server].size()));
    for (unsigned i = 0; i < keys.size(); ++i) {
      const size_t k = by_server[server][i];
      keys.set(i, chunks_[k].key);
      auto state = states.init(i, static_cast<unsigned>(state_bytes(k, true)));
      write_state(k, state, position);
      pushed_bytes_ += state.size();
    }
    replies.add(request.send().ignoreResult());
  }
  wait_unless_stopped(kj::joinPromises(replies.releaseAsArray()), stop_, wait_scope);
}

void ServerChunks::load_state(size_t k, capnp::Data::Reader state, const StateWanted& wanted) {
  const size_t n = chunks_[k].size, q = warm_q_[k].size();
  KJ_REQUIRE(state.size() == state_bytes(k, wanted.position.has_value()), "pulled workerState does not fit the chunk",
             chunks_[k].key, state.size());
  if (wanted.position) {
    uint64_t position = 0;
    std::memcpy(&position, state.begin() + (n + q) * sizeof(float), sizeof(uint64_t));
    if (position != *wanted.position) return;  // put at another cut: not this run's
  }
  std::memcpy(residual_.data() + offsets_[k], state.begin(), n * sizeof(float));
  if (q > 0) std::memcpy(warm_q_[k].data(), state.begin() + n * sizeof(float), q * sizeof(float));
  pulled_bytes_ += state.size();
  ++states_taken_;
}

const float* ServerChunks::pull_exact(kj::WaitScope& wait_scope, uint64_t version) {
  std::vector<uint64_t> versions;
  pull_into(wait_scope, version, /*exact=*/true, exact_values_, versions);
  return exact_values_.data();
}

void ServerChunks::pull_into(kj::WaitScope& wait_scope, uint64_t min_version, bool exact, AlignedFloats& into,
                             std::vector<uint64_t>& versions, std::optional<StateWanted> state) {
  into.resize(values_.size());
  versions.resize(chunks_.size());
  kj::Vector<kj::Promise<void>> replies;
  for (size_t k = 0; k < chunks_.size(); ++k) {
    auto request = servers_[chunks_[k].server].pullRequest();
    request.setJobId(job_id_);
    request.setKey(chunks_[k].key);
    request.setMinVersion(min_version);
    request.setExact(exact);
    if (state) {
      request.setWithState(true);
      request.setStateOf(state->slice);
    }
    pass_.set_on(request);
    replies.add(request.send().then([this, k, &into, &versions, exact, min_version, state](
                                        capnp::Response<proto::ParameterServer::PullResults>&& r) {
      const auto values = rpc::tensor_view(r.getValues(), chunks_[k].size, "pulled values");
      std::memcpy(into.data() + offsets_[k], values.data(), values.size_bytes());
      versions[k] = r.getVersion();
      KJ_REQUIRE(!exact || versions[k] == min_version, "server sent another version than the one asked for",
                 versions[k], min_version);
      // Sync: a state of another version than the one this session starts from is not this
      // run's. (Async: the chunks' versions say nothing; the state's position does.)
      if (state && (state->position || versions[k] == min_version) && r.getWorkerState().size() > 0) {
        load_state(k, r.getWorkerState(), *state);
      }
    }));
  }
  wait_unless_stopped(kj::joinPromises(replies.releaseAsArray()), stop_, wait_scope);
  if (compression_.kind == CompressionKind::kFp16) {
    for (float& v : into) v = half_to_float(float_to_half(v));
  }
}

kj::Promise<void> ServerChunks::push(size_t k, const GradientSlice& slice, const InputSparsity::Ranges& ranges,
                                     const InputSparsity::Ranges& want) {
  return send_push(k, slice, ranges, /*take_values=*/true, want);
}

kj::Promise<void> ServerChunks::push_without_values(const GradientSlice& slice) {
  kj::Vector<kj::Promise<void>> replies;
  for (size_t k = 0; k < chunks_.size(); ++k) {
    replies.add(send_push(k, slice, std::nullopt, /*take_values=*/false, std::nullopt));
  }
  return kj::joinPromises(replies.releaseAsArray());
}

void ServerChunks::fill_push(size_t k, proto::ParameterServer::PushParams::Builder request, const GradientSlice& slice,
                             const InputSparsity::Ranges& ranges, bool take_values, const InputSparsity::Ranges& want) {
  const float* gradient = slice.gradient + offsets_[k];
  request.setJobId(job_id_);
  request.setKey(chunks_[k].key);
  request.setStep(slice.step);
  request.setSlice(slice.slice);
  request.setSliceCount(slice.slice_count);
  request.setWorker(slice.slice);
  pass_.set_on(request);
  request.setExamples(slice.examples);
  request.setBaseVersion(versions_[k]);
  request.setGeneration(generation_);
  // Zero-copy: the message points into the gradient buffer, which stays untouched until every
  // reply is in (a reply implies its request was fully sent).
  if (ranges) {
    // Rows outside the ranges are exactly zero: they stay home.
    auto sparse = request.getGradient().initSparse();
    rpc::set_ranges(sparse.initRanges(static_cast<unsigned>(ranges->size())), *ranges);
    auto parts = sparse.initParts(static_cast<unsigned>(ranges->size()));
    for (unsigned i = 0; i < ranges->size(); ++i) {
      rpc::reference_part(parts, i, {gradient + (*ranges)[i].offset, (*ranges)[i].size});
      pushed_bytes_ += (*ranges)[i].size * sizeof(float);
    }
  } else if (compression_.kind == CompressionKind::kFp16 && !moving_[k]) {
    auto half = request.getGradient().initHalf(static_cast<unsigned>(chunks_[k].size * 2));
    encode_half({gradient, chunks_[k].size}, half.begin());
    pushed_bytes_ += half.size();
  } else if (compression_.kind == CompressionKind::kTopk && take_values && !moving_[k]) {
    // This worker's own slice: the largest entries of gradient + residual. (A takeover pushes a
    // lost worker's gradient whole below: its residual died with it.)
    const size_t n = chunks_[k].size, count = topk_count(n, compression_.fraction);
    topk_indices_.resize(count);
    topk_values_.resize(count);
    topk_with_feedback({gradient, n}, {residual_.data() + offsets_[k], n}, topk_indices_, topk_values_, topk_scratch_);
    auto topk = request.getGradient().initTopk();
    auto indices = topk.initIndices(static_cast<unsigned>(count));
    for (unsigned i = 0; i < count; ++i) indices.set(i, topk_indices_[i]);
    auto values = topk.initValues(static_cast<unsigned>(count * sizeof(float)));
    std::memcpy(values.begin(), topk_values_.data(), count * sizeof(float));
    pushed_bytes_ += count * (sizeof(uint32_t) + sizeof(float));
    if (state_due(slice.step)) attach_state(k, request);
  } else if (compression_.kind == CompressionKind::kPowerSgd && take_values && ranks_[k] > 0) {
    // This worker's own slice, as rank-r factors of gradient + residual (a takeover pushes a lost
    // worker's gradient whole, as for topk).
    const size_t columns = columns_[k], rows = chunks_[k].size / columns, rank = ranks_[k];
    factor_p_.resize(rows * rank);
    factor_q_.resize(columns * rank);
    powersgd_with_feedback({gradient, chunks_[k].size}, {residual_.data() + offsets_[k], chunks_[k].size}, rows,
                           columns, rank, warm_q_[k], factor_p_, factor_q_, factor_scratch_);
    auto low_rank = request.getGradient().initLowRank();
    low_rank.setColumns(static_cast<uint32_t>(columns));
    low_rank.setRank(static_cast<uint32_t>(rank));
    auto p = low_rank.initP(static_cast<unsigned>(factor_p_.size() * sizeof(float)));
    std::memcpy(p.begin(), factor_p_.data(), p.size());
    auto q = low_rank.initQ(static_cast<unsigned>(factor_q_.size() * sizeof(float)));
    std::memcpy(q.begin(), factor_q_.data(), q.size());
    pushed_bytes_ += p.size() + q.size();
    if (state_due(slice.step)) attach_state(k, request);
  } else {
    rpc::reference_tensor(request.getGradient().initDense(), {gradient, chunks_[k].size});
    pushed_bytes_ += chunks_[k].size * sizeof(float);
  }
  if (take_values && !want && compression_.kind == CompressionKind::kFp16) request.setReplyHalf(true);
  if (!take_values) {
    request.getReply().initRanges(0);  // no ranges: an empty reply
  } else if (want) {
    rpc::set_ranges(request.getReply().initRanges(static_cast<unsigned>(want->size())), *want);
  }
}

kj::Promise<void> ServerChunks::send_push(size_t k, const GradientSlice& slice, const InputSparsity::Ranges& ranges,
                                          bool take_values, const InputSparsity::Ranges& want) {
  auto request = servers_[chunks_[k].server].pushRequest();
  fill_push(k, request, slice, ranges, take_values, want);
  InputSparsity::Ranges wanted = take_values ? want : std::nullopt;
  return request.send().then([this, k, take_values, wanted = std::move(wanted)](
                                 capnp::Response<proto::ParameterServer::PushResults>&& r) {
    if (take_values) take_reply(k, r, wanted);
  });
}

kj::Promise<void> ServerChunks::push_batch(uint32_t server, const std::vector<BatchedPush>& pushes,
                                           const GradientSlice& slice) {
  KJ_REQUIRE(!pushes.empty() && pushes.size() <= rpc::kMaxBatchedPushes, "a batch of pushes holds 1 to",
             rpc::kMaxBatchedPushes, pushes.size());
  auto request = servers_[server].pushBatchRequest();
  auto entries = request.initPushes(static_cast<unsigned>(pushes.size()));
  std::vector<InputSparsity::Ranges> wanted;
  wanted.reserve(pushes.size());
  for (unsigned i = 0; i < pushes.size(); ++i) {
    const BatchedPush& p = pushes[i];
    KJ_REQUIRE(chunks_[p.chunk].server == server, "a batch of pushes goes to one server", p.chunk, server);
    fill_push(p.chunk, entries[i], slice, p.ranges, /*take_values=*/true, p.want);
    wanted.push_back(p.want);
  }
  std::vector<size_t> chunks;
  chunks.reserve(pushes.size());
  for (const BatchedPush& p : pushes) chunks.push_back(p.chunk);
  return request.send().then([this, chunks = std::move(chunks), wanted = std::move(wanted)](
                                 capnp::Response<proto::ParameterServer::PushBatchResults>&& r) {
    const auto results = r.getResults();
    KJ_REQUIRE(results.size() == chunks.size(), "batch reply has the wrong number of results", results.size(),
               chunks.size());
    for (unsigned i = 0; i < results.size(); ++i) take_reply(chunks[i], results[i], wanted[i]);
  });
}

void ServerChunks::take_reply(size_t k, proto::ParameterServer::PushResults::Reader r,
                              const InputSparsity::Ranges& wanted) {
  float* into = next_values(k);
  const auto reply = r.getValues();
  KJ_REQUIRE(reply.isParts() == wanted.has_value(), "reply carries other values than asked for (whole or ranges)");
  if (wanted) {
    const auto parts = reply.getParts();
    KJ_REQUIRE(parts.size() == wanted->size(), "reply has the wrong number of parts", parts.size(), wanted->size());
    for (unsigned i = 0; i < parts.size(); ++i) {
      const auto values = rpc::part_view(parts[i], (*wanted)[i].size, "updated values");
      std::memcpy(into + (*wanted)[i].offset, values.data(), values.size_bytes());
      pulled_bytes_ += values.size_bytes();
    }
  } else if (reply.isHalf()) {
    const auto half = reply.getHalf();
    KJ_REQUIRE(half.size() == chunks_[k].size * 2, "fp16 reply has the wrong size", half.size(), chunks_[k].size);
    decode_half(half.begin(), {into, chunks_[k].size});
    pulled_bytes_ += half.size();
  } else {
    const auto values = rpc::tensor_view(reply.getWhole(), chunks_[k].size, "updated values");
    std::memcpy(into, values.data(), values.size_bytes());
    pulled_bytes_ += values.size_bytes();
  }
  versions_[k] = r.getVersion();
  if (r.getCutAt() > r.getVersion()) cut_points_.insert(r.getCutAt());
  count_reply(r.getApplied());
}

ServerChunks::PushFactorsRequest ServerChunks::factors_request(uint32_t server, const std::vector<size_t>& chunks,
                                                               const GradientSlice& slice) {
  auto request = servers_[server].pushFactorsRequest();
  request.setJobId(job_id_);
  auto keys = request.initKeys(static_cast<unsigned>(chunks.size()));
  auto base_versions = request.initBaseVersions(static_cast<unsigned>(chunks.size()));
  for (unsigned i = 0; i < chunks.size(); ++i) {
    keys.set(i, chunks_[chunks[i]].key);
    base_versions.set(i, versions_[chunks[i]]);
  }
  request.setStep(slice.step);
  request.setSlice(slice.slice);
  request.setSliceCount(slice.slice_count);
  request.setWorker(slice.slice);
  pass_.set_on(request);
  request.setExamples(slice.examples);
  request.setGeneration(generation_);
  return request;
}

void ServerChunks::finish(kj::WaitScope& wait_scope, uint32_t worker) {
  for (auto& server : servers_) {
    auto request = server.workerFinishedRequest();
    request.setJobId(job_id_);
    request.setWorker(worker);
    pass_.set_on(request);
    request.send().wait(wait_scope);
  }
}

}  // namespace pstrain
