// A worker's run of one assignment: pull the parameters, then for every step stream its batch,
// compute the gradient of the summed loss while the exchange (parameter_exchange.h) pushes what
// backward has finished to the servers, and take the updated values from the replies. After each
// epoch it evaluates its slice of the test split and reports. Meanwhile it follows the
// coordinator's orders: take over a lost worker's slice of a step, pause for an async cut.
//
// The compute runs on this (the event loop's) thread between waits: pushes and the next data
// batches are in flight while nothing else needs the loop.
//
// Its parts: SessionOrders (session_orders.h: the coordinator's orders, the extra slices, and the
// end of a step, where a takeover fits in), SessionReports (session_reports.h: progress reports),
// ServerChunks (server_chunks.h: the parameters on the servers), the exchange and, for a model
// with sparse tables, SessionTables (session_tables.h: a step's rows); this class is the step
// loop and the evaluation.
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
#include "common/engine/nn/data_parallel_model.h"
#include "common/rpc/proto/pstrain.capnp.h"
#include "worker/batch_decode.h"
#include "worker/parameter_exchange.h"
#include "worker/server_chunks.h"
#include "worker/session_context.h"
#include "worker/session_orders.h"
#include "worker/session_reports.h"
#include "worker/session_tables.h"

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
  // Reads the training examples from the dataset store when the assignment names one this
  // worker sees (store_stream.h); false: always through the coordinator (--data-from coordinator).
  bool read_store = true;
  // Mixed precision: the kernels only bfloat16 products read come back in bfloat16
  // (ServerChunks::reply_rounded); false: float32 (--kernel-replies float32, for comparisons).
  bool bf16_kernel_replies = true;
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
  // Reads the training and test splits from the store the assignment names when this worker
  // sees it (facts_.store, facts_.test_store; the log says which for training, and why).
  void open_stores(proto::StoredShards::Reader train, proto::StoredShards::Reader test);
  // The test split's slices (the worker's own and its extras), reported as one EVALUATION report,
  // then the validation split's (if any) as a VALIDATION report.
  void evaluate(kj::WaitScope& wait_scope, uint32_t epoch, double train_rate);
  // reduce_on_plateau: epoch `epoch`'s learning-rate multiplier from the coordinator (waits until
  // the epoch before is recorded).
  float epoch_lr_scale(kj::WaitScope& wait_scope, uint32_t epoch);
  void evaluate_split(kj::WaitScope& wait_scope, proto::Split split, uint32_t epoch, double train_rate);

  // What every batch must hold for the model (decode_batch checks it).
  BatchShape batch_shape() const {
    return model_batch_shape(facts_.spec.loss, model_->input_size(), model_->output_size());
  }

  kj::AsyncIoProvider& io_;
  SessionWaits waits_;
  SessionFacts facts_;
  uint32_t start_epoch_;
  uint64_t start_step_;
  std::unique_ptr<nn::DataParallelModel<float>> model_;
  ServerChunks servers_;
  rpc::ClusterCredential cluster_;  // proved on the connections to the servers
  std::atomic<uint64_t>* progress_;  // the node's (SessionOptions::progress), or null
  uint32_t slow_step_ms_;
  std::unique_ptr<ParameterExchange> exchange_;  // refers to servers_ and model_
  std::unique_ptr<SessionTables> tables_;        // the sparse tables' rows; null without any
  std::unique_ptr<SessionOrders> orders_;        // refers to the above
  SessionReports reports_;
  AlignedFloats grads_, inputs_;
  std::vector<float> labels_;  // the step's targets (batch_decode.h): max batch x target size
  std::vector<uint32_t> ids_;  // this step's examples' indices (nn::ExampleKeys)
  uint64_t steps_done_ = 0;  // this worker's steps in the job
  double compute_seconds_ = 0, exchange_seconds_ = 0;  // since the last report (debug log)
};

}  // namespace pstrain
