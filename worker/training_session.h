// A worker's run of one assignment: pull the parameters, then for every step stream its batch,
// compute the gradient of the summed loss while the exchange (parameter_exchange.h) pushes what
// backward has finished to the servers, and take the updated values from the replies. After each
// epoch it evaluates its slice of the test split and reports. Meanwhile it follows the
// coordinator's orders: take over a lost worker's slice of a step, pause for an async cut.
//
// The compute runs on this (the event loop's) thread between waits: pushes and the next data
// batches are in flight while nothing else needs the loop.
//
// The class lives in two files: training_session.cc (the step loop, reports, evaluation) and
// session_orders.cc (the coordinator's orders, and the end of a step, where a takeover fits in).
//
// Thread rules: one thread, the one whose event loop run()'s wait scope belongs to.
// Ownership: owns the model and its buffers, the connections to the servers (ServerChunks) and
// the exchange; refers to the io provider and the stop promise, which outlive it.
#pragma once

#include <kj/async-io.h>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/base/aligned.h"
#include "common/data/job_spec.h"
#include "common/engine/nn/data_parallel_model.h"
#include "common/rpc/proto/pstrain.capnp.h"
#include "worker/batch_decode.h"
#include "worker/parameter_exchange.h"
#include "worker/server_chunks.h"
#include "worker/shard_reader.h"
#include "worker/stoppable_wait.h"

namespace pstrain {

struct SessionOptions {
  int replicas = 1;  // compute threads, each on a slice of the batch (factored pushes need one)
  Exchange exchange = Exchange::kForward;
  rpc::ClusterCredential cluster;  // proved on every connection to a server (open: nothing)
  // The node's progress counter (its heartbeats carry it): +1 per step and per evaluation batch.
  // Null: not counted.
  std::atomic<uint64_t>* progress = nullptr;
  // Tests of long steps (issue 33): each step's compute also sleeps this long, on the compute
  // thread, as a slow model would take it. 0 in production.
  uint32_t slow_step_ms = 0;
};

class TrainingSession {
 public:
  // `stop` resolves when the worker must drop everything (preemption done, SIGINT): waits on
  // servers end then, even if a server holds the step.
  TrainingSession(kj::AsyncIoProvider& io, proto::Coordinator::Client coordinator, uint32_t node_id,
                  proto::Assignment::Reader assignment, SessionOptions options, kj::ForkedPromise<void>& stop);
  ~TrainingSession();

  // Runs every remaining step. Returns true when the job is done, false when stopped (the
  // coordinator said stop, or should_stop() turned true). Throws on errors (the caller reports).
  bool run(kj::WaitScope& wait_scope, const std::function<bool()>& should_stop);

 private:
  // One step's exchange once its gradient is complete: pushes what is left, then waits for all
  // replies and takes the new values. If the coordinator asks, first computes and pushes a lost
  // worker's slice of this step (a takeover).
  void finish_step(kj::WaitScope& wait_scope, const GradientSlice& mine, kj::Promise<void> extras);
  // Sync: computes this step's extra slices (Assignment.extraSlices: those of lost workers no free
  // worker replaced) on the step's values and pushes each in its slice's name; adds their loss,
  // correct answers and examples to the step's. Returns the pushes' replies.
  struct StepTotals {
    double loss = 0;
    uint64_t correct = 0, examples = 0;
  };
  kj::Promise<void> compute_extras(kj::WaitScope& wait_scope, uint64_t global_step, uint32_t epoch, uint64_t step,
                                   std::vector<std::unique_ptr<ShardReader>>& readers, StepTotals& totals);
  // A data stream of this worker's: its own slice (slice -1) or an extra one.
  proto::DataStream::Client open_shard(proto::Split split, uint32_t epoch, uint64_t from_step, int64_t slice);

  // Keeps a watch call open at the coordinator for its orders (takeover, pause for a cut).
  void watch_for_orders();
  // Async cut: tells the coordinator where this worker stands and waits until it may go on.
  void pause_for_cut(kj::WaitScope& wait_scope, uint32_t epoch, uint64_t step);
  // Computes the lost worker's gradient on the step's version and pushes it in its name;
  // returns the replies.
  kj::Promise<void> take_over(kj::WaitScope& wait_scope);
  using ProgressRequest =
      capnp::Request<proto::Coordinator::ReportProgressParams, proto::Coordinator::ReportProgressResults>;
  ProgressRequest progress_request(proto::Progress::Kind kind, uint32_t epoch, uint64_t examples, double loss_sum,
                                   uint64_t correct, double samples_per_second);
  // A progress report; waits for the answer: whether to go on.
  bool report(kj::WaitScope& wait_scope, proto::Progress::Kind kind, uint32_t epoch, uint64_t examples,
              double loss_sum, uint64_t correct, double samples_per_second);
  // A periodic progress report, sent without waiting for its answer.
  void report_steps(uint32_t epoch, uint64_t examples, double loss_sum, uint64_t correct, double samples_per_second);
  void evaluate(kj::WaitScope& wait_scope, uint32_t epoch, double train_rate);
  // One split's slices (the worker's own and its extras), reported as one EVALUATION (test) or
  // VALIDATION report.
  void evaluate_split(kj::WaitScope& wait_scope, proto::Split split, uint32_t epoch, double train_rate);

  template <typename T>
  T wait(kj::WaitScope& wait_scope, kj::Promise<T>&& promise);

  // What every batch must hold for the model (decode_batch checks it).
  BatchShape batch_shape() const {
    return model_batch_shape(spec_.loss, model_->input_size(), model_->output_size());
  }

  kj::AsyncIoProvider& io_;
  kj::ForkedPromise<void>& stop_;
  // Fulfilled when the coordinator answers the watch call with an error: the job was re-planned
  // (a recovery) and this session is stale. Every wait() of the session then fails, so a session
  // blocked on a call that will never be answered (a server that lost the connection without the
  // reset reaching us: a partition, a reboot) ends and asks for the new plan. A watch that breaks
  // with the connection (the coordinator restarted) does not end the session.
  kj::PromiseFulfillerPair<void> replanned_ = kj::newPromiseAndFulfiller<void>();
  kj::ForkedPromise<void> replanned_signal_ = replanned_.promise.fork();
  proto::Coordinator::Client coordinator_;
  uint32_t node_id_;
  std::string job_id_;
  JobSpec spec_;
  uint32_t worker_index_, worker_count_;  // this worker's slice, and the job's slices
  std::vector<uint32_t> extra_slices_;     // sync: other slices it computes (compute_extras)
  std::vector<AlignedFloats> extra_grads_;  // one per extra slice (a push reads it until its reply)
  AlignedFloats extra_inputs_;
  std::vector<float> extra_labels_;  // targets (batch_decode.h)
  std::vector<uint32_t> extra_ids_;  // the extra slice's examples' indices (nn::ExampleKeys)
  uint64_t steps_per_epoch_;
  uint32_t start_epoch_;
  uint64_t start_step_;
  uint64_t generation_;
  std::unique_ptr<nn::DataParallelModel<float>> model_;
  ServerChunks servers_;
  rpc::ClusterCredential cluster_;  // proved on the connections to the servers
  std::atomic<uint64_t>* progress_;  // the node's (SessionOptions::progress), or null
  uint32_t slow_step_ms_;
  std::unique_ptr<ParameterExchange> exchange_;  // refers to servers_ and model_
  AlignedFloats grads_, inputs_;
  std::vector<float> labels_;  // the step's targets (batch_decode.h): max batch x target size
  std::vector<uint32_t> ids_;  // this step's examples' indices (nn::ExampleKeys)
  uint64_t steps_done_ = 0;  // this worker's steps in the job
  // A takeover order from the coordinator (see watch_for_orders), decoded.
  struct Takeover {
    uint64_t step = 0;
    uint32_t slice = 0, slice_count = 1, examples = 0;
    AlignedFloats inputs;
    std::vector<float> labels;
    uint32_t epoch = 0;
    std::vector<uint32_t> ids;  // the examples' indices (nn::ExampleKeys)
  };
  std::optional<Takeover> takeover_;
  uint64_t pause_cut_ = 0;                              // async: a cut to pause for, 0 if none
  kj::Maybe<kj::ForkedPromise<void>> takeover_arrived_;  // the open watch call (resolves with an order)
  AlignedFloats takeover_grads_;
  bool coordinator_says_stop_ = false;  // a report's answer: the job was cancelled or failed
  struct IgnoreErrors final : kj::TaskSet::ErrorHandler {
    void taskFailed(kj::Exception&&) override {}  // (report_steps handles its errors itself)
  } ignore_errors_;
  kj::TaskSet reports_{ignore_errors_};  // periodic reports in flight (each kept until answered)
  double compute_seconds_ = 0, exchange_seconds_ = 0;  // since the last report (debug log)
  // At the last periodic report: servers_'s byte counters and steps_done_.
  uint64_t reported_pushed_ = 0, reported_pulled_ = 0, reported_steps_ = 0;
};

template <typename T>
T TrainingSession::wait(kj::WaitScope& wait_scope, kj::Promise<T>&& promise) {
  auto unless_replanned = promise.exclusiveJoin(replanned_signal_.addBranch().then([]() -> kj::Promise<T> {
    return KJ_EXCEPTION(FAILED, "the coordinator re-planned the job: this session is stale");
  }));
  return wait_unless_stopped(kj::mv(unless_replanned), stop_, wait_scope);
}

}  // namespace pstrain
