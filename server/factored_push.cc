// ParameterServerImpl::pushFactors (parameter_server.h): a worker's kernel gradients as low-rank
// factors, multiplied out per chunk of rows on this server.
#include "server/parameter_server.h"
#include "server/server_rpc_helpers.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <map>
#include <optional>

#include "common/base/error.h"
#include "common/base/log.h"
#include "common/engine/compression.h"
#include "common/engine/nn/row_groups.h"
#include "common/rpc/message_limits.h"
#include "common/rpc/rpc_util.h"

namespace pstrain {

namespace {

// Forward on the servers (ParameterServer.pushFactors' next* fields, common/engine/nn/row_groups.h):
// result (columns x examples, 64-byte aligned) = the sum over `rows` of each row's current values
// times its inputs (examples x rows.size(), example after example, 64-byte aligned).
// Preconditions (checked by the caller): the keys hold whole rows of one kernel, and every row,
// ascending, lies in one of their chunks.
void partial_product(const ParameterShard& shard, const std::vector<uint32_t>& keys,
                     const std::vector<uint32_t>& rows, const float* inputs, size_t examples, float* result) {
  const size_t columns = shard.chunk(keys.front()).row_columns;
  struct Span {
    size_t first, end;
    const float* values;
  };
  std::vector<Span> spans;  // the keys' rows, in row order
  for (uint32_t key : keys) {
    const ShardChunk& chunk = shard.chunk(key);
    spans.push_back({chunk.first_row(), chunk.first_row() + chunk.size() / columns, chunk.values.data()});
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.first < b.first; });
  // The event-loop thread's scratch, kept across calls.
  thread_local std::vector<const float*> row_pointers;
  thread_local AlignedFloats gathered_rows;
  row_pointers.clear();
  size_t span = 0;
  for (uint32_t r : rows) {  // ascending, each inside a span
    while (r >= spans[span].end) ++span;
    row_pointers.push_back(spans[span].values + (r - spans[span].first) * columns);
  }
  nn::row_group_product<float>(row_pointers, static_cast<int64_t>(columns), inputs, static_cast<int64_t>(examples),
                               gathered_rows, result);
}

}  // namespace


using namespace server_rpc;

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
    KJ_REQUIRE(!shard.clips(), "a job with gradient clipping takes whole pushes (push), not pushFactors");
    const size_t c = shard.chunk(key).row_columns;
    KJ_REQUIRE(c > 0, "chunk does not hold whole rows of a dense kernel: push its gradient instead", key);
    KJ_REQUIRE(keys.empty() || shard.chunk(key).info.param == shard.chunk(keys.front()).info.param,
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
        const ShardChunk& chunk = shard.chunk(key);
        return r >= chunk.first_row() && r < chunk.first_row() + chunk.size() / columns;
      });
      KJ_REQUIRE(inside, "row is in none of the keys' chunks", what, r);
      rows.push_back(r);
    }
    return rows;
  };
  factors->rows = read_rows(params.getRows(), "rows");
  factors->inputs = rpc::part_view(params.getInputs(), header.examples * factors->rows.size(), "inputs");
  factors->bf16 = params.getBf16();
  const bool reply_bf16 = params.getReplyBfloat16();
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
        reply_ranges[i] = rpc::read_ranges(entry.getRanges(), shard.chunk(keys[i]).size(), "replyRanges");
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
  KJ_REQUIRE(!reply_bf16 || (!forward && wanted.size() == 0),
             "replyBfloat16 needs every key's values whole (no replyRanges, next.none)");

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
                           reply_bf16, bf16 = factors->bf16, next_examples,
                           next_rows = std::move(next_rows)](std::vector<PushOutcome> outcomes) mutable {
    auto job = weak.lock();
    KJ_REQUIRE(job != nullptr && !job->dropped, "job was dropped");
    auto results = context.getResults();
    auto versions = results.initVersions(static_cast<unsigned>(keys.size()));
    bool applied = true;
    for (size_t i = 0; i < keys.size(); ++i) {
      versions.set(static_cast<unsigned>(i), job->shard->chunk(keys[i]).version);
      KJ_REQUIRE(!outcomes[i].aborted, "the job was re-planned (recovery): get a new assignment");
      applied = applied && outcomes[i].applied;
    }
    results.setApplied(applied);
    results.setProductBf16(bf16);
    if (forward) {
      reply_partial_product(*job, keys, next_rows, next_examples, context);
      return;
    }
    if (reply_bf16) {
      auto list = results.getReply().initBfloat16(static_cast<unsigned>(keys.size()));
      for (size_t i = 0; i < keys.size(); ++i) {
        const std::span<const float> values = job->shard->chunk(keys[i]).values;
        auto rounded = list.init(static_cast<unsigned>(i), static_cast<unsigned>(values.size() * 2));
        encode_rounded_bfloat16(values, rounded.begin());
        job->bytes_out += rounded.size();
      }
      return;
    }
    const bool zero_copy = job->shard->values_stable_until_next_push();
    auto list = results.getReply().initValues(static_cast<unsigned>(parts));
    unsigned part = 0;
    for (size_t i = 0; i < keys.size(); ++i) {
      const std::span<const float> values = job->shard->chunk(keys[i]).values;
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
  // (common/engine/nn/row_groups.h): message memory is only 8-byte aligned.
  ScratchFloats inputs_copy, partial;
  const float* aligned_inputs = inputs.data();
  if (reinterpret_cast<uintptr_t>(aligned_inputs) % 64 != 0) {
    inputs_copy.assign(inputs.begin(), inputs.end());
    aligned_inputs = inputs_copy.data();
  }
  const size_t columns = job.shard->chunk(keys.front()).row_columns;
  partial.resize(columns * examples);
  partial_product(*job.shard, keys, rows, aligned_inputs, examples, partial.data());
  reply.setPartial(
      capnp::Data::Reader(reinterpret_cast<const kj::byte*>(partial.data()), partial.size() * sizeof(float)));
  job.bytes_out += partial.size() * sizeof(float);
}

}  // namespace pstrain
