#include "worker/server_chunks.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "common/engine/compression.h"
#include "common/rpc/message_limits.h"

namespace pstrain {

namespace {

// Where each chunk lives in the flat buffers; throws if a chunk does not fit `layout` or names
// no server. Sparse tables' pieces are not here (TableClient's).
std::vector<size_t> chunk_offsets(const std::vector<ChunkInfo>& chunks, const ParamLayout& layout,
                                  size_t server_count) {
  std::vector<size_t> offsets;
  offsets.reserve(chunks.size());
  for (const ChunkInfo& c : chunks) {
    KJ_REQUIRE(!c.is_table_piece() && fits_layout(c, layout) && c.server < server_count,
               "assignment has a chunk that does not fit the model", c.key);
    offsets.push_back(layout.params()[c.param].offset + c.offset);
  }
  return offsets;
}

// The chunks that are (`pieces`) or are not sparse tables' pieces.
std::vector<ChunkInfo> chunks_where(const std::vector<ChunkInfo>& chunks, bool pieces) {
  std::vector<ChunkInfo> kept;
  for (const ChunkInfo& c : chunks) {
    if (c.is_table_piece() == pieces) kept.push_back(c);
  }
  return kept;
}

}  // namespace

ServerChunks::ServerChunks(std::string job_id, uint64_t generation, rpc::WorkerPass pass, std::vector<ChunkInfo> chunks,
                           std::vector<std::string> server_addresses, const ParamLayout& layout,
                           kj::ForkedPromise<void>& stop)
    : job_id_(std::move(job_id)),
      pass_(std::move(pass)),
      generation_(generation),
      table_pieces_(chunks_where(chunks, /*pieces=*/true)),
      chunks_(chunks_where(chunks, /*pieces=*/false)),
      offsets_(chunk_offsets(chunks_, layout, server_addresses.size())),
      versions_(chunks_.size(), 0),
      sum_squares_(chunks_.size(), 0.0),
      servers_(std::move(server_addresses), stop),
      compression_(chunks_, offsets_, layout) {
  // The dense tensors only: sparse tables come a step's rows at a time (session_tables.h).
  values_.resize(layout.dense_size());
  next_values_.resize(layout.dense_size());
}

void ServerChunks::reply_rounded(const std::vector<size_t>& params) {
  rounded_.assign(chunks_.size(), false);
  if (compression_.replies_half()) return;  // fp16 replies already (the job's compression)
  for (size_t k = 0; k < chunks_.size(); ++k) {
    rounded_[k] = std::find(params.begin(), params.end(), chunks_[k].param) != params.end();
  }
}

void ServerChunks::pull(kj::WaitScope& wait_scope, uint64_t min_version, std::optional<StateWanted> state) {
  pull_into(wait_scope, min_version, /*exact=*/false, values_, versions_, compression_.keeps_state() ? state : std::nullopt);
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
    request.setGeneration(generation_);
    pass_.set_on(request);
    auto keys = request.initKeys(static_cast<unsigned>(by_server[server].size()));
    auto states = request.initStates(static_cast<unsigned>(by_server[server].size()));
    for (unsigned i = 0; i < keys.size(); ++i) {
      const size_t k = by_server[server][i];
      keys.set(i, chunks_[k].key);
      auto state = states.init(i, static_cast<unsigned>(compression_.state_bytes(k, true)));
      compression_.write_state(k, state, position);
      counts_.pushed_bytes += state.size();
    }
    replies.add(request.send().ignoreResult());
  }
  servers_.wait(kj::joinPromises(replies.releaseAsArray()), wait_scope);
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
  servers_.wait(send_pulls(min_version, exact, into, versions, state, nullptr), wait_scope);
  compression_.round_pulled(into);
}

kj::Promise<void> ServerChunks::pull_clipped(uint64_t version, const std::vector<float>& factors) {
  KJ_REQUIRE(factors.size() == chunks_.size(), "one clip factor per chunk", factors.size(), chunks_.size());
  return send_pulls(version, /*exact=*/false, next_values_, versions_, std::nullopt, &factors);
}

kj::Promise<void> ServerChunks::send_pulls(uint64_t min_version, bool exact, AlignedFloats& into,
                                           std::vector<uint64_t>& versions, std::optional<StateWanted> state,
                                           const std::vector<float>* clip_factors) {
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
    if (clip_factors != nullptr) {
      request.setClipped(true);
      request.setClipFactor((*clip_factors)[k]);
    }
    pass_.set_on(request);
    const bool counted = clip_factors != nullptr;  // a step's values, as push replies' are
    replies.add(request.send().then([this, k, &into, &versions, exact, min_version, state, counted](
                                        capnp::Response<proto::ParameterServer::PullResults>&& r) {
      const auto values = rpc::tensor_view(r.getValues(), chunks_[k].size, "pulled values");
      std::memcpy(into.data() + offsets_[k], values.data(), values.size_bytes());
      if (counted) counts_.pulled_bytes += values.size_bytes();
      versions[k] = r.getVersion();
      KJ_REQUIRE(!exact || versions[k] == min_version, "server sent another version than the one asked for",
                 versions[k], min_version);
      // Sync: a state of another version than the one this session starts from is not this
      // run's. (Async: the chunks' versions say nothing; the state's position does.)
      if (state && (state->position || versions[k] == min_version) && r.getWorkerState().size() > 0 &&
          compression_.load_state(k, r.getWorkerState(), *state)) {
        counts_.pulled_bytes += r.getWorkerState().size();
      }
    }));
  }
  return kj::joinPromises(replies.releaseAsArray());
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
  request.setLrScale(slice.lr_scale);
  // Zero-copy: the message points into the gradient buffer, which stays untouched until every
  // reply is in (a reply implies its request was fully sent).
  if (ranges) {
    // Rows outside the ranges are exactly zero: they stay home.
    auto sparse = request.getGradient().initSparse();
    rpc::set_ranges(sparse.initRanges(static_cast<unsigned>(ranges->size())), *ranges);
    auto parts = sparse.initParts(static_cast<unsigned>(ranges->size()));
    for (unsigned i = 0; i < ranges->size(); ++i) {
      rpc::reference_part(parts, i, {gradient + (*ranges)[i].offset, (*ranges)[i].size});
      counts_.pushed_bytes += (*ranges)[i].size * sizeof(float);
    }
  } else {
    counts_.pushed_bytes += compression_.encode(k, gradient, take_values, slice.step, request);
  }
  if (take_values && !want && compression_.replies_half()) request.setReplyHalf(true);
  if (take_values && !want && replies_rounded(k)) request.setReplyBfloat16(true);
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
  if (r.getHeld()) {  // clipping: the values come with the pull that brings the factor (pull_clipped)
    sum_squares_[k] = r.getSumSquares();
    counts_.count_reply(r.getApplied());
    return;
  }
  float* into = next_values(k);
  const auto reply = r.getValues();
  KJ_REQUIRE(reply.isParts() == wanted.has_value(), "reply carries other values than asked for (whole or ranges)");
  if (wanted) {
    const auto parts = reply.getParts();
    KJ_REQUIRE(parts.size() == wanted->size(), "reply has the wrong number of parts", parts.size(), wanted->size());
    for (unsigned i = 0; i < parts.size(); ++i) {
      const auto values = rpc::part_view(parts[i], (*wanted)[i].size, "updated values");
      std::memcpy(into + (*wanted)[i].offset, values.data(), values.size_bytes());
      counts_.pulled_bytes += values.size_bytes();
    }
  } else if (reply.isBfloat16()) {  // asked for (replies_rounded): the values this worker's products round alike
    const auto rounded = reply.getBfloat16();
    KJ_REQUIRE(replies_rounded(k) && rounded.size() == chunks_[k].size * 2, "unasked or wrong-sized bfloat16 reply",
               rounded.size(), chunks_[k].size);
    decode_bfloat16(rounded.begin(), {into, chunks_[k].size});
    counts_.pulled_bytes += rounded.size();
  } else if (reply.isHalf()) {
    const auto half = reply.getHalf();
    KJ_REQUIRE(half.size() == chunks_[k].size * 2, "fp16 reply has the wrong size", half.size(), chunks_[k].size);
    decode_half(half.begin(), {into, chunks_[k].size});
    counts_.pulled_bytes += half.size();
  } else {
    const auto values = rpc::tensor_view(reply.getWhole(), chunks_[k].size, "updated values");
    std::memcpy(into, values.data(), values.size_bytes());
    counts_.pulled_bytes += values.size_bytes();
  }
  versions_[k] = r.getVersion();
  if (r.getCutAt() > r.getVersion()) compression_.note_cut(r.getCutAt());
  counts_.count_reply(r.getApplied());
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
  request.setLrScale(slice.lr_scale);
  return request;
}

void ServerChunks::finish(kj::WaitScope& wait_scope, uint32_t worker) {
  for (size_t server = 0; server < servers_.size(); ++server) {
    auto request = servers_[server].workerFinishedRequest();
    request.setJobId(job_id_);
    request.setWorker(worker);
    pass_.set_on(request);
    request.send().wait(wait_scope);
  }
}

}  // namespace pstrain
