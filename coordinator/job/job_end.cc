// JobRunner's end (job_runner.h): finishing, collecting the final parameters into the model
// file, cancel, failure, divergence, and releasing the nodes.
#include "coordinator/job/job_runner.h"

#include "coordinator/job/final_model.h"

#include <algorithm>
#include <cstdio>

#include "common/data/dataset.h"
#include "common/base/error.h"
#include "common/data/job_spec.h"
#include "common/base/log.h"
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
  background_ = log_async_updates(job_)
                    .then([this] { return checkpointer_.final_checkpoint(job_.total_steps()); })
                    .then([this] { return collect_parameters(); })
                    .eagerlyEvaluate([this](kj::Exception&& e) {
    if (e.getType() == kj::Exception::Type::DISCONNECTED && job_.state() == JobState::kRunning) {
      // A server died after the last step: like any server loss, recover (from its last backup;
      // the workers redo the steps after it) and collect again at the end.
      faults_.recover("a server was lost while the trained parameters were collected");
      return;
    }
    fail(std::string("could not collect the trained parameters: ") + e.getDescription().cStr());
  });
}

std::vector<float> JobRunner::final_params() const {
  if (job_.state() != JobState::kSucceeded) return {};
  const auto file = job_.store.model(job_.id);
  if (!file) return {};
  return decode_safetensors(job_.layout, *file).value_or(std::vector<float>{});
}

kj::Promise<void> JobRunner::collect_parameters() {
  return store_final_model(job_).then([this](std::optional<StoredModel> model) {
    if (!model) return;  // cancelled or failed meanwhile
    std::string note;
    if (job_.sync()) {
      const ExampleLedger& ledger = job_.progress.ledger();
      ledger.print_audit(*job_.plan, static_cast<uint32_t>(job_.progress.epochs().size()), job_.prepared.train->size);
      // Where the training data came from (a restarted coordinator counts from its restart).
      note = "training examples served: " + std::to_string(ledger.streamed()) + " streamed by the coordinator, " +
             std::to_string(ledger.read_by_workers()) + " read by workers from the dataset store";
    }
    succeed(model->pieces, model->bytes, job_.total_steps(), note);
  });
}

void JobRunner::stop_early() {
  // Epochs after the one it stopped at are not recorded (their workers may still report them
  // while the checkpoint is awaited: the job ends once it is stored).
  job_.progress.record_no_epoch_from(static_cast<uint32_t>(early_stop_.stopped_epochs()));
  plateau_.release_all();
  background_ = early_stop_.write_model()
                    .then([this](int64_t bytes) {
                      if (job_.state() != JobState::kRunning && job_.state() != JobState::kRecovering) return;
                      succeed(1, bytes, early_stop_.stopped_epochs() * job_.steps_per_epoch(), early_stop_.reason());
                    })
                    .eagerlyEvaluate([this](kj::Exception&& e) { fail(e.getDescription().cStr()); });
}

void JobRunner::succeed(size_t pieces, int64_t bytes, uint64_t steps_done, const std::string& note) {
  job_.phase = JobPhase::kSucceeded;
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

JobRunner::CancelOutcome JobRunner::cancel() {
  if (is_finished(job_.state())) return CancelOutcome::kAlreadyFinished;
  end(JobPhase::kCancelled, "cancelled by request");
  return CancelOutcome::kCancelled;
}

void JobRunner::fail(const std::string& reason) {
  if (is_finished(job_.state())) return;
  PSLOG(kError) << "job " << job_.id << ": FAILED: " << reason;
  end(JobPhase::kFailed, reason);
}

void JobRunner::end(JobPhase phase, const std::string& reason) {
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
