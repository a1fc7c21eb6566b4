// A training session's progress reports to the coordinator: periodic step reports (sent without
// waiting; a "stop" answer is kept for the step loop), evaluation and validation reports with
// their metrics' sums, and the final one. Every report carries this worker's steps done in the
// job, and a step report the bytes exchanged per step since the last.
//
// Thread rules: the session's thread only. Ownership: keeps the reports in flight until answered;
// refers to the session's facts and waits, which outlive it.
#pragma once

#include <kj/async.h>

#include <cstdint>

#include "common/engine/nn/loss.h"
#include "common/rpc/proto/pstrain.capnp.h"
#include "worker/server_chunks.h"
#include "worker/session_context.h"

namespace pstrain {

// What a report says of its examples: the sums over them, and how fast training went.
struct ReportFigures {
  uint32_t epoch = 0;
  uint64_t steps_done = 0;  // this worker's steps in the job
  uint64_t examples = 0;
  double loss_sum = 0;
  uint64_t correct = 0;
  double samples_per_second = 0;
};

class SessionReports {
 public:
  SessionReports(const SessionFacts& facts, SessionWaits& waits) : facts_(facts), waits_(waits) {}

  // A report of `kind`; waits for the answer: whether to go on.
  bool report(kj::WaitScope& wait_scope, proto::Progress::Kind kind, const ReportFigures& figures);
  // A periodic step report, sent without waiting for its answer, with the bytes `counts` grew by
  // per step since the last.
  void report_steps(const ReportFigures& figures, const ExchangeCounts& counts);
  // An EVALUATION (test) or VALIDATION report of `sums` over figures.examples; waits for it.
  void report_evaluation(kj::WaitScope& wait_scope, proto::Split split, const ReportFigures& figures,
                         const nn::LossResult& sums);
  // A step report's answer said stop (the job was cancelled or failed).
  bool coordinator_says_stop() const { return coordinator_says_stop_; }
  // Bytes `counts` grew by since the last step report (the debug log).
  uint64_t bytes_since_report(const ExchangeCounts& counts) const {
    return counts.exchanged_bytes() - reported_pushed_ - reported_pulled_;
  }
  // A session that resumes counts from where it starts, so reports do not go backwards.
  void start_at(uint64_t steps_done) { reported_steps_ = steps_done; }

 private:
  using ProgressRequest =
      capnp::Request<proto::Coordinator::ReportProgressParams, proto::Coordinator::ReportProgressResults>;
  ProgressRequest progress_request(proto::Progress::Kind kind, const ReportFigures& figures);

  const SessionFacts& facts_;
  SessionWaits& waits_;
  bool coordinator_says_stop_ = false;
  struct IgnoreErrors final : kj::TaskSet::ErrorHandler {
    void taskFailed(kj::Exception&&) override {}  // (report_steps handles its errors itself)
  } ignore_errors_;
  kj::TaskSet in_flight_{ignore_errors_};  // step reports sent (each kept until answered)
  // At the last step report: the byte counters and the steps done.
  uint64_t reported_pushed_ = 0, reported_pulled_ = 0, reported_steps_ = 0;
};

}  // namespace pstrain
