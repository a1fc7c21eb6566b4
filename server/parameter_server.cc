#include "server/parameter_server.h"

#include <cmath>

#include "server/server_rpc_helpers.h"

#include "common/engine/compression.h"
#include "common/base/error.h"
#include "common/data/job_spec.h"
#include "common/base/log.h"
#include "common/rpc/message_limits.h"
#include "common/rpc/cluster_auth.h"
#include "common/rpc/rpc_util.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <map>
#include <optional>

namespace pstrain {

using namespace server_rpc;
ParameterServerImpl::Job& ParameterServerImpl::find(capnp::Text::Reader job_id) {
  const auto it = jobs_.find(rpc::to_string(job_id));
  KJ_REQUIRE(it != jobs_.end(), "unknown job (not configured on this server)", job_id);
  return *it->second;
}

void ParameterServerImpl::check_worker(Job& job, capnp::Text::Reader job_id, uint32_t node, capnp::Data::Reader token) {
  if (job.worker_key.empty()) return;
  if (const auto known = job.worker_tokens.find(node); known != job.worker_tokens.end()) {
    if (rpc::token_matches(known->second, token.begin(), token.size())) return;
  } else if (std::string expected = rpc::worker_token(job.worker_key, node);
             rpc::token_matches(expected, token.begin(), token.size())) {
    job.worker_tokens.emplace(node, std::move(expected));
    return;
  }
  ++refused_calls_;
  if ((refused_calls_ & (refused_calls_ - 1)) == 0) {  // 1, 2, 4, ...: a flood does not flood the log
    PSLOG(kWarning) << "job " << rpc::to_string(job_id) << ": refused a call of node " << node
                    << ": no valid worker token (" << refused_calls_ << " refused so far)";
  }
  KJ_FAIL_REQUIRE(
      "refused: this node is not a worker the coordinator assigned to the job (no valid worker token)", job_id,
      node);
}

ParameterShard& ParameterServerImpl::shard_with_key(Job& job, capnp::Text::Reader job_id, uint32_t key) {
  KJ_REQUIRE(job.shard->holds(key), "unknown parameter key: this server does not hold it", job_id, key);
  return *job.shard;
}

kj::Promise<void> ParameterServerImpl::configure(ConfigureContext context) {
  const auto config = context.getParams().getConfig();
  const std::string job_id = rpc::to_string(config.getJobId());
  KJ_REQUIRE(!job_id.empty(), "job id must not be empty");
  JobSpec spec;
  try {
    spec = parse_accepted_job_spec(rpc::to_string(config.getSpecJson()));
  } catch (const SpecError& e) {
    KJ_FAIL_REQUIRE("invalid job spec", e.what());
  }
  // The shard keeps a clock and a flag per worker: an absurd count (2^32 - 1) cost gigabytes
  // before anything else was checked (found by fuzz/param_server_fuzz.cc). A job has at most 256
  // workers (/training/workers, common/data/job_spec_json.cc).
  constexpr uint32_t kMaxWorkers = 256;
  KJ_REQUIRE(config.getWorkers() <= kMaxWorkers, "too many workers", config.getWorkers(), kMaxWorkers);
  const std::vector<ChunkInfo> chunks = rpc::get_chunks(config.getChunks());
  const ParamLayout layout = make_param_layout(spec.model);
  for (const ChunkInfo& c : chunks) {
    KJ_REQUIRE(fits_layout(c, layout), "chunk does not fit the model's parameters", c.key);
  }
  auto job = std::make_shared<Job>();
  job->shard = std::make_unique<ParameterShard>(shard_config_of(spec), chunks, config.getServerIndex(), config.getWorkers());
  job->shard->holds().reject_below(config.getMinGeneration());
  job->worker_key = std::string(reinterpret_cast<const char*>(config.getWorkerKey().begin()), config.getWorkerKey().size());
  if (store_ != nullptr && spec.training.mode == TrainingMode::kSync) {
    // Backups at the spec's save_freq (sync mode: every chunk passes every version), plus any
    // version a preemption asks for.
    // Without a step count per epoch (a configure from an older coordinator), "epoch" backups
    // cannot be placed: none rather than one every step.
    const uint64_t steps_per_epoch = config.getStepsPerEpoch() > 0 ? config.getStepsPerEpoch() : UINT64_MAX;
    const BackupSpec backup = spec.backup;
    Job* raw = job.get();
    job->shard->enable_backups(
        [backup, steps_per_epoch, raw](uint64_t v) {
          if (v == 0) return false;
          if (raw->extra_backup_points.count(v) != 0) return true;
          switch (backup.frequency) {
            case BackupSpec::Frequency::kNone: return false;
            case BackupSpec::Frequency::kEpoch: return v % steps_per_epoch == 0;
            case BackupSpec::Frequency::kSteps: return v % static_cast<uint64_t>(backup.steps) == 0;
          }
          return false;
        },
        [this, job_id, raw, backup, steps_per_epoch](uint64_t version, std::vector<ChunkSnapshot> snapshots) {
          store_->write_backup(job_id, version, std::move(snapshots));
          // Do not get a whole interval ahead of the last durable backup.
          const uint64_t interval = backup.frequency == BackupSpec::Frequency::kSteps ? static_cast<uint64_t>(backup.steps)
                                    : backup.frequency == BackupSpec::Frequency::kEpoch ? steps_per_epoch
                                                                                          : 0;
          if (interval > 0) raw->shard->holds().hold_until_durable(version + interval);
        });
  }
  PSLOG(kInfo) << "job " << job_id << ": holding " << job->shard->keys().size() << " chunks as server "
               << config.getServerIndex() << " (" << training_mode_name(spec.training.mode) << ", "
               << config.getWorkers() << " workers)";
  prune_retired();
  if (const auto old = jobs_.find(job_id); old != jobs_.end()) retire(old->second);
  jobs_[job_id] = std::move(job);
  return kj::READY_NOW;
}

kj::Promise<std::shared_ptr<ParameterServerImpl::Job>> ParameterServerImpl::when_at_version(ParameterShard& shard,
                                                                                           const std::string& job_id,
                                                                                           uint32_t key,
                                                                                           uint64_t min_version,
                                                                                           std::optional<float> clip_factor) {
  auto paf = kj::newPromiseAndFulfiller<uint64_t>();
  auto shared = share(kj::mv(paf.fulfiller));
  shard.pull(key, min_version, [shared](uint64_t version) { shared.fulfill(version); }, clip_factor);
  std::weak_ptr<Job> weak = jobs_.at(job_id);
  return paf.promise.then([weak](uint64_t) {
    auto job = weak.lock();
    KJ_REQUIRE(job != nullptr && !job->dropped, "job was dropped");
    return job;
  });
}

kj::Promise<void> ParameterServerImpl::pull(PullContext context) {
  const auto params = context.getParams();
  const std::string job_id = rpc::to_string(params.getJobId());
  Job& job = find(params.getJobId());
  check_worker(job, params.getJobId(), params.getNode(), params.getToken());
  const uint32_t key = params.getKey();
  ParameterShard& shard = shard_with_key(job, params.getJobId(), key);
  KJ_REQUIRE(!shard.chunk(key).info.is_table_piece(), "a sparse table's piece is pulled by rows (pullRows)", key);
  const bool exact = params.getExact();
  const uint64_t wanted = params.getMinVersion();
  const std::optional<uint32_t> state_of =
      params.getWithState() ? std::optional<uint32_t>(params.getStateOf()) : std::nullopt;
  const std::optional<float> clip_factor =
      params.getClipped() ? std::optional<float>(params.getClipFactor()) : std::nullopt;
  KJ_REQUIRE(!clip_factor || (*clip_factor >= 0.0f && *clip_factor <= 1.0f), "clipFactor must be in [0, 1]",
             *clip_factor);
  auto reply = [context, key, exact, wanted, state_of](std::shared_ptr<Job> job) mutable {
    auto results = context.getResults();
    if (exact) {
      const auto values = job->shard->chunk(key).values_at(wanted);
      KJ_REQUIRE(values.has_value(), "this server no longer holds that version of the chunk", key, wanted,
                 job->shard->chunk(key).version);
      results.setVersion(wanted);
      rpc::set_tensor(results.initValues(), *values);
      job->bytes_out += values->size_bytes();
      return;
    }
    results.setVersion(job->shard->chunk(key).version);
    rpc::set_tensor(results.initValues(), job->shard->chunk(key).values);
    job->bytes_out += job->shard->chunk(key).size() * sizeof(float);
    if (state_of) {
      if (const std::vector<float>* state = job->shard->chunk(key).state_of(*state_of)) {
        auto data = results.initWorkerState(static_cast<unsigned>(state->size() * sizeof(float)));
        std::memcpy(data.begin(), state->data(), data.size());
        job->bytes_out += data.size();
      }
    }
  };
  return when_at_version(shard, job_id, key, wanted, clip_factor).then(kj::mv(reply));
}

kj::Promise<void> ParameterServerImpl::push(PushContext context) {
  if (!retired_.empty()) prune_retired();
  CheckedPush checked = check_push(context.getParams());
  return apply_push(kj::mv(checked), [context]() mutable { return context.getResults(); });
}

kj::Promise<void> ParameterServerImpl::pushBatch(PushBatchContext context) {
  if (!retired_.empty()) prune_retired();
  const auto pushes = context.getParams().getPushes();
  KJ_REQUIRE(pushes.size() <= rpc::kMaxBatchedPushes, "pushes: too many in one call", pushes.size(),
             rpc::kMaxBatchedPushes);
  // Every entry checked before any is applied: a malformed batch changes nothing.
  std::vector<CheckedPush> checked;
  checked.reserve(pushes.size());
  for (const auto params : pushes) checked.push_back(check_push(params));
  context.initResults(capnp::MessageSize{8 + 8 * pushes.size(), static_cast<unsigned>(pushes.size())})
      .initResults(pushes.size());
  kj::Vector<kj::Promise<void>> applied(checked.size());
  for (unsigned i = 0; i < checked.size(); ++i) {
    applied.add(apply_push(kj::mv(checked[i]), [context, i]() mutable { return context.getResults().getResults()[i]; }));
  }
  return kj::joinPromises(applied.releaseAsArray());
}

ParameterServerImpl::CheckedPush ParameterServerImpl::check_push(proto::ParameterServer::PushParams::Reader params) {
  CheckedPush push;
  push.job_id = rpc::to_string(params.getJobId());
  Job& job = find(params.getJobId());
  check_worker(job, params.getJobId(), params.getNode(), params.getToken());
  const uint32_t key = params.getKey();
  shard_with_key(job, params.getJobId(), key);
  PushRequest& request = push.request;
  read_push_header(params, request);
  request.key = key;
  request.base_version = params.getBaseVersion();
  const size_t chunk_size = job.shard->chunk(key).size();
  const auto gradient = params.getGradient();
  if (job.shard->chunk(key).info.is_table_piece() || gradient.isTableRows() || params.getReply().isTableRows()) {
    check_table_push(job.shard->chunk(key), params, push);
    return push;
  }
  // A compressed gradient decoded to float32; kept alive with the call, like the message a dense
  // gradient points into.
  std::shared_ptr<std::vector<float>>& decoded = push.decoded;
  if (gradient.isHalf()) {
    const auto half = gradient.getHalf();
    KJ_REQUIRE(half.size() == chunk_size * 2, "gradient.half must hold the chunk's values, 2 bytes each", half.size(),
               chunk_size);
    decoded = std::make_shared<std::vector<float>>(chunk_size);
    decode_half(half.begin(), *decoded);
    request.gradient = *decoded;
    push.bytes_in += half.size();
  } else if (gradient.isBfloat16()) {
    const auto bf16 = gradient.getBfloat16();
    KJ_REQUIRE(bf16.size() == chunk_size * 2, "gradient.bfloat16 must hold the chunk's values, 2 bytes each",
               bf16.size(), chunk_size);
    decoded = std::make_shared<std::vector<float>>(chunk_size);
    decode_bfloat16(bf16.begin(), *decoded);
    request.gradient = *decoded;
    push.bytes_in += bf16.size();
  } else if (gradient.isTopk()) {
    const auto topk = gradient.getTopk();
    const auto indices = topk.getIndices();
    const auto values = topk.getValues();
    KJ_REQUIRE(values.size() == size_t{indices.size()} * sizeof(float),
               "gradient.topk.values must hold one float32 per index", values.size(), indices.size());
    decoded = std::make_shared<std::vector<float>>(chunk_size, 0.0f);
    for (unsigned i = 0; i < indices.size(); ++i) {
      const uint32_t index = indices[i];
      KJ_REQUIRE(index < chunk_size && (i == 0 || index > indices[i - 1]),
                 "gradient.topk.indices must be strictly ascending and inside the chunk", i, index, chunk_size);
      std::memcpy(decoded->data() + index, values.begin() + size_t{i} * sizeof(float), sizeof(float));
    }
    request.gradient = *decoded;
    push.bytes_in += values.size() + size_t{indices.size()} * sizeof(uint32_t);
  } else if (gradient.isLowRank()) {
    const auto low_rank = gradient.getLowRank();
    const size_t columns = low_rank.getColumns(), rank = low_rank.getRank();
    KJ_REQUIRE(columns > 0 && chunk_size % columns == 0, "gradient.lowRank.columns must divide the chunk's size",
               columns, chunk_size);
    const size_t rows = chunk_size / columns;
    KJ_REQUIRE(rank > 0 && rank <= std::min({rows, columns, kMaxPowerSgdRank}),
               "gradient.lowRank.rank must be 1 to min(rows, columns, 64)",
               rank, rows, columns);
    const auto p = low_rank.getP(), q = low_rank.getQ();
    KJ_REQUIRE(p.size() == rows * rank * sizeof(float), "gradient.lowRank.p must hold rows x rank float32", p.size(),
               rows, rank);
    KJ_REQUIRE(q.size() == columns * rank * sizeof(float), "gradient.lowRank.q must hold rank x columns float32",
               q.size(), columns, rank);
    // Copied out: Data has no alignment guarantee for float.
    std::vector<float> pf(rows * rank), qf(columns * rank);
    std::memcpy(pf.data(), p.begin(), p.size());
    std::memcpy(qf.data(), q.begin(), q.size());
    decoded = std::make_shared<std::vector<float>>(chunk_size);
    low_rank_product(pf, qf, rows, columns, rank, *decoded);
    request.gradient = *decoded;
    push.bytes_in += p.size() + q.size();
  } else if (gradient.isSparse()) {
    const auto sparse = gradient.getSparse();
    const std::vector<ChunkRange> ranges = rpc::read_ranges(sparse.getRanges(), chunk_size, "gradient.sparse.ranges");
    const auto parts = sparse.getParts();
    KJ_REQUIRE(parts.size() == ranges.size(), "gradient.sparse.parts must match gradient.sparse.ranges", parts.size(),
               ranges.size());
    request.sparse = true;
    for (unsigned i = 0; i < parts.size(); ++i) {
      request.parts.push_back({ranges[i].offset, rpc::part_view(parts[i], ranges[i].size, "gradient.sparse.parts")});
      push.bytes_in += request.parts.back().values.size_bytes();
    }
  } else {
    KJ_REQUIRE(gradient.isDense(), "gradient: unknown kind", static_cast<unsigned>(gradient.which()));
    request.gradient = rpc::tensor_view(gradient.getDense(), chunk_size, "gradient.dense");
    push.bytes_in += request.gradient.size_bytes();
  }
  // The worker's compression state for the chunk (kept with the version this push makes, for its
  // backup); copied out of the message like a decoded gradient.
  if (const auto state = params.getWorkerState(); state.size() > 0) {
    KJ_REQUIRE(state.size() % sizeof(float) == 0 && state.size() <= 2 * chunk_size * sizeof(float),
               "workerState must be float32, at most twice the chunk's size", state.size(), chunk_size);
    KJ_REQUIRE(job.shard->mode() == TrainingMode::kSync, "workerState is for sync jobs");
    push.worker_state = std::make_shared<std::vector<float>>(state.size() / sizeof(float));
    std::memcpy(push.worker_state->data(), state.begin(), state.size());
    request.worker_state = *push.worker_state;
    push.bytes_in += state.size();
  }
  if (const auto reply = params.getReply(); reply.isRanges()) {
    push.reply_ranges = rpc::read_ranges(reply.getRanges(), chunk_size, "reply.ranges");
  } else {
    KJ_REQUIRE(reply.isWhole(), "reply: unknown kind", static_cast<unsigned>(reply.which()));
  }
  push.reply_half = params.getReplyHalf();
  push.reply_bf16 = params.getReplyBfloat16();
  KJ_REQUIRE(!push.reply_half || !push.reply_ranges, "replyHalf needs reply.whole");
  KJ_REQUIRE(!push.reply_bf16 || !push.reply_ranges, "replyBfloat16 needs reply.whole");
  KJ_REQUIRE(!push.reply_bf16 || !push.reply_half, "replyBfloat16 and replyHalf exclude each other");
  return push;
}

template <typename ResultsOf>
kj::Promise<void> ParameterServerImpl::apply_push(CheckedPush push, ResultsOf results_of) {
  progress_.fetch_add(1, std::memory_order_relaxed);
  const std::shared_ptr<Job>& job = jobs_.at(push.job_id);
  job->bytes_in += push.bytes_in;
  const uint32_t key = push.request.key;
  auto paf = kj::newPromiseAndFulfiller<PushOutcome>();
  auto shared = share(kj::mv(paf.fulfiller));
  job->shard->push(push.request, [shared](PushOutcome outcome) { shared.fulfill(outcome); },
                   [shared] { return shared.waiting(); });
  std::weak_ptr<Job> weak = job;
  return paf.promise.then([results_of = kj::mv(results_of), weak, key, reply_ranges = std::move(push.reply_ranges),
                           reply_half = push.reply_half, reply_bf16 = push.reply_bf16, decoded = std::move(push.decoded),
                           rows = std::move(push.rows), reply_rows = std::move(push.reply_rows),
                           worker_state = std::move(push.worker_state)](PushOutcome outcome) mutable {
    auto job = weak.lock();
    KJ_REQUIRE(job != nullptr && !job->dropped, "job was dropped");
    auto results = results_of();
    results.setVersion(job->shard->chunk(key).version);
    KJ_REQUIRE(!outcome.aborted, "the job was re-planned (recovery): get a new assignment");
    results.setApplied(outcome.applied);
    if (outcome.held) {  // clipping: the pulls with the factor bring the values
      results.setHeld(true);
      results.setSumSquares(outcome.sum_squares);
      return;
    }
    // A cut's backup point ahead: a worker with compression state sends it with the step before.
    if (const auto cut = job->extra_backup_points.upper_bound(results.getVersion()); cut != job->extra_backup_points.end()) {
      results.setCutAt(*cut);
    }
    // Zero-copy reply when the values stay put until it is sent (see
    // ParameterShard::values_stable_until_next_push).
    const bool zero_copy = job->shard->values_stable_until_next_push();
    const std::span<const float> values = job->shard->chunk(key).values;
    if (!reply_rows.empty() || job->shard->chunk(key).info.is_table_piece()) {
      const ShardChunk& piece = job->shard->chunk(key);
      auto out = results.getValues().initRows(static_cast<unsigned>(reply_rows.size() * piece.table_dim * sizeof(float)));
      write_table_rows(piece, reply_rows, piece.version, out);
      job->bytes_out += out.size();
    } else if (reply_ranges) {
      auto parts = results.getValues().initParts(static_cast<unsigned>(reply_ranges->size()));
      for (unsigned i = 0; i < reply_ranges->size(); ++i) {
        const auto part = values.subspan((*reply_ranges)[i].offset, (*reply_ranges)[i].size);
        // (A range starting on an odd element cannot be referenced: Cap'n Proto needs words.)
        const bool aligned = reinterpret_cast<uintptr_t>(part.data()) % sizeof(capnp::word) == 0;
        zero_copy && aligned ? rpc::reference_part(parts, i, part) : rpc::set_part(parts, i, part);
        job->bytes_out += part.size_bytes();
      }
    } else if (reply_half) {
      auto half = results.getValues().initHalf(static_cast<unsigned>(values.size() * 2));
      encode_half(values, half.begin());
      job->bytes_out += half.size();
    } else if (reply_bf16) {
      auto rounded = results.getValues().initBfloat16(static_cast<unsigned>(values.size() * 2));
      encode_rounded_bfloat16(values, rounded.begin());
      job->bytes_out += rounded.size();
    } else {
      const auto whole = results.getValues().initWhole();
      zero_copy ? rpc::reference_tensor(whole, values) : rpc::set_tensor(whole, values);
      job->bytes_out += values.size_bytes();
    }
  });
}

template <typename Params>
void ParameterServerImpl::read_push_header(const Params& params, PushRequest& request) {
  KJ_REQUIRE(params.getSliceCount() > 0 && params.getSlice() < params.getSliceCount(),
             "slice must be below sliceCount", params.getSlice(), params.getSliceCount());
  request.step = params.getStep();
  request.slice = params.getSlice();
  request.slice_count = params.getSliceCount();
  request.worker = params.getWorker();
  request.examples = params.getExamples();
  request.generation = params.getGeneration();
  KJ_REQUIRE(params.getLrScale() >= 0.0f && params.getLrScale() <= 1.0f, "lrScale must be in [0, 1]",
             params.getLrScale());
  request.lr_scale = params.getLrScale();
}

// pushFactors (factored_push.cc) reads its header like push.
template void ParameterServerImpl::read_push_header(const proto::ParameterServer::PushFactorsParams::Reader& params,
                                                    PushRequest& request);

kj::Promise<void> ParameterServerImpl::workerFinished(WorkerFinishedContext context) {
  const auto params = context.getParams();
  Job& job = find(params.getJobId());
  check_worker(job, params.getJobId(), params.getNode(), params.getToken());
  job.shard->worker_finished(params.getWorker());
  return kj::READY_NOW;
}

kj::Promise<void> ParameterServerImpl::putState(PutStateContext context) {
  const auto params = context.getParams();
  Job& job = find(params.getJobId());
  check_worker(job, params.getJobId(), params.getNode(), params.getToken());
  KJ_REQUIRE(job.shard->mode() == TrainingMode::kAsync, "putState is for async jobs (sync states ride on pushes)");
  const auto keys = params.getKeys();
  const auto states = params.getStates();
  KJ_REQUIRE(keys.size() == states.size(), "putState needs one state per key", keys.size(), states.size());
  if (job.shard->holds().rejects(params.getGeneration())) {
    // A session of a plan a restore ended, late: the restored backup's state stays.
    PSLOG(kInfo) << "job " << rpc::to_string(params.getJobId()) << ": dropped worker " << params.getWorker()
                 << "'s compression state of an ended plan (generation " << params.getGeneration() << ")";
    return kj::READY_NOW;
  }
  // Checked whole before anything is kept: a bad call changes nothing.
  for (unsigned i = 0; i < keys.size(); ++i) {
    const size_t chunk_size = shard_with_key(job, params.getJobId(), keys[i]).chunk(keys[i]).size();
    const size_t bytes = states[i].size();
    KJ_REQUIRE(bytes % sizeof(float) == 0 && bytes <= (2 * chunk_size + 2) * sizeof(float),
               "a putState state must be float32, at most twice the chunk's size and a position", keys[i], bytes,
               chunk_size);
  }
  for (unsigned i = 0; i < keys.size(); ++i) {
    const auto state = states[i];
    job.shard->set_worker_state(keys[i], params.getWorker(),
                                {reinterpret_cast<const float*>(state.begin()), state.size() / sizeof(float)});
    job.bytes_in += state.size();
  }
  return kj::READY_NOW;
}

}  // namespace pstrain
