#include "server/parameter_server.h"

#include "common/compression.h"
#include "common/error.h"
#include "common/log.h"
#include "common/message_limits.h"
#include "common/rpc/cluster_auth.h"
#include "common/rpc/rpc_util.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <map>
#include <optional>

namespace pstrain {
namespace {

// Shares a KJ fulfiller with the std::function callbacks of ParameterShard (which must be
// copyable); the callbacks only ever run on this thread.
template <typename T>
struct SharedFulfiller {
  std::shared_ptr<kj::Own<kj::PromiseFulfiller<T>>> fulfiller;
  void fulfill(T value) const { (*fulfiller)->fulfill(kj::mv(value)); }
  bool waiting() const { return (*fulfiller)->isWaiting(); }
};

template <typename T>
SharedFulfiller<T> share(kj::Own<kj::PromiseFulfiller<T>> f) {
  return {std::make_shared<kj::Own<kj::PromiseFulfiller<T>>>(kj::mv(f))};
}

// A backup as the store thread read it: its chunks, or why it is unusable.
struct LoadedBackup {
  std::optional<std::map<uint32_t, ChunkSnapshot>> chunks;
  std::string error;
};

// The highest and the lowest version of the shard's chunks (the results of backupAt and versions).
template <typename Results>
void set_version_range(const ParameterShard& shard, Results results) {
  uint64_t highest = 0, lowest = UINT64_MAX;
  for (uint32_t key : shard.keys()) {
    highest = std::max(highest, shard.version(key));
    lowest = std::min(lowest, shard.version(key));
  }
  results.setCurrentVersion(highest);
  results.setLowestVersion(lowest == UINT64_MAX ? 0 : lowest);
}

}  // namespace

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
  // workers (/training/workers, common/job_spec_json.cc).
  constexpr uint32_t kMaxWorkers = 256;
  KJ_REQUIRE(config.getWorkers() <= kMaxWorkers, "too many workers", config.getWorkers(), kMaxWorkers);
  const std::vector<ChunkInfo> chunks = rpc::get_chunks(config.getChunks());
  const ParamLayout layout = make_param_layout(spec.model);
  for (const ChunkInfo& c : chunks) {
    KJ_REQUIRE(c.param < layout.params().size() && c.offset + c.size <= layout.params()[c.param].size,
               "chunk does not fit the model's parameters", c.key);
  }
  auto job = std::make_shared<Job>();
  job->shard = std::make_unique<ParameterShard>(spec, chunks, config.getServerIndex(), config.getWorkers());
  job->shard->reject_generations_below(config.getMinGeneration());
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
          if (interval > 0) raw->shard->hold_until_durable(version + interval);
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

kj::Promise<void> ParameterServerImpl::pull(PullContext context) {
  const auto params = context.getParams();
  const std::string job_id = rpc::to_string(params.getJobId());
  Job& job = find(params.getJobId());
  check_worker(job, params.getJobId(), params.getNode(), params.getToken());
  const uint32_t key = params.getKey();
  ParameterShard& shard = shard_with_key(job, params.getJobId(), key);
  auto paf = kj::newPromiseAndFulfiller<uint64_t>();
  auto shared = share(kj::mv(paf.fulfiller));
  shard.pull(key, params.getMinVersion(), [shared](uint64_t version) { shared.fulfill(version); });
  std::weak_ptr<Job> weak = jobs_.at(job_id);
  const bool exact = params.getExact();
  const uint64_t wanted = params.getMinVersion();
  const std::optional<uint32_t> state_of =
      params.getWithState() ? std::optional<uint32_t>(params.getStateOf()) : std::nullopt;
  return paf.promise.then([context, weak, key, exact, wanted, state_of](uint64_t) mutable {
    auto job = weak.lock();
    KJ_REQUIRE(job != nullptr && !job->dropped, "job was dropped");
    auto results = context.getResults();
    if (exact) {
      const auto values = job->shard->values_at(key, wanted);
      KJ_REQUIRE(values.has_value(), "this server no longer holds that version of the chunk", key, wanted,
                 job->shard->version(key));
      results.setVersion(wanted);
      rpc::set_tensor(results.initValues(), *values);
      job->bytes_out += values->size_bytes();
      return;
    }
    results.setVersion(job->shard->version(key));
    rpc::set_tensor(results.initValues(), job->shard->values(key));
    job->bytes_out += job->shard->chunk_size(key) * sizeof(float);
    if (state_of) {
      if (const std::vector<float>* state = job->shard->worker_state(key, *state_of)) {
        auto data = results.initWorkerState(static_cast<unsigned>(state->size() * sizeof(float)));
        std::memcpy(data.begin(), state->data(), data.size());
        job->bytes_out += data.size();
      }
    }
  });
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
  const size_t chunk_size = job.shard->chunk_size(key);
  const auto gradient = params.getGradient();
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
  KJ_REQUIRE(!push.reply_half || !push.reply_ranges, "replyHalf needs reply.whole");
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
                           reply_half = push.reply_half, decoded = std::move(push.decoded),
                           worker_state = std::move(push.worker_state)](PushOutcome outcome) mutable {
    auto job = weak.lock();
    KJ_REQUIRE(job != nullptr && !job->dropped, "job was dropped");
    auto results = results_of();
    results.setVersion(job->shard->version(key));
    KJ_REQUIRE(!outcome.aborted, "the job was re-planned (recovery): get a new assignment");
    results.setApplied(outcome.applied);
    // A cut's backup point ahead: a worker with compression state sends it with the step before.
    if (const auto cut = job->extra_backup_points.upper_bound(results.getVersion()); cut != job->extra_backup_points.end()) {
      results.setCutAt(*cut);
    }
    // Zero-copy reply when the values stay put until it is sent (see
    // ParameterShard::values_stable_until_next_push).
    const bool zero_copy = job->shard->values_stable_until_next_push();
    const std::span<const float> values = job->shard->values(key);
    if (reply_ranges) {
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
}

kj::Promise<void> ParameterServerImpl::pushFactors(PushFactorsContext context) {
  progress_.fetch_add(1, std::memory_order_relaxed);
  if (!retired_.empty()) prune_retired();
  const auto params = context.getParams();
  const std::string job_id = rpc::to_string(params.getJobId());
  Job& job = find(params.getJobId());
  check_worker(job, params.getJobId(), params.getNode(), params.getToken());
  const auto key_list = params.getKeys();
  KJ_REQUIRE(key_list.size() > 0, "pushFactors needs at least one key");
  KJ_REQUIRE(params.getBaseVersions().size() == key_list.size(), "baseVersions must have one entry per key",
             params.getBaseVersions().size(), key_list.size());
  PushRequest header;
  read_push_header(params, header);

  // The factors, checked against the kernel whose whole rows the keys' chunks hold.
  std::vector<uint32_t> keys;
  size_t columns = 0;
  for (uint32_t key : key_list) {
    ParameterShard& shard = shard_with_key(job, params.getJobId(), key);
    const size_t c = shard.row_columns(key);
    KJ_REQUIRE(c > 0, "chunk does not hold whole rows of a dense kernel: push its gradient instead", key);
    KJ_REQUIRE(keys.empty() || shard.param_of(key) == shard.param_of(keys.front()),
               "keys of one pushFactors must be chunks of one kernel", key);
    KJ_REQUIRE(std::find(keys.begin(), keys.end(), key) == keys.end(), "key listed twice", key);
    columns = c;
    keys.push_back(key);
  }
  ParameterShard& shard = *job.shard;
  auto factors = std::make_shared<GradientFactors>();
  factors->columns = columns;
  factors->examples = header.examples;
  factors->deltas = rpc::part_view(params.getDelta(), header.examples * columns, "delta");
  // Kernel rows listed by the caller: ascending, each in one of the keys' chunks.
  const auto read_rows = [&](capnp::List<uint32_t>::Reader list, const char* what) {
    std::vector<uint32_t> rows;
    rows.reserve(list.size());
    for (uint32_t r : list) {
      KJ_REQUIRE(rows.empty() || r > rows.back(), "rows must be ascending and distinct", what, r);
      const bool inside = std::any_of(keys.begin(), keys.end(), [&](uint32_t key) {
        return r >= shard.first_row(key) && r < shard.first_row(key) + shard.chunk_size(key) / columns;
      });
      KJ_REQUIRE(inside, "row is in none of the keys' chunks", what, r);
      rows.push_back(r);
    }
    return rows;
  };
  factors->rows = read_rows(params.getRows(), "rows");
  factors->inputs = rpc::part_view(params.getInputs(), header.examples * factors->rows.size(), "inputs");
  job.bytes_in += factors->deltas.size_bytes() + factors->inputs.size_bytes();

  // What each key's reply carries: all of it, or ranges.
  const auto wanted = params.getReplyRanges();
  KJ_REQUIRE(wanted.size() == 0 || wanted.size() == keys.size(), "replyRanges must be empty or one per key",
             wanted.size(), keys.size());
  std::vector<std::optional<std::vector<ChunkRange>>> reply_ranges(keys.size());
  size_t parts = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (wanted.size() != 0) {
      const auto entry = wanted[static_cast<unsigned>(i)];
      if (entry.isRanges()) {
        reply_ranges[i] = rpc::read_ranges(entry.getRanges(), shard.chunk_size(keys[i]), "replyRanges");
      } else {
        KJ_REQUIRE(entry.isWhole(), "replyRanges: unknown kind", i, static_cast<unsigned>(entry.which()));
      }
    }
    parts += reply_ranges[i] ? reply_ranges[i]->size() : 1;
  }
  KJ_REQUIRE(parts <= rpc::kMaxRangesPerPart, "the reply would have too many parts", parts, rpc::kMaxRangesPerPart);

  // Forward on the servers: the reply carries the next batch's partial product instead of values.
  const auto next = params.getNext();
  const bool forward = next.isForward();
  uint32_t next_examples = 0;
  std::vector<uint32_t> next_rows;
  if (forward) {
    const auto batch = next.getForward();
    next_examples = batch.getExamples();
    KJ_REQUIRE(wanted.size() == 0, "replyRanges and next.forward exclude each other (values or a partial product)");
    KJ_REQUIRE(next_examples > 0, "next.forward needs next.forward.examples > 0 (else ask for values: next.none)");
    // No worker's batch exceeds the job's global batch; and the reply must stay readable.
    KJ_REQUIRE(next_examples <= shard.global_batch(), "next.forward.examples is larger than the job's global batch",
               next_examples, shard.global_batch());
    KJ_REQUIRE(size_t{next_examples} * columns * sizeof(float) <= kMaxPartialBytes,
               "the partial product would be too large a reply", next_examples, columns);
    next_rows = read_rows(batch.getRows(), "next.forward.rows");
    rpc::part_view(batch.getInputs(), size_t{next_examples} * next_rows.size(), "next.forward.inputs");
    job.bytes_in += size_t{next_examples} * next_rows.size() * sizeof(float);
    parts = 0;
  } else {
    KJ_REQUIRE(next.isNone(), "next: unknown kind", static_cast<unsigned>(next.which()));
  }

  // Each key goes through the shard as its own push; the call completes when all have.
  struct Outcomes {
    std::vector<PushOutcome> outcomes;
    size_t pending;
  };
  auto paf = kj::newPromiseAndFulfiller<std::vector<PushOutcome>>();
  auto shared = share(kj::mv(paf.fulfiller));
  auto state = std::make_shared<Outcomes>(Outcomes{std::vector<PushOutcome>(keys.size()), keys.size()});
  for (size_t i = 0; i < keys.size(); ++i) {
    PushRequest request = header;
    request.key = keys[i];
    request.base_version = params.getBaseVersions()[static_cast<unsigned>(i)];
    request.factors = factors;
    shard.push(
        request,
        [shared, state, i](PushOutcome outcome) {
          state->outcomes[i] = outcome;
          if (--state->pending == 0) shared.fulfill(kj::mv(state->outcomes));
        },
        [shared] { return shared.waiting(); });
  }
  std::weak_ptr<Job> weak = jobs_.at(job_id);
  return paf.promise.then([context, weak, keys = std::move(keys), reply_ranges = std::move(reply_ranges), parts, forward,
                           next_examples, next_rows = std::move(next_rows)](std::vector<PushOutcome> outcomes) mutable {
    auto job = weak.lock();
    KJ_REQUIRE(job != nullptr && !job->dropped, "job was dropped");
    auto results = context.getResults();
    auto versions = results.initVersions(static_cast<unsigned>(keys.size()));
    bool applied = true;
    for (size_t i = 0; i < keys.size(); ++i) {
      versions.set(static_cast<unsigned>(i), job->shard->version(keys[i]));
      KJ_REQUIRE(!outcomes[i].aborted, "the job was re-planned (recovery): get a new assignment");
      applied = applied && outcomes[i].applied;
    }
    results.setApplied(applied);
    if (forward) {
      reply_partial_product(*job, keys, next_rows, next_examples, context);
      return;
    }
    const bool zero_copy = job->shard->values_stable_until_next_push();
    auto list = results.getReply().initValues(static_cast<unsigned>(parts));
    unsigned part = 0;
    for (size_t i = 0; i < keys.size(); ++i) {
      const std::span<const float> values = job->shard->values(keys[i]);
      const std::vector<ChunkRange> whole{{0, values.size()}};
      for (const ChunkRange& r : reply_ranges[i] ? *reply_ranges[i] : whole) {
        const auto piece = values.subspan(r.offset, r.size);
        // (A range starting on an odd element cannot be referenced: Cap'n Proto needs words.)
        const bool aligned = reinterpret_cast<uintptr_t>(piece.data()) % sizeof(capnp::word) == 0;
        zero_copy && aligned ? rpc::reference_part(list, part, piece) : rpc::set_part(list, part, piece);
        job->bytes_out += piece.size_bytes();
        ++part;
      }
    }
  });
}

void ParameterServerImpl::reply_partial_product(Job& job, const std::vector<uint32_t>& keys,
                                                const std::vector<uint32_t>& rows, uint32_t examples,
                                                PushFactorsContext& context) {
  auto reply = context.getResults().getReply();
  if (rows.empty()) {
    reply.setPartial(capnp::Data::Reader());  // this server's rows add nothing to the next batch
    return;
  }
  const auto inputs = rpc::part_view(context.getParams().getNext().getForward().getInputs(),
                                     size_t{examples} * rows.size(), "next.forward.inputs");
  // 64-byte aligned operands, as in the worker's own computation of the same product
  // (common/nn/row_groups.h): message memory is only 8-byte aligned.
  ScratchFloats inputs_copy, partial;
  const float* aligned_inputs = inputs.data();
  if (reinterpret_cast<uintptr_t>(aligned_inputs) % 64 != 0) {
    inputs_copy.assign(inputs.begin(), inputs.end());
    aligned_inputs = inputs_copy.data();
  }
  const size_t columns = job.shard->row_columns(keys.front());
  partial.resize(columns * examples);
  job.shard->partial_product(keys, rows, aligned_inputs, examples, partial.data());
  reply.setPartial(
      capnp::Data::Reader(reinterpret_cast<const kj::byte*>(partial.data()), partial.size() * sizeof(float)));
  job.bytes_out += partial.size() * sizeof(float);
}

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
  // Checked whole before anything is kept: a bad call changes nothing.
  for (unsigned i = 0; i < keys.size(); ++i) {
    const size_t chunk_size = shard_with_key(job, params.getJobId(), keys[i]).chunk_size(keys[i]);
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

void ParameterServerImpl::backup_written(const std::string& job_id, uint64_t) {
  const auto it = jobs_.find(job_id);
  if (it != jobs_.end()) it->second->shard->release_durability_hold();
}

kj::Promise<void> ParameterServerImpl::restore(RestoreContext context) {
  const auto params = context.getParams();
  const std::string job_id = rpc::to_string(params.getJobId());
  Job& job = find(params.getJobId());
  job.shard->reject_generations_below(params.getGeneration());
  const uint64_t ticket = ++job.restores;
  if (params.getFromScratch()) {
    job.shard->reset();
    PSLOG(kInfo) << "job " << job_id << ": rolled back to the initial parameters";
    return forget_backups_after(job_id, 0);
  }
  KJ_REQUIRE(store_ != nullptr, "this server keeps no backups (no data directory)");
  const uint64_t version = params.getVersion();
  const bool exact_versions = job.shard->mode() == TrainingMode::kSync;
  auto loaded = store_->run([job_id, version, exact_versions](BackupStore& backups) {
    LoadedBackup out;
    out.chunks = backups.load(job_id, version, &out.error, exact_versions);
    return out;
  });
  // The shard may have moved on while the backup was read (pushes of the new plan cannot have
  // come yet, but the coordinator's next word can): apply only if this restore is still the
  // newest word on the job.
  std::weak_ptr<Job> weak = jobs_.at(job_id);
  const uint64_t fence = job.shard->min_generation();
  return loaded.then([this, weak, job_id, version, ticket, fence](LoadedBackup loaded) {
    auto job = weak.lock();
    KJ_REQUIRE(job != nullptr && !job->dropped, "the job was dropped or reconfigured while its backup was read",
               job_id, version);
    KJ_REQUIRE(job->restores == ticket, "a newer restore of the job came in while its backup was read", job_id,
               version);
    KJ_REQUIRE(job->shard->min_generation() == fence, "a newer plan of the job came in while its backup was read",
               job_id, version, fence, job->shard->min_generation());
    if (!loaded.chunks) {
      PSLOG(kWarning) << "job " << job_id << ": cannot restore: " << loaded.error;
      KJ_FAIL_REQUIRE("backup unusable", loaded.error);
    }
    for (uint32_t key : job->shard->keys()) {
      KJ_REQUIRE(loaded.chunks->count(key) != 0 && (*loaded.chunks)[key].values.size() == job->shard->chunk_size(key),
                 "backup does not match the job's chunks", key);
    }
    job->shard->restore(*loaded.chunks);
    PSLOG(kInfo) << "job " << job_id << ": restored the backup at step " << version;
    return forget_backups_after(job_id, version);
  });
}

kj::Promise<void> ParameterServerImpl::forget_backups_after(const std::string& job_id, uint64_t version) {
  // Backups past the restored step belong to the timeline the rollback abandoned: a later
  // recovery must not pick one of them. (Queued after the restore's read and before any backup
  // of the new timeline, so it deletes exactly the abandoned ones.)
  if (store_ == nullptr) return kj::READY_NOW;
  return store_->run([job_id, version](BackupStore& backups) { return backups.erase_after(job_id, version); })
      .then([job_id, version](KvStatus status) {
        if (!status.ok()) {
          PSLOG(kWarning) << "job " << job_id << ": could not delete backups after step " << version << ": "
                          << status.message;
        }
      });
}

kj::Promise<void> ParameterServerImpl::backups(BackupsContext context) {
  if (store_ == nullptr) return kj::READY_NOW;  // an empty list
  const std::string job_id = rpc::to_string(context.getParams().getJobId());
  return store_->run([job_id](BackupStore& backups) { return backups.versions(job_id); })
      .then([context](std::vector<uint64_t> versions) mutable {
        auto list = context.getResults().initVersions(static_cast<unsigned>(versions.size()));
        for (size_t i = 0; i < versions.size(); ++i) list.set(static_cast<unsigned>(i), versions[i]);
      });
}

kj::Promise<void> ParameterServerImpl::backupAt(BackupAtContext context) {
  Job& job = find(context.getParams().getJobId());
  const uint64_t version = context.getParams().getVersion();
  if (version != UINT64_MAX) {  // 2^64-1: only asks, like `versions` (coordinators from before it)
    job.extra_backup_points.insert(version);
    if (!job.shard->backup_and_hold_at(version)) job.extra_backup_points.erase(version);  // too late
  }
  set_version_range(*job.shard, context.getResults());
  return kj::READY_NOW;
}

kj::Promise<void> ParameterServerImpl::versions(VersionsContext context) {
  set_version_range(*find(context.getParams().getJobId()).shard, context.getResults());
  return kj::READY_NOW;
}

kj::Promise<void> ParameterServerImpl::releaseHold(ReleaseHoldContext context) {
  find(context.getParams().getJobId()).shard->release_hold();
  return kj::READY_NOW;
}

kj::Promise<void> ParameterServerImpl::backupNow(BackupNowContext context) {
  const std::string job_id = rpc::to_string(context.getParams().getJobId());
  Job& job = find(context.getParams().getJobId());
  KJ_REQUIRE(store_ != nullptr, "this server keeps no backups (no data directory)");
  store_->write_backup(job_id, context.getParams().getVersion(), job.shard->snapshot_each());
  return kj::READY_NOW;
}

kj::Promise<void> ParameterServerImpl::adoptBackup(AdoptBackupContext context) {
  const auto params = context.getParams();
  const std::string job_id = rpc::to_string(params.getJobId());
  Job& job = find(params.getJobId());
  KJ_REQUIRE(store_ != nullptr, "this server keeps no backups (no data directory)");
  // Each blob is checked (it decodes into one of this server's chunks) and written as it came.
  std::vector<uint32_t> keys;
  std::vector<std::string> blobs;
  for (capnp::Data::Reader data : params.getChunks()) {
    std::string blob(reinterpret_cast<const char*>(data.begin()), data.size());
    const auto chunk = decode_snapshot(blob);
    KJ_REQUIRE(chunk.has_value(), "a chunk of the backup does not decode");
    KJ_REQUIRE(job.shard->holds(chunk->key) && chunk->values.size() == job.shard->chunk_size(chunk->key),
               "the backup does not match this server's chunks", chunk->key);
    keys.push_back(chunk->key);
    blobs.push_back(std::move(blob));
  }
  const size_t first = params.getFirst(), total = params.getTotal();
  KJ_REQUIRE(total == job.shard->keys().size(), "the backup does not cover this server's chunks", total,
             job.shard->keys().size());
  KJ_REQUIRE(!blobs.empty() && first + blobs.size() <= total, "a part of the backup outside its chunks", first,
             blobs.size(), total);
  const uint64_t version = params.getVersion();
  // The part that ends the backup also writes its `complete` marker: only then can `restore` use
  // it (restore checks that every chunk is there).
  const std::optional<size_t> complete = first + blobs.size() == total ? std::optional<size_t>(total) : std::nullopt;
  return store_
      ->run([job_id, version, keys = std::move(keys), blobs = std::move(blobs), complete](BackupStore& backups) {
        return backups.write_part(job_id, version, keys, blobs, complete);
      })
      .then([job_id, version, complete](KvStatus status) {
        KJ_REQUIRE(status.ok(), "could not write the adopted backup", status.message);
        if (complete) {
          PSLOG(kInfo) << "job " << job_id << ": adopted a backup at step " << version << " (" << *complete << " chunks)";
        }
      });
}

kj::Promise<void> ParameterServerImpl::settle(SettleContext context) {
  const std::string job_id = rpc::to_string(context.getParams().getJobId());
  Job& job = find(context.getParams().getJobId());
  const uint64_t version = context.getParams().getVersion();
  KJ_REQUIRE(job.shard->mode() == TrainingMode::kSync, "settle is for sync jobs");
  for (uint32_t key : job.shard->keys()) {
    KJ_REQUIRE(job.shard->version(key) <= version, "a chunk is already past the step to settle at", key,
               job.shard->version(key), version);
  }
  const uint64_t settle = job.shard->settle_hold_from(version);
  const uint64_t rollbacks = job.shard->rollbacks();
  kj::Vector<kj::Promise<void>> reached;
  for (uint32_t key : job.shard->keys()) {
    auto paf = kj::newPromiseAndFulfiller<uint64_t>();
    auto shared = share(kj::mv(paf.fulfiller));
    job.shard->pull(key, version, [shared](uint64_t v) { shared.fulfill(v); });
    reached.add(paf.promise.ignoreResult());
  }
  std::weak_ptr<Job> weak = jobs_.at(job_id);
  const uint64_t generation = context.getParams().getGeneration();
  return kj::joinPromises(reached.releaseAsArray()).then([weak, job_id, version, generation, rollbacks, settle] {
    auto job = weak.lock();
    KJ_REQUIRE(job != nullptr && !job->dropped, "job was dropped");
    // A rollback since (a second loss during the takeover) made this settle moot; the pulls it
    // waited on only fired because the new plan trained past `version`.
    KJ_REQUIRE(job->shard->rollbacks() == rollbacks, "the job was rolled back meanwhile; not settling");
    // A settle of a coordinator that has died (its call lives on here) must not act on a newer plan.
    KJ_REQUIRE(job->shard->settles() == settle, "a newer settle replaced this one");
    job->shard->abort_waiting_and_release_hold(generation);
    PSLOG(kInfo) << "job " << job_id << ": settled at step " << version << " for a re-plan";
  });
}

kj::Promise<void> ParameterServerImpl::dropJob(DropJobContext context) {
  const std::string job_id = rpc::to_string(context.getParams().getJobId());
  if (const auto it = jobs_.find(job_id); it != jobs_.end()) {
    if (it->second->shard != nullptr) {
      const ShardStats& s = it->second->shard->stats();
      PSLOG(kInfo) << "job " << job_id << ": dropped; pushes applied " << s.pushes_applied << ", dropped "
                   << s.pushes_dropped << ", async staleness mean "
                   << (s.async_pushes ? s.staleness_sum / static_cast<double>(s.async_pushes) : 0.0) << " max "
                   << s.max_staleness;
    }
    retire(it->second);
    jobs_.erase(it);
  }
  // The job is over (its checkpoints, if any, are the coordinator's): its backups go too, like
  // the directory of Keras' BackupAndRestore when training ends. Queued after every backup
  // write of the job, so none is left behind.
  // The reply does not wait for it (the store thread may be busy with a long write).
  if (store_ == nullptr) return kj::READY_NOW;
  store_->run([job_id](BackupStore& backups) { return backups.erase_job(job_id); })
      .then([job_id](KvStatus status) {
        if (!status.ok()) {
          PSLOG(kWarning) << "job " << job_id << ": could not delete its backups: " << status.message;
        }
      })
      .detach([job_id](kj::Exception&& e) {
        PSLOG(kWarning) << "job " << job_id << ": could not delete its backups: " << e.getDescription().cStr();
      });
  return kj::READY_NOW;
}

void ParameterServerImpl::retire(std::shared_ptr<Job> job) {
  // Calls waiting on the shard fail now ("job was dropped"), as they did when the shard was freed.
  job->dropped = true;
  job->shard->abandon();
  prune_retired();
  retired_.emplace_back(std::chrono::steady_clock::now(), std::move(job));
}

void ParameterServerImpl::prune_retired() {
  const auto now = std::chrono::steady_clock::now();
  std::erase_if(retired_, [&](const auto& r) { return now - r.first > std::chrono::minutes(1); });
}

kj::Promise<void> ParameterServerImpl::stats(StatsContext context) {
  Job& job = find(context.getParams().getJobId());
  const ShardStats& s = job.shard->stats();
  auto out = context.getResults().initStats();
  const auto keys = job.shard->keys();
  out.setVersion(keys.empty() ? 0 : job.shard->version(keys.front()));
  out.setPushesApplied(s.pushes_applied);
  out.setPushesDropped(s.pushes_dropped);
  out.setMaxStaleness(s.max_staleness);
  out.setMeanStaleness(s.async_pushes ? s.staleness_sum / static_cast<double>(s.async_pushes) : 0.0);
  out.setBytesIn(job.bytes_in);
  out.setBytesOut(job.bytes_out);
  return kj::READY_NOW;
}

}  // namespace pstrain
