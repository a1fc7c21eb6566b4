// JobRunner's end (job_runner.h): finishing, collecting the final parameters into the model
// file, cancel, failure, divergence, and releasing the nodes.
#include "coordinator/job/job_runner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/base/cross_thread.h"
#include "common/data/dataset.h"
#include "common/base/error.h"
#include "common/data/job_spec.h"
#include "common/base/log.h"
#include "coordinator/job/adoption.h"
#include "common/engine/safetensors.h"

namespace pstrain {

// --- The end ---

void JobRunner::finish_if_done() {
  if (!job_.progress.all_finished() || early_stop_.stopping()) return;
  job_.progress.record_partial_epochs(static_cast<uint32_t>(job_.progress.epochs().size()));
  if (is_finished(job_.state()) || early_stop_.stopping()) return;  // failed by the guard, or stopped early
  if (early_stop_.ends_with_best()) {  // restore_best: the best epoch was not the last
    stop_early();
    return;
  }
  // The final checkpoint (parameters and optimizer state) first, while the servers hold the job.
  background_ = count_async_updates()
                    .then([this] { return checkpointer_.final_checkpoint(job_.total_steps()); })
                    .then([this] { return collect_parameters(); })
                    .eagerlyEvaluate([this](kj::Exception&& e) {
    if (e.getType() == kj::Exception::Type::DISCONNECTED && job_.state() == JobState::kRunning) {
      // A server died after the last step: like any server loss, recover (from its last backup;
      // the workers redo the steps after it) and collect again at the end.
      recover("a server was lost while the trained parameters were collected");
      return;
    }
    fail(std::string("could not collect the trained parameters: ") + e.getDescription().cStr());
  });
}

kj::Promise<void> JobRunner::count_async_updates() {
  if (job_.sync()) return kj::READY_NOW;
  // In async mode a chunk's version counts the pushes it took in this timeline (a restore sets it
  // back to its backup's): at the end every chunk should have taken each planned step once. More
  // means steps were applied twice (after a recovery or a restart), fewer that some were skipped.
  return job_.servers.versions()
      .then([this](kj::Array<ServerVersions> versions) {
        uint64_t lowest = UINT64_MAX, highest = 0;
        for (const auto& v : versions) {
          lowest = std::min(lowest, v.lowest);
          highest = std::max(highest, v.highest);
        }
        const uint64_t planned = job_.total_steps();
        PSLOG(kInfo) << "job " << job_.id << ": async updates applied: every chunk took " << lowest << " to " << highest
                     << " push(es); planned steps: " << planned << " (" << (highest > planned ? highest - planned : 0)
                     << " more, " << (lowest < planned ? planned - lowest : 0) << " fewer)";
      })
      .catch_([this](kj::Exception&& e) {
        PSLOG(kWarning) << "job " << job_.id << ": could not count the updates applied: " << e.getDescription().cStr();
      });
}

std::vector<float> JobRunner::final_params() const {
  if (job_.state() != JobState::kSucceeded) return {};
  const auto file = job_.store.model(job_.id);
  if (!file) return {};
  return decode_safetensors(job_.layout, *file).value_or(std::vector<float>{});
}

// The final parameters on their way from the servers to the model file: the chunks in the file's
// order (tensor after tensor, each by offset), the next to pull, and the piece being filled.
struct JobRunner::FinalModel {
  std::vector<ChunkInfo> order;
  size_t next = 0;
  std::string piece;
  size_t pieces = 1;  // piece 0 is the header, written last
  int64_t bytes = 0;
};

namespace {

std::vector<ChunkInfo> file_order(const ParamLayout& layout, const std::vector<ChunkInfo>& chunks) {
  std::vector<ChunkInfo> order = chunks;
  std::stable_sort(order.begin(), order.end(), [&](const ChunkInfo& a, const ChunkInfo& b) {
    const size_t at_a = layout.params()[a.param].offset + a.offset, at_b = layout.params()[b.param].offset + b.offset;
    return at_a < at_b;
  });
  return order;
}

// Chunks pulled at once (about 1 MB each): the coordinator holds this many chunks and one piece
// of the model at a time, not the model.
constexpr size_t kFinalPullBatch = 8;

}  // namespace

kj::Promise<void> JobRunner::collect_parameters() {
  auto model = std::make_shared<FinalModel>();
  model->order = file_order(job_.layout, job_.chunks);
  return collect_batch(model).then([this, model] {
    if (job_.state() != JobState::kRunning) return;  // cancelled or failed meanwhile
    // The last piece and the header (piece 0, alone: the readers join the pieces).
    // Self-describing: the spec (model, optimizer, dataset), where it stopped, and which files it
    // was trained on, so the file can be used without the job (DESIGN-NOTES "Models").
    if (!model->piece.empty()) {
      model->bytes += static_cast<int64_t>(model->piece.size());
      job_.store.write_model_piece(job_.id, model->pieces++, std::move(model->piece));
    }
    std::string header = safetensors_header(
        job_.layout, {}, job_.model_file_metadata(job_.spec.training.epochs, job_.total_steps()), std::nullopt);
    model->bytes += static_cast<int64_t>(header.size());
    job_.store.write_model_piece(job_.id, 0, std::move(header));
    if (job_.sync()) job_.progress.check_ledger(job_.steps_per_epoch(), job_.train->size);
    succeed(model->pieces, model->bytes, job_.total_steps(), "");
  });
}

void JobRunner::stop_early() {
  // Epochs after the one it stopped at are not recorded (their workers may still report them
  // while the checkpoint is awaited: the job ends once it is stored).
  job_.progress.record_no_epoch_from(static_cast<uint32_t>(early_stop_.stopped_epochs()));
  background_ = early_stop_.write_model()
                    .then([this](int64_t bytes) {
                      if (job_.state() != JobState::kRunning && job_.state() != JobState::kRecovering) return;
                      succeed(1, bytes, early_stop_.stopped_epochs() * job_.steps_per_epoch(), early_stop_.reason());
                    })
                    .eagerlyEvaluate([this](kj::Exception&& e) { fail(e.getDescription().cStr()); });
}

void JobRunner::succeed(size_t pieces, int64_t bytes, uint64_t steps_done, const std::string& note) {
  job_.phase = Phase::kSucceeded;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_at_).count();
  PSLOG(kInfo) << "job " << job_.id << ": SUCCEEDED in " << seconds << " s";
  double final_accuracy = job_.progress.final_accuracy();
  if (std::optional<JobRecord> record = job_.store.get(job_.id); record && early_stop_.stopping()) {
    early_stop_.set_model_figures(*record);  // the model is an earlier epoch's
    final_accuracy = record->test_accuracy.value_or(0);
  }
  std::printf("final test accuracy: %.4f\n", final_accuracy);
  std::fflush(stdout);
  // The record that announces the model goes after its pieces; a finished job keeps no copy
  // of its model in memory (final_params() reads it back).
  job_.store.set_model(job_.id, pieces, bytes);
  job_.store.update(job_.id, [&](JobRecord& r) {
    r.state = job_.state();
    r.reason.clear();
    r.finished_ms = now_ms();
    r.steps_done = static_cast<int64_t>(steps_done);
    if (!note.empty()) r.notes.push_back(note);
    if (early_stop_.stopping()) early_stop_.set_model_figures(r);
  });
  job_.servers.drop_job();
  job_.store.replicas().erase_job(job_.id);
  job_.store.erase_async_cuts(job_.id);
  release_nodes();
  if (on_finished_) on_finished_(*this);
}

kj::Promise<void> JobRunner::collect_batch(std::shared_ptr<FinalModel> model) {
  if (model->next == model->order.size() || job_.state() != JobState::kRunning) return kj::READY_NOW;
  const size_t end = std::min(model->order.size(), model->next + kFinalPullBatch);
  const std::vector<ChunkInfo> batch(model->order.begin() + static_cast<std::ptrdiff_t>(model->next),
                                     model->order.begin() + static_cast<std::ptrdiff_t>(end));
  model->next = end;
  return job_.servers.pull_chunks(batch).then([this, model](kj::Array<kj::Array<float>> values) -> kj::Promise<void> {
    // The pieces this batch fills go to the store; the next batch is pulled once they are on disk,
    // so a disk slower than the pulls does not pile the model up in the writer's queue.
    kj::Vector<kj::Promise<void>> written;
    for (const kj::Array<float>& v : values) {
      const char* data = reinterpret_cast<const char*>(v.begin());
      size_t left = v.size() * sizeof(float);
      while (left > 0) {
        const size_t max = job_.options.file_piece_bytes;
        if (model->piece.capacity() < max) model->piece.reserve(max);
        const size_t n = std::min(left, max - model->piece.size());
        model->piece.append(data, n);
        data += n;
        left -= n;
        if (model->piece.size() == max) {
          auto paf = make_cross_thread_paf<void>();
          model->bytes += static_cast<int64_t>(model->piece.size());
          job_.store.write_model_piece(job_.id, model->pieces++, std::move(model->piece),
                                       [fulfiller = paf.fulfiller] { fulfiller->fulfill(); });
          model->piece = {};
          written.add(kj::mv(paf.promise));
        }
      }
    }
    return kj::joinPromises(written.releaseAsArray()).then([this, model] { return collect_batch(model); });
  });
}

JobRunner::CancelOutcome JobRunner::cancel() {
  if (is_finished(job_.state())) return CancelOutcome::kAlreadyFinished;
  end(Phase::kCancelled, "cancelled by request");
  return CancelOutcome::kCancelled;
}

void JobRunner::fail(const std::string& reason) {
  if (is_finished(job_.state())) return;
  PSLOG(kError) << "job " << job_.id << ": FAILED: " << reason;
  end(Phase::kFailed, reason);
}

void JobRunner::end(Phase phase, const std::string& reason) {
  const bool was_running = job_.state() == JobState::kRunning;
  job_.phase = phase;
  failure_ = reason;
  job_.store.update(job_.id, [&](JobRecord& r) {
    r.state = job_.state();
    r.reason = reason;
    r.finished_ms = now_ms();
  });
  if (was_running) job_.servers.drop_job();
  job_.store.replicas().erase_job(job_.id);
  job_.store.erase_async_cuts(job_.id);
  release_nodes();
  if (on_finished_) on_finished_(*this);
}

void JobRunner::diverged(const std::vector<Divergence>& found) {
  if (found.empty()) return;
  std::string details;
  for (const Divergence& d : found) {
    PSLOG(kWarning) << "job " << job_.id << ": divergence (" << divergence_reason_name(d.reason) << "): " << d.detail;
    std::printf("divergence warning (%s): %s\n", divergence_reason_name(d.reason), d.detail.c_str());
    details += details.empty() ? "" : "; ";
    details += d.detail;
  }
  std::fflush(stdout);
  job_.store.update(job_.id, [&](JobRecord& r) {
    for (const Divergence& d : found) {
      r.warnings.push_back({divergence_reason_name(d.reason), d.epoch, d.value, d.threshold, d.detail, now_ms()});
    }
  });
  const bool not_finite = std::any_of(found.begin(), found.end(), [](const Divergence& d) {
    return d.reason == DivergenceReason::kLossNotFinite;
  });
  // A loss that is not finite fails the job where the worker's report is handled.
  if (!not_finite && job_.spec.training.on_divergence == OnDivergence::kFail) fail("diverged: " + details);
}

void JobRunner::release_nodes() {
  std::vector<NodeId> nodes = job_.servers.nodes();
  nodes.insert(nodes.end(), job_.workers.begin(), job_.workers.end());
  for (NodeId id : nodes) {
    if (NodeInfo* n = job_.cluster.find(id); n != nullptr && n->job == job_.id) n->job.clear();
  }
}

}  // namespace pstrain
