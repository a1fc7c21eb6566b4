// A worker's run of one assignment: pull the parameters, then for every step stream its batch,
// compute the gradient of the summed loss, push it chunk by chunk to the servers (all chunks in
// flight at once) and take the updated values from the replies. After each epoch it evaluates
// its slice of the test split and reports.
//
// The compute runs on this (the event loop's) thread between waits: pushes and the next data
// batches are in flight while nothing else needs the loop.
//
// The class lives in three files: training_session.cc (the step loop, reports, evaluation),
// session_exchange.cc (pulls, pushes and replies) and session_orders.cc (the coordinator's
// orders: takeovers and pauses for async cuts).
//
// Thread rules: one thread, the one whose event loop `wait_scope` belongs to.
#pragma once

#include <kj/async-io.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/aligned.h"
#include "common/chunk_plan.h"
#include "common/job_spec.h"
#include "common/nn/data_parallel_model.h"
#include "common/proto/pstrain.capnp.h"
#include "common/rpc/rpc_util.h"
#include "worker/factor_plan.h"
#include "worker/first_layer_forward.h"
#include "worker/input_sparsity.h"

namespace pstrain {

// How a worker exchanges parameters and gradients with the servers (docs/DESIGN-NOTES.md).
enum class Exchange {
  kDense,     // whole chunks both ways
  kSparse,    // row-sparse pushes and replies of a dense first layer on sparse inputs (input_sparsity.h)
  kFactored,  // kSparse, and dense kernels pushed as factors where they are smaller (factor_plan.h)
  kForward,   // kFactored, and the servers compute the first layer's product for the next batch
              // (common/nn/row_groups.h) and reply with it instead of that layer's values
};

struct SessionOptions {
  int replicas = 1;  // compute threads, each on a slice of the batch (factored pushes need one)
  Exchange exchange = Exchange::kForward;
};

class TrainingSession {
 public:
  // `stop` resolves when the worker must drop everything (preemption done, SIGINT): waits on
  // servers end then, even if a server holds the step.
  TrainingSession(kj::AsyncIoProvider& io, kj::WaitScope& wait_scope, proto::Coordinator::Client coordinator,
                  uint32_t node_id, proto::Assignment::Reader assignment, SessionOptions options,
                  kj::ForkedPromise<void>& stop);
  ~TrainingSession();

  // Runs every remaining step. Returns true when the job is done, false when stopped (the
  // coordinator said stop, or should_stop() turned true). Throws on errors (the caller reports).
  bool run(const std::function<bool()>& should_stop);

 private:
  void connect_servers();
  // Every chunk's values at a version >= min_version (exactly min_version when `exact`) into
  // `into`; their versions into `versions`.
  void pull_all(uint64_t min_version, AlignedFloats& into, std::vector<uint64_t>& versions, bool exact = false);
  // Sends the push of chunk k (its gradient must be final); the reply is collected by finish_push.
  void push_chunk(size_t k, uint64_t step, uint32_t examples);
  // Sends factor group g's pushFactors (its layer's backward must be done); likewise.
  void push_factors(size_t g, uint64_t step, uint32_t examples);
  using PushFactorsRequest =
      capnp::Request<proto::ParameterServer::PushFactorsParams, proto::ParameterServer::PushFactorsResults>;
  // The rest of push_factors for the first layer's group g under forward on the servers: sends
  // the next batch's rows and inputs, and takes the reply's partial product.
  void push_factors_forward(size_t g, PushFactorsRequest& request, const capnp::Orphanage& orphanage);
  // Pushes what backward has finished: the chunks and factor groups at or after `final_from`.
  void push_final(size_t final_from, uint64_t step, uint32_t examples);
  // One chunk's push of `gradient` as slice `slice` of `slice_count`; the reply's values go to
  // next_params_ when `take_values`. Row-sparse when `ranges` (push) / `want` (reply) say so.
  kj::Promise<void> send_push(size_t k, uint64_t step, uint32_t slice, uint32_t slice_count, uint32_t examples,
                              const float* gradient, bool take_values, const InputSparsity::Ranges& ranges,
                              const InputSparsity::Ranges& want);
  // Sets push_ranges_ (the rows `batch` touches) and reply_ranges_ (the rows the next step
  // touches: the next batch of this epoch if it is here already; all before an evaluation).
  void plan_sparse_exchange(proto::Batch::Reader batch, class ShardReader& reader, bool last_step_of_epoch);
  // Pushes every chunk not pushed yet, then waits for all replies and takes the new values. If the
  // coordinator asks, first computes and pushes a lost worker's slice of this step (a takeover).
  void finish_push(uint64_t step, uint32_t examples);

  // Keeps a watch call open at the coordinator for its orders (takeover, pause for a cut).
  void watch_for_orders();
  // Async cut: tells the coordinator where this worker stands and waits until it may go on.
  void pause_for_cut(uint32_t epoch, uint64_t step);
  // Computes the lost worker's gradient on params_ (still the step's version) and pushes it in
  // its name; returns the replies.
  kj::Promise<void> take_over();
  bool report(proto::Progress::Kind kind, uint32_t epoch, uint64_t examples, double loss_sum, uint64_t correct,
              double samples_per_second, const std::string& message = "");
  // A periodic progress report, sent without waiting for its answer.
  void report_steps(uint32_t epoch, uint64_t examples, double loss_sum, uint64_t correct, double samples_per_second);
  void evaluate(uint32_t epoch, double train_rate);

  template <typename T>
  T wait(kj::Promise<T>&& promise);

  kj::AsyncIoProvider& io_;
  kj::WaitScope& wait_scope_;
  kj::ForkedPromise<void>& stop_;
  proto::Coordinator::Client coordinator_;
  uint32_t node_id_;
  std::string job_id_;
  JobSpec spec_;
  uint32_t worker_index_, worker_count_;
  uint64_t steps_per_epoch_;
  uint32_t start_epoch_;
  uint64_t start_step_;
  std::vector<ChunkInfo> chunks_;
  std::vector<size_t> chunk_offsets_;  // where each chunk lives in the flat buffers
  std::vector<uint64_t> versions_;     // per chunk
  std::vector<std::string> server_addresses_;
  std::vector<kj::Own<rpc::Connection>> connections_;
  std::vector<proto::ParameterServer::Client> servers_;
  std::unique_ptr<nn::DataParallelModel<float>> model_;
  // params_ holds the version the current step computes on; replies fill next_params_, and the
  // two swap when the step's last reply is in (every step pushes, and so refreshes, every chunk:
  // all of it, or with the sparse exchange the rows the next step reads).
  // Keeping the step's version intact until then is what lets this worker take over a lost
  // worker's slice of the step.
  AlignedFloats params_, next_params_, grads_, inputs_;
  // Row-sparse exchange (input_sparsity.h). With it, params_ is only guaranteed to be current in
  // the rows the step's batch touches: anything else that computes (the end-of-epoch
  // evaluation, a takeover) gets dense values first.
  InputSparsity sparsity_;
  bool sparse_exchange_;
  std::vector<uint8_t> feature_mask_;
  std::vector<InputSparsity::Ranges> push_ranges_, reply_ranges_;  // per chunk, for the current step
  AlignedFloats takeover_params_;
  std::vector<size_t> push_order_;         // unfactored chunks by descending offset: the order backward completes them
  size_t pushed_ = 0;                      // chunks of the current step already sent
  // Factored exchange (factor_plan.h): the groups by descending offset, the step's sent ones, and
  // what each sends (kept until its reply: the messages point into them).
  FactorPlan factor_plan_;
  std::vector<size_t> group_order_;
  size_t groups_pushed_ = 0;
  struct GroupBuffers {
    std::vector<uint32_t> rows;
    AlignedFloats inputs;
  };
  std::vector<GroupBuffers> group_buffers_;
  std::vector<AlignedFloats> factor_deltas_;  // by layout parameter (factored kernels only)
  // Forward on the servers (Exchange::kForward, first_layer_forward.h): set when the first
  // kernel (layout index first_kernel_, grouped by server) is pushed as factors.
  int first_kernel_ = -1;
  std::optional<FirstLayerForward> forward_;
  uint64_t late_pushes_ = 0;  // pushes a sync step with backup workers dropped (logged)
  std::vector<uint64_t> deltas_round_;        // the exchange round factor_deltas_[p] was copied in
  uint64_t exchange_round_ = 1;               // steps' exchanges (and takeovers') in this session
  kj::Vector<kj::Promise<void>> replies_;  // of the current step
  std::vector<int32_t> labels_;
  uint64_t steps_done_ = 0;  // this worker's steps in the job
  uint64_t generation_;
  // A takeover order from the coordinator (see watch_for_takeover), decoded.
  struct Takeover {
    uint64_t step = 0;
    uint32_t slice = 0, slice_count = 1, examples = 0;
    AlignedFloats inputs;
    std::vector<int32_t> labels;
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
  uint64_t exchanged_bytes_ = 0;                       // gradient and values, likewise
};

template <typename T>
T TrainingSession::wait(kj::Promise<T>&& promise) {
  return promise
      .exclusiveJoin(stop_.addBranch().then([]() -> kj::Promise<T> {
        return KJ_EXCEPTION(DISCONNECTED, "the worker is stopping");
      }))
      .wait(wait_scope_);
}

}  // namespace pstrain
